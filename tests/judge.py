"""How the learning tests judge a trained policy: by an evaluation of its own (fresh environments, deterministic
actions, not the training log) against the trivial policies, zero and random actions, evaluated alike.
MJFLEET_LEARNING_TEST_POLICY=zero swaps zero actions in for the trained policy, to see the tests fail as they should.
"""

import copy
import os

import torch

from mjfleet.evaluation import early_terminations, evaluate, random_policy, zero_policy
from mjfleet.tasks import get_task

SWAP_IN_ZERO_POLICY = os.environ.get("MJFLEET_LEARNING_TEST_POLICY") == "zero"


def against_baselines(task: str, trained, episodes: int = 32, num_envs: int = 16, seed: int = 1,
                       prepare=None, train_env: bool = False) -> dict[str, dict]:  # fmt: skip
    """Evaluate the trained deterministic policy (`trained(env)` builds it), zero actions and random actions alike:
    each on fresh environments built and reset from the same seed (same physics draws, initial states and
    commands), with the task's play settings (what `play` evaluates) or, with `train_env`, as trained (what
    `play --train-env` evaluates). `prepare(cfg)` may change that config."""
    spec = get_task(task)
    cfg = spec.env_config() if train_env else spec.play_env_config()
    cfg.num_envs = num_envs
    if prepare is not None:
        prepare(cfg)
    builders = {"trained": trained, "zero": zero_policy, "random": lambda env: random_policy(env, seed)}
    if SWAP_IN_ZERO_POLICY:
        builders["trained"] = zero_policy
    results = {name: evaluate_on(spec, cfg, build, episodes, seed) for name, build in builders.items()}
    print({name: brief(r) for name, r in results.items()})  # shown by pytest when an assertion fails
    return results


def evaluate_on(spec, cfg, build, episodes: int, seed: int) -> dict:
    """`build(env)`'s policy evaluated on fresh environments of `cfg`, built and reset from `seed`."""
    torch.manual_seed(seed)
    env = spec.make_env(copy.deepcopy(cfg))
    policy = build(env)
    torch.manual_seed(seed)
    return evaluate(env, policy, episodes)


def runner_policy(runner):
    return lambda env: runner.get_inference_policy()


def brief(result: dict) -> dict:
    return {
        "return": round(result["mean_return"], 3),
        "length": round(result["mean_episode_length"], 1),
        **{k: round(v, 3) for k, v in result["metrics"].items() if not k.startswith("sim_")},
        "ended_early": early_terminations(result),
        "ended": result["episodes_ended"],
    }


def clear_margin(results: dict, max_return: float) -> float:
    """What only learning earns: the best trivial policy's return plus half of what it leaves to the maximum.
    (A 0.2 x maximum margin was met at 30 iterations by a return of ~89 of 250, where zero actions earn 39.)"""
    best_baseline = max(results["zero"]["mean_return"], results["random"]["mean_return"])
    return best_baseline + 0.5 * (max_return - best_baseline)

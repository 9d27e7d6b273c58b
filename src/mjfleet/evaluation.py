"""Evaluate a policy on a vectorised environment: returns, episode lengths, the task's metrics and terminations.

`evaluate(env, policy, episodes)` is what `play` runs, and what a training loop can call for periodic
evaluation: it needs only an environment with the rsl_rl `VecEnv` interface and a callable from observations to
actions (with a `reset(dones)` when it keeps a state: `ActorPolicy`), and returns a plain dict (JSON-ready).
`zero_policy` and `random_policy` are the trivial baselines a trained policy should beat.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from mjfleet.ranking import ended_early

Policy = Callable[[Any], torch.Tensor]
BASELINES = ("zero", "random")
METRIC_PREFIX = "Metrics/"
TERMINATION_PREFIX = "Episode_Termination/"
# Episodes that ended before the time limit for a reason the task's log does not name.
UNNAMED_TERMINATION = "terminated"


def zero_policy(env) -> Policy:
    """Always zero actions: for a position-controlled robot, holding the default pose (standing still)."""
    zeros = torch.zeros(env.num_envs, env.num_actions, device=env.device)
    return lambda obs: zeros


def random_policy(env, seed: int = 0) -> Policy:
    """Uniform random actions in the env's action clip range, from a generator of its own (so the env's own
    random draws do not depend on whether this policy or another one acts)."""
    clip = min(float(getattr(env.cfg, "clip_actions", 1.0)), 1.0)
    shape = (env.num_envs, env.num_actions)
    generator = torch.Generator(device=env.device).manual_seed(seed)
    return lambda obs: (torch.rand(shape, device=env.device, generator=generator) * 2.0 - 1.0) * clip


class ActorPolicy:
    """A trained actor as a `Policy` (its mean action, or a sampled one with `stochastic`). A recurrent actor's
    hidden state is what `reset` resets: all of it with no argument, else the environments `dones` marks."""

    def __init__(self, actor, stochastic: bool = False) -> None:
        self.actor, self.stochastic = actor, stochastic

    def __call__(self, obs) -> torch.Tensor:
        return self.actor(obs, stochastic_output=self.stochastic)

    def reset(self, dones: torch.Tensor | None = None) -> None:
        if getattr(self.actor, "is_recurrent", False):
            self.actor.reset(dones)


def on_own_envs(
    make_env: Callable[[], Any], device: str, episodes: int
) -> Callable[[Policy], dict[str, Any]]:
    """A periodic evaluation for a training loop: `evaluate` on environments of its own (`make_env()`, built once,
    outside training's random stream so that evaluating changes nothing in training)."""
    with torch.random.fork_rng(devices=[torch.device(device)] if device.startswith("cuda") else []):
        env = make_env()
    return lambda policy: evaluate(env, policy, episodes)


def evaluate(
    env,
    policy: Policy,
    episodes: int,
    frame_sink: Callable[[], None] | None = None,
    video_length: int = 0,
    on_step: Callable[[], bool] | None = None,
    start: Callable[[], Any] | None = None,
    progress: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
) -> dict[str, Any]:
    """Reset `env`, run `policy(obs) -> actions` until every environment finished ceil(episodes / num_envs)
    episodes, and summarise.

    Returns and episode lengths are those of the first `episodes` of these episodes, taken round by round over
    the environments (so short episodes are not over-represented). The task's log is summarised over every step
    of the evaluation: `metrics` holds each `Metrics/<name>` value as its mean over steps (key `<name>`),
    `terminations` counts the episodes that ended, by cause (`time_out`, the task's `Episode_Termination/<cause>`
    entries, and `terminated` for early ends the task does not name), `episode_metrics` averages the `Episode*`
    entries over those episodes, and `counts` sums the other entries (e.g. `Sim/nan_resets`).

    `frame_sink()`, if given, is called before each of the first `video_length` steps (stepping on past the
    evaluation if needed; those extra steps count nowhere). `on_step()`, if given, is called after the reset and
    after each step of the evaluation (a live viewer); when it returns False the evaluation stops there and
    summarises the episodes finished so far. The policy is called under `torch.inference_mode`; a policy with a
    `reset` (a recurrent actor's hidden state) is reset with the environments and after each step for the
    environments whose episode ended. `start()`, if given, is called after the reset and returns the observations
    to begin from instead (it has put the environments in a state of its own: `play --initial-state`).
    `progress(count, returns)`, if given, is called after each step of the evaluation with the device tensors of
    episodes recorded per environment and their returns (column k: each environment's k-th episode); it reads
    them when it wants to, so that an evaluation nobody watches waits on nothing more (`play`'s bar).
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = env.num_envs
    quota = math.ceil(episodes / n)
    device = env.device
    returns = torch.zeros(n, quota, device=device)
    lengths = torch.zeros(n, quota, device=device)
    count = torch.zeros(n, dtype=torch.long, device=device)
    current_return = torch.zeros(n, device=device)
    current_length = torch.zeros(n, device=device)
    rows = torch.arange(n, device=device)
    episode_sums: dict[str, torch.Tensor] = {}
    metric_sums: dict[str, torch.Tensor] = {}
    count_sums: dict[str, torch.Tensor] = {}
    ended = torch.zeros((), device=device)
    time_outs = torch.zeros((), device=device)
    max_steps = quota * int(env.max_episode_length) + 1
    steps = frames = 0
    evaluated = False
    reset = getattr(policy, "reset", None)
    with torch.inference_mode():
        obs, _ = env.reset()
        if start is not None:
            obs = start()
        if reset is not None:
            reset()
        stopped = on_step is not None and not on_step()
        while True:
            evaluated = evaluated or stopped or steps >= max_steps or bool((count >= quota).all())
            wants_frame = frame_sink is not None and frames < video_length
            if evaluated and not wants_frame:
                break
            if wants_frame:
                frame_sink()
                frames += 1
            obs, rewards, dones, extras = env.step(policy(obs))
            if reset is not None:
                reset(dones)
            if evaluated:
                continue
            dones = dones.bool()
            current_return += rewards
            current_length += 1
            record = dones & (count < quota)
            slot = count.clamp(max=quota - 1)
            returns[rows, slot] = torch.where(record, current_return, returns[rows, slot])
            lengths[rows, slot] = torch.where(record, current_length, lengths[rows, slot])
            count += record.long()
            current_return *= ~dones
            current_length *= ~dones
            finished = extras.get("episodes_finished", dones.sum()).float()
            ended += finished
            step_time_outs = extras.get("time_outs")
            if step_time_outs is not None:
                time_outs += (step_time_outs.bool() & dones).sum()
            for key, value in extras.get("log", {}).items():
                if key.startswith("Episode"):
                    _accumulate(episode_sums, key, value * finished)
                elif key.startswith(METRIC_PREFIX):
                    _accumulate(metric_sums, key[len(METRIC_PREFIX) :], value)
                else:
                    _accumulate(count_sums, key, value)
            steps += 1
            if progress is not None:
                progress(count, returns)
            if on_step is not None and not on_step():
                stopped = True

    valid = (torch.arange(quota, device=device)[None, :] < count[:, None]).T.reshape(-1)
    chosen_returns = returns.T.reshape(-1)[valid][:episodes].double().cpu()
    chosen_lengths = lengths.T.reshape(-1)[valid][:episodes].double().cpu()
    k = len(chosen_returns)
    total_ended = float(ended)
    episode_metrics = {
        key: float(total) / total_ended for key, total in sorted(episode_sums.items()) if total_ended > 0
    }
    return {
        "episodes": k,
        "mean_return": float(chosen_returns.mean()) if k else None,
        "std_return": float(chosen_returns.std(correction=0)) if k else None,
        "min_return": float(chosen_returns.min()) if k else None,
        "max_return": float(chosen_returns.max()) if k else None,
        "mean_episode_length": float(chosen_lengths.mean()) if k else None,
        "std_episode_length": float(chosen_lengths.std(correction=0)) if k else None,
        "max_episode_length": int(env.max_episode_length),
        "metrics": {key: float(total) / max(steps, 1) for key, total in sorted(metric_sums.items())},
        "terminations": _terminations(episode_sums, total_ended, float(time_outs)),
        "episode_metrics": episode_metrics,
        "counts": {key: float(total) for key, total in sorted(count_sums.items())},
        "episodes_ended": round(total_ended),
        "steps": steps,
        "env_steps": steps * n,
        "video_frames": frames,
    }


def _accumulate(sums: dict[str, torch.Tensor], key: str, value) -> None:
    value = torch.as_tensor(value, dtype=torch.float64).detach()
    sums[key] = sums[key] + value if key in sums else value.clone()


def _terminations(episode_sums: dict[str, torch.Tensor], ended: float, time_outs: float) -> dict[str, int]:
    """Episodes ended per cause. The log's `Episode_Termination/<cause>` entries are shares of the episodes that
    ended in a step; weighted by that count they sum to a count of episodes."""
    causes = {
        key[len(TERMINATION_PREFIX) :]: round(float(total))
        for key, total in episode_sums.items()
        if key.startswith(TERMINATION_PREFIX)
    }
    causes.setdefault("time_out", round(time_outs))
    unnamed = round(ended) - sum(causes.values())
    if unnamed > 0:
        causes[UNNAMED_TERMINATION] = unnamed
    return dict(sorted(causes.items()))


def early_terminations(result: dict[str, Any]) -> int:
    """Episodes of an `evaluate` result that ended before the time limit (falls, for a legged robot)."""
    return ended_early(result["terminations"])[0]

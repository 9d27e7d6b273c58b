"""Learning per wall-clock second: train a task in this process and evaluate it every few iterations, independently
of the training log, until an evaluation metric reaches a threshold; then evaluate the zero and random baselines
alike. One JSON line per evaluation (docs/tasks.md, "Learning per wall clock", is made from these).

uv run python scripts/time_to_threshold.py Cartpole-Balance --metric mean_return --threshold 225
uv run python scripts/time_to_threshold.py Quadruped-Velocity-Flat --metric lin_vel_error --threshold 0.25 --below
uv run python scripts/time_to_threshold.py Quadruped-Velocity-Flat --metric lin_vel_error --threshold 0.25 --below \\
    --agent-set algorithm.num_learning_epochs=3 --num-envs 256
uv run python scripts/time_to_threshold.py Humanoid-Velocity-Flat --device cuda:0 --metric lin_vel_error \\
    --threshold 0.15 --below --command 0.5 0 0 --max-early-share 0.05      # issue 20's GPU target

`--metric` is a key of the evaluation result (`mean_return`, `mean_episode_length`) or of its `metrics`
(`lin_vel_error`); with `--max-early-share` the share of evaluated episodes that end early (falls) must also be at
most that. Evaluations use the task's play settings (what `play` evaluates) unless --train-env, and a fixed
velocity command with --command. Training time counts `learn` only (not the evaluations); on CPU the process uses
one torch thread.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import warp as wp

from mjfleet.evaluation import early_terminations, evaluate, random_policy, zero_policy
from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task


def _value(result: dict, metric: str) -> float:
    return float(result[metric] if metric in result else result["metrics"][metric])


def _set(obj, dotted: str) -> None:
    """`algorithm.learning_rate=3e-4` -> obj.algorithm.learning_rate = 3e-4 (typed like the current value)."""
    path, raw = dotted.split("=", 1)
    *parents, name = path.split(".")
    for parent in parents:
        obj = getattr(obj, parent)
    current = getattr(obj, name)
    if isinstance(current, tuple):
        value = tuple(type(current[0])(v) for v in raw.split(","))
    elif isinstance(current, bool):
        value = raw.lower() in ("1", "true")
    else:
        value = type(current)(raw) if current is not None else raw
    setattr(obj, name, value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task")
    parser.add_argument("--metric", default="mean_return")
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--below", action="store_true", help="the metric must fall to the threshold (errors)")
    parser.add_argument("--eval-every", type=int, default=10, help="iterations between evaluations")
    parser.add_argument("--max-iterations", type=int, default=500)
    parser.add_argument("--max-minutes", type=float, default=60.0, help="stop after this much training time")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--eval-envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu", help='"cpu" or "cuda:N" (training and evaluation)')
    parser.add_argument(
        "--num-envs", type=int, default=None, help="training envs (default: the task's count for the device)"
    )
    parser.add_argument(
        "--command", type=float, nargs=3, default=None, metavar=("VX", "VY", "WZ"),
        help="evaluate under this fixed velocity command (locomotion tasks)",
    )  # fmt: skip
    parser.add_argument("--max-early-share", type=float, default=None, help="at most this share of falls")
    parser.add_argument("--train-env", action="store_true", help="evaluate with the training settings")
    parser.add_argument(
        "--agent-set", action="append", default=[], help="agent config override, dotted=value"
    )
    args = parser.parse_args()
    with wp.ScopedDevice(args.device):
        run(args)


def run(args: argparse.Namespace) -> None:
    device = args.device
    if device == "cpu":
        torch.set_num_threads(1)
    spec = get_task(args.task)
    cfg = spec.env_config()
    cfg.num_envs = args.num_envs or spec.default_num_envs(device)
    agent = spec.default_agent_config(device)
    agent.logger = "none"
    agent.seed = args.seed
    for override in args.agent_set:
        _set(agent, override)
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg, device), agent, None, device, log_format="compact")

    eval_cfg = spec.env_config() if args.train_env else spec.play_env_config()
    eval_cfg.num_envs = args.eval_envs
    if args.command is not None:
        eval_cfg.commands.fix(*args.command)
    eval_env = spec.make_env(eval_cfg, device)

    def judge(policy_for) -> dict:
        with torch.random.fork_rng():  # evaluations leave the training's random stream alone
            torch.manual_seed(args.seed)
            return evaluate(eval_env, policy_for(eval_env), args.episodes)

    def line(name: str, result: dict, **extra) -> dict:
        row = {
            "task": args.task,
            "policy": name,
            **extra,
            args.metric: _value(result, args.metric),
            "mean_return": result["mean_return"],
            "mean_episode_length": result["mean_episode_length"],
            "ended_early": early_terminations(result),
            "episodes_ended": result["episodes_ended"],
        }
        print(json.dumps(row), flush=True)
        return row

    train_s = 0.0
    first = True
    reached = False
    while runner.current_learning_iteration < args.max_iterations and train_s < 60 * args.max_minutes:
        start = time.perf_counter()
        runner.learn(args.eval_every, init_at_random_ep_len=first)
        train_s += time.perf_counter() - start
        first = False
        trained = runner.get_inference_policy()
        result = judge(lambda env, trained=trained: trained)
        value = _value(result, args.metric)
        line("trained", result, iteration=runner.current_learning_iteration, env_steps=runner.env_steps,
             train_s=round(train_s, 1))  # fmt: skip
        met = (value <= args.threshold) if args.below else (value >= args.threshold)
        early_share = early_terminations(result) / max(result["episodes_ended"], 1)
        if met and (args.max_early_share is None or early_share <= args.max_early_share):
            reached = True
            break
    print(json.dumps({"reached": reached, "threshold": args.threshold}), flush=True)
    line("zero", judge(zero_policy))
    line("random", judge(lambda env: random_policy(env, args.seed)))


if __name__ == "__main__":
    main()

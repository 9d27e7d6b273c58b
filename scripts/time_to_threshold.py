"""Learning per wall-clock second: train a task in this process and evaluate it every few iterations, independently
of the training log, until an evaluation metric reaches a threshold. The zero and random baselines are evaluated
alike first (so that a run stopped from outside still has them). One JSON line per evaluation (docs/tasks.md,
"Learning per wall clock", is made from these).

uv run python scripts/time_to_threshold.py Cartpole-Balance --metric mean_return --threshold 225
uv run python scripts/time_to_threshold.py Quadruped-Velocity-Flat --metric lin_vel_error --threshold 0.25 --below
uv run python scripts/time_to_threshold.py Quadruped-Velocity-Flat --metric lin_vel_error --threshold 0.25 --below \\
    --agent-set ppo.num_learning_epochs=3 --num-envs 256
uv run python scripts/time_to_threshold.py Humanoid-Velocity-Flat --device cuda:0 --metric lin_vel_error \\
    --threshold 0.15 --below --command 0.5 0 0 --random-threshold 0.25 --max-early-share 0.05 \\
    --save-best pretrained/Humanoid-Velocity-Flat       # issue 46's GPU stage: scripts/gpu_checks.sh humanoid-learn

`--metric` is a key of the evaluation result (`mean_return`, `mean_episode_length`) or of its `metrics`
(`lin_vel_error`); with `--max-early-share` the share of evaluated episodes that end early (falls) must also be at
most that. Evaluations use the task's play settings (what `play` evaluates) unless --train-env, and a fixed
velocity command with --command; --random-threshold judges random commands too, and then both must be met.
`--env-set` changes the env settings of training and evaluation alike (a recipe question: `rewards.alive=0.5`).
Training time counts `learn` only (not the evaluations); `--max-wall-minutes` bounds everything, from the start
(imports, kernel compilation, evaluations). `--save-best DIR` keeps the best evaluated checkpoint as
`play --pretrained` reads it (model.pt and pretrained.json: src/mjfleet/deploy/pretrained.py). Best is
`mjfleet.ranking`'s rule (`score`): passing first, then the worst judge's share of falls in steps of 5 points,
then the worst judge's metric over its threshold; pretrained.json's "chosen_by" records the rule and the kept
policy's falls. On CPU the process uses one torch thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

import torch
import warp as wp

from mjfleet.deploy.pretrained import write_pretrained
from mjfleet.evaluation import early_terminations, evaluate, random_policy, zero_policy
from mjfleet.ranking import FALLS_STEP_PERCENT, RULE, RankKey, ended_early, rank_key
from mjfleet.rl import FleetRunner
from mjfleet.runs.checkpoints import read_checkpoint
from mjfleet.tasks import get_task

START = time.perf_counter()


def _value(result: dict, metric: str) -> float:
    return float(result[metric] if metric in result else result["metrics"][metric])


def _set(obj, dotted: str) -> None:
    """`ppo.learning_rate=3e-4` -> obj.ppo.learning_rate = 3e-4 (typed like the current value); through a recipe,
    `rewards.alive=0.5` sets that entry's weight and `rewards.alive.params.x=1` a parameter."""
    from mjfleet.envs.terms import Term

    path, raw = dotted.split("=", 1)
    *parents, name = path.split(".")
    for parent in parents:
        obj = obj[parent] if isinstance(obj, dict) else getattr(obj, parent)
    if isinstance(obj, dict) and isinstance(obj.get(name), Term):
        obj, name = obj[name], "weight"
    current = obj[name] if isinstance(obj, dict) else getattr(obj, name)
    if isinstance(current, tuple):
        value = tuple(type(current[0])(v) for v in raw.split(","))
    elif isinstance(current, bool):
        value = raw.lower() in ("1", "true")
    else:
        value = type(current)(raw) if current is not None else raw
    if isinstance(obj, dict):
        obj[name] = value
    else:
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
    parser.add_argument(
        "--max-wall-minutes", type=float, default=None, help="start no training after this much time in all"
    )
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
    parser.add_argument(
        "--random-threshold", type=float, default=None,
        help="with --command: judge random commands too, against this threshold of --metric",
    )  # fmt: skip
    parser.add_argument("--max-early-share", type=float, default=None, help="at most this share of falls")
    parser.add_argument("--train-env", action="store_true", help="evaluate with the training settings")
    parser.add_argument(
        "--agent-set", action="append", default=[], help="agent config override, dotted=value"
    )
    parser.add_argument(
        "--env-set", action="append", default=[], help="env config override (training and evaluation)"
    )
    parser.add_argument("--save-best", type=pathlib.Path, default=None, help="keep the best checkpoint here")
    args = parser.parse_args()
    if args.random_threshold is not None and args.command is None:
        parser.error("--random-threshold judges random commands beside --command's: pass --command")
    with wp.ScopedDevice(args.device):
        run(args)


def device_name(device: str) -> str:
    """The device as a reader knows it: the GPU's name, else the CPU's core count."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({os.cpu_count()} cores)"


def commit() -> str:
    """The commit trained: MJFLEET_COMMIT (a copy of the tree without .git, as on a lent GPU machine), else git's."""
    if os.environ.get("MJFLEET_COMMIT"):
        return os.environ["MJFLEET_COMMIT"]
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=pathlib.Path(__file__).parent,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else "unknown"


def score(
    results: dict[str, dict],
    thresholds: dict[str, float],
    metric: str,
    below: bool,
    max_early_share: float | None,
) -> RankKey:
    """The evaluation by every judge (`results`, judge -> `evaluate`'s summary) as `mjfleet.ranking`'s key, smaller
    is better: passing (every judge within `max_early_share` of falls and its threshold met) first, then the
    worst judge's share of falls in steps of 5 points, then the worst judge's `metric` over its threshold."""
    ratios, falls, falls_ok = [], [], True
    for name, threshold in thresholds.items():
        value = _value(results[name], metric)
        ratios.append(value / threshold if below else threshold / max(value, 1e-9))
        early, ended = ended_early(results[name]["terminations"])
        falls.append((early, ended))
        falls_ok &= max_early_share is None or early / max(ended, 1) <= max_early_share
    worst = max(ratios)
    return rank_key(worst, "minimize", falls, passing=falls_ok and worst <= 1.0)


def summary(result: dict, metric: str) -> dict:
    """What a curve plots of one evaluation."""
    early, ended = ended_early(result["terminations"])
    return {
        metric: _value(result, metric),
        "falls": early,
        "episodes_ended": result["episodes_ended"],
        "ended_early_share": round(early / ended, 4) if ended else None,
        "mean_episode_length": result["mean_episode_length"],
        "mean_return": result["mean_return"],
    }


def run(args: argparse.Namespace) -> None:
    device = args.device
    if device == "cpu":
        torch.set_num_threads(1)
    spec = get_task(args.task)
    cfg = spec.env_config()
    for override in args.env_set:
        _set(cfg, override)
    cfg.num_envs = args.num_envs or spec.default_num_envs(device)
    agent = spec.default_agent_config(device)
    agent.logger = "none"
    agent.seed = args.seed
    for override in args.agent_set:
        _set(agent, override)
    torch.manual_seed(agent.seed)
    info = {"task": args.task, "env_cfg": dataclasses.asdict(cfg)}
    runner = FleetRunner(
        spec.make_env(cfg, device), agent, None, device, log_format="compact", checkpoint_info=info
    )

    def eval_env(command):
        eval_cfg = spec.env_config() if args.train_env else spec.play_env_config()
        for override in args.env_set:
            _set(eval_cfg, override)
        eval_cfg.num_envs = args.eval_envs
        if command is not None:
            eval_cfg.commands.fix(*command)
        return spec.make_env(eval_cfg, device)

    # The first judge decides with --threshold; "random" (random commands) with --random-threshold.
    judges = {"command" if args.command is not None else "random": (eval_env(args.command), args.threshold)}
    if args.random_threshold is not None:
        judges["random"] = (eval_env(None), args.random_threshold)
    primary = next(iter(judges))

    def judge(env, policy_for) -> dict:
        with torch.random.fork_rng():  # evaluations leave the training's random stream alone
            torch.manual_seed(args.seed)
            return evaluate(env, policy_for(env), args.episodes)

    def line(name: str, results: dict, **extra) -> dict:
        first = results[primary]
        row = {
            "task": args.task,
            "policy": name,
            **extra,
            args.metric: _value(first, args.metric),
            "mean_return": first["mean_return"],
            "mean_episode_length": first["mean_episode_length"],
            "ended_early": early_terminations(first),
            "episodes_ended": first["episodes_ended"],
            "command": args.command,
            **{k: summary(r, args.metric) for k, r in results.items() if k != primary},
        }
        print(json.dumps(row), flush=True)
        return row

    baselines = {
        "zero": {k: judge(env, zero_policy) for k, (env, _) in judges.items()},
        "random": {k: judge(env, lambda e: random_policy(e, args.seed)) for k, (env, _) in judges.items()},
    }
    for name, results in baselines.items():
        line(name, results)

    train_s = 0.0
    first = True
    reached = False
    best = None
    while (
        runner.current_learning_iteration < args.max_iterations
        and train_s < 60 * args.max_minutes
        and (args.max_wall_minutes is None or time.perf_counter() - START < 60 * args.max_wall_minutes)
    ):
        start = time.perf_counter()
        runner.learn(args.eval_every, init_at_random_ep_len=first)
        train_s += time.perf_counter() - start
        first = False
        trained = runner.get_inference_policy()
        results = {k: judge(env, lambda e, trained=trained: trained) for k, (env, _) in judges.items()}
        line("trained", results, iteration=runner.current_learning_iteration, env_steps=runner.env_steps,
             train_s=round(train_s, 1), train_min=round(train_s / 60, 2),
             wall_min=round((time.perf_counter() - START) / 60, 2))  # fmt: skip
        thresholds = {name: threshold for name, (_, threshold) in judges.items()}
        key = score(results, thresholds, args.metric, args.below, args.max_early_share)
        if args.save_best is not None and (best is None or key < best):
            best = key
            save_best(args, runner, results, baselines, train_s, key)
        if not key.failing:
            reached = True
            break
    print(json.dumps({"reached": reached, "threshold": args.threshold, "random_threshold": args.random_threshold,
                      "iteration": runner.current_learning_iteration, "train_s": round(train_s, 1),
                      "wall_min": round((time.perf_counter() - START) / 60, 2)}), flush=True)  # fmt: skip


def save_best(args, runner, results: dict, baselines: dict, train_s: float, key: RankKey) -> None:
    """The runner's policy as a pretrained folder in --save-best, with how it was made, judged and chosen (`key`:
    its `score`)."""
    with tempfile.TemporaryDirectory() as tmp:
        full = pathlib.Path(tmp) / "model.pt"
        runner.save(full)
        state = read_checkpoint(full)
    provenance = {
        "task": args.task,
        "training_command": shlex.join(["python3", "scripts/time_to_threshold.py", *sys.argv[1:]]),
        "device": device_name(args.device),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "iteration": runner.current_learning_iteration,
        "env_steps": runner.env_steps,
        "train_minutes": round(train_s / 60, 2),
        "seed": args.seed,
        "evaluation": {
            "how": f"mjfleet.evaluation.evaluate (what play runs), {args.episodes} episodes on {args.eval_envs} "
            f"envs, deterministic, {'training' if args.train_env else 'play'} settings, seed {args.seed}",
            "command": args.command,
            "trained": {k: summary(r, args.metric) for k, r in results.items()},
            **{name: {k: summary(r, args.metric) for k, r in rs.items()} for name, rs in baselines.items()},
        },
        "chosen_by": {
            "rule": RULE,
            "falls_step_percent": FALLS_STEP_PERCENT,
            "passing": not key.failing,
            "ended_early": {k: list(ended_early(r["terminations"])) for k, r in results.items()},
            "worst_ratio_to_threshold": key.cost if math.isfinite(key.cost) else None,
        },
    }
    write_pretrained(args.save_best, state, provenance)


if __name__ == "__main__":
    main()

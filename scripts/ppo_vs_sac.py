"""PPO against SAC at equal wall clock, judged independently of the training logs (issue 34's evidence).

For every seed, each algorithm trains with `train` exactly as a user runs it (the task's defaults for this machine,
`--seed S`), and is stopped with SIGINT (Ctrl-C) when `--minutes` of wall clock have passed since its launch, start-up
and kernel loading included. Then `play` evaluates the final checkpoint with the deterministic policy, a fixed seed
and, for the locomotion tasks, a fixed command; the first evaluation also runs the zero and random baselines.
With `--curve sac` (or ppo), every checkpoint such a run kept (`--save-every` iterations) is evaluated the same
way, so the environment steps at which an algorithm first reached a tracking error can be read off. One JSON line per
evaluation goes to stdout and to `--out`, then a table of the final evaluations.

uv run python scripts/ppo_vs_sac.py Quadruped-Velocity-Flat --minutes 15 --seeds 1 2 3 --command 0.8 0 0 --curve sac
uv run python scripts/ppo_vs_sac.py Cartpole-Balance --minutes 5 --seeds 1 2 3 --metric mean_return
uv run python scripts/ppo_vs_sac.py Quadruped-Velocity-Flat --minutes 3 --seeds 1 --sac-flags="--agent.sac.updates-per-step 1"

Runs go one after another (never side by side: they would share the cores); run directories under --logs-root.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

from mjfleet.evaluation import early_terminations
from mjfleet.runs.checkpoints import read_checkpoint

CLI = [sys.executable, "-m"]
"""How train and play run: as modules of this interpreter (a GPU machine with the packages on PYTHONPATH has no
console scripts)."""


def train(args: argparse.Namespace, algorithm: str, seed: int) -> pathlib.Path:
    """One `train` run stopped by SIGINT after args.minutes; returns its run directory."""
    name = f"{algorithm}_s{seed}_{time.strftime('%H%M%S')}"
    extra = shlex.split(args.ppo_flags if algorithm == "ppo" else args.sac_flags)
    every = str(args.save_every)
    command = [*CLI, "mjfleet.cli.train", args.task, "--algorithm", algorithm, "--seed", str(seed)]
    command += ["--run-name", name, "--logs-root", str(args.logs_root), "--max-iterations", "1000000"]
    command += [
        "--log-format",
        "compact",
        "--save-interval",
        every,
        "--keep-last",
        "1",
        "--keep-every",
        every,
    ]
    command += [*shlex.split(args.train_flags), *extra]
    log = args.logs_root / f"{name}.log"
    print(f"# {algorithm} seed {seed}: {shlex.join(command)} > {log}", file=sys.stderr, flush=True)
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=60 * args.minutes)
        raise SystemExit(f"train ended before its time (exit {proc.returncode}); see {log}")
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    (run_dir,) = args.logs_root.glob(f"*/*_{name}")
    return run_dir


def evaluate(args: argparse.Namespace, checkpoint: pathlib.Path, baselines: bool) -> dict:
    """`play` on one checkpoint: the evaluation's JSON (play --output)."""
    output = checkpoint.with_suffix(".eval.json")
    command = [
        *CLI,
        "mjfleet.cli.play",
        args.task,
        "--gpu-ids",
        args.gpu_ids,
        "--checkpoint",
        str(checkpoint),
    ]
    command += ["--episodes", str(args.episodes), "--num-envs", str(args.episodes), "--seed", "0"]
    command += ["--output", str(output)]
    command += ["--command", *map(str, args.command)] if args.command else []
    command += ["--baselines"] if baselines else []
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads(output.read_text())


def summary(result: dict, metric: str) -> dict:
    value = result[metric] if metric in result else result["metrics"][metric]
    return {metric: round(value, 4), "mean_return": round(result["mean_return"], 3),
            "ended_early": early_terminations(result), "episodes_ended": result["episodes_ended"]}  # fmt: skip


def emit(args: argparse.Namespace, row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    with args.out.open("a") as out:
        out.write(line + "\n")


def checkpoint_steps(checkpoint: pathlib.Path) -> tuple[int, int]:
    state = read_checkpoint(checkpoint)
    return int(state["iter"]), int(state.get("env_steps", 0))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task")
    parser.add_argument("--minutes", type=float, default=15.0, help="wall clock per run, start-up included")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--algorithms", nargs="+", default=["ppo", "sac"], choices=["ppo", "sac"])
    parser.add_argument("--metric", default="lin_vel_error", help="a key of play's result or of its metrics")
    parser.add_argument("--command", type=float, nargs=3, default=None, metavar=("VX", "VY", "WZ"))
    parser.add_argument("--episodes", type=int, default=64, help="evaluated episodes, one per environment")
    parser.add_argument("--gpu-ids", default="None", help="play's --gpu-ids (train uses --train-flags)")
    parser.add_argument("--train-flags", default="", help="extra train flags for both algorithms")
    parser.add_argument("--ppo-flags", default="", help="extra train flags for PPO only")
    parser.add_argument("--sac-flags", default="", help="extra train flags for SAC only")
    parser.add_argument("--save-every", type=int, default=25, help="iterations between kept checkpoints")
    parser.add_argument(
        "--curve",
        nargs="*",
        default=[],
        choices=["ppo", "sac"],
        help="also evaluate these runs' kept checkpoints",
    )
    parser.add_argument("--logs-root", type=pathlib.Path, default=pathlib.Path("logs/ppo_vs_sac"))
    parser.add_argument("--out", type=pathlib.Path, default=None, help="JSON lines (default: in --logs-root)")
    args = parser.parse_args()
    args.logs_root.mkdir(parents=True, exist_ok=True)
    args.out = args.out or args.logs_root / "results.jsonl"

    finals = []
    for seed in args.seeds:
        for algorithm in args.algorithms:
            run_dir = train(args, algorithm, seed)
            checkpoints = sorted(run_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
            for checkpoint in checkpoints if algorithm in args.curve else checkpoints[-1:]:
                final = checkpoint == checkpoints[-1]
                result = evaluate(args, checkpoint, baselines=final and not finals)
                iteration, env_steps = checkpoint_steps(checkpoint)
                row = {"task": args.task, "algorithm": algorithm, "seed": seed, "minutes": args.minutes,
                       "final": final, "iteration": iteration, "env_steps": env_steps,
                       **summary(result, args.metric), "run_dir": str(run_dir)}  # fmt: skip
                emit(args, row)
                if final:
                    finals.append(row)
                    for name, baseline in (result.get("baselines") or {}).items():
                        emit(args, {"task": args.task, "algorithm": name, **summary(baseline, args.metric)})

    both = args.metric != "mean_return"  # the return's own column, unless it is the metric
    header = f"{'algorithm':<10}{'seed':>5}{'iteration':>10}{'env steps':>13}{args.metric:>15}"
    print(f"\n{header}{'return':>9}{'falls':>7}" if both else f"\n{header}{'falls':>7}")
    for row in finals:
        ret = f"{row['mean_return']:>9.2f}" if both else ""
        print(f"{row['algorithm']:<10}{row['seed']:>5}{row['iteration']:>10}{row['env_steps']:>13,}"
              f"{row[args.metric]:>15.4f}{ret}{row['ended_early']:>4}/{row['episodes_ended']}")  # fmt: skip


if __name__ == "__main__":
    main()

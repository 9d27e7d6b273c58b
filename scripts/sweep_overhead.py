"""The sweep's overhead: N trials on S slots through `sweep`, against the same trials started by hand on S slots.

    uv run python scripts/sweep_overhead.py --trials 4 --slots 2 --iterations 20 --repeats 2

"By hand" is what a user would script: the same `train` command per trial (the same learning rates, seed, budget,
placement and thread count the sweep gives it), each followed by the same `play` evaluation, S of them at a time,
each in a session of its own as the sweep starts them (and as S terminals would): Linux's autogroup scheduler shares
the CPU between sessions, so on a machine shared with other jobs trials in one session get less of it.
The sweep runs the same trials as a grid over those learning rates. Both are timed from the start of the first
command to the end of the last; the two alternate, `--repeats` times each, and every other repeat the sweep goes
first, so that a busy machine's drift falls on both alike. Prints each wall time and the sweep's overhead, median over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIN = Path(sys.executable).parent
RATES = ["3e-4", "5e-4", "1e-3", "2e-3", "3e-3", "5e-3", "1e-2", "2e-2"]
TRAIN = ["--num-envs", "64", "--agent.num-steps-per-env", "24", "--logger", "none"]
EVAL = ["--episodes", "32", "--num-envs", "16"]


def by_hand(task: str, rates: list[str], slots: int, iterations: int, threads: int, root: Path) -> float:
    def trial(k: int) -> None:
        name = f"hand{k}"
        began = time.perf_counter()
        subprocess.run([str(BIN / "train"), task, *TRAIN, "--max-iterations", str(iterations), "--gpu-ids", "None",
                        "--cpu-workers", "1", "--threads", str(threads), "--agent.ppo.learning-rate", rates[k],
                        "--seed", "0", "--logs-root", str(root), "--run-name", name],
                       check=True, capture_output=True, start_new_session=True)  # fmt: skip
        trained = time.perf_counter()
        run = next(root.glob(f"*/*_{name}"))
        subprocess.run([str(BIN / "play"), task, "--load-run", str(run), "--gpu-ids", "None", *EVAL],
                       check=True, capture_output=True, start_new_session=True)  # fmt: skip
        print(
            f"  by hand, trial {k}: train {trained - began:.1f} s, play {time.perf_counter() - trained:.1f} s",
            flush=True,
        )

    start = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        list(pool.map(trial, range(len(rates))))
    return time.perf_counter() - start


def by_sweep(task: str, rates: list[str], slots: int, iterations: int, root: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(BIN / "sweep"), task, "--param", f"agent.ppo.learning-rate=choice:{','.join(rates)}",
                    "--sampler", "grid", "--trials", str(len(rates)), "--iterations", str(iterations),
                    "--gpu-ids", "None", "--slots", str(slots), "--sweep-dir", str(root / "sweep"),
                    "--eval-episodes", EVAL[1], "--eval-num-envs", EVAL[3], "--", *TRAIN],
                   check=True, capture_output=True)  # fmt: skip
    for log in sorted((root / "sweep" / "logs").glob("*.log")):
        print(f"  sweep, {log.name}: {log.read_text().splitlines()[-1][:120]}", flush=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Cartpole-Balance")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from mjfleet.launch.devices import usable_cores

    rates = RATES[: args.trials]
    threads = max(1, usable_cores() // args.slots)  # what the sweep gives each CPU trial
    hand, sweep = [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            if repeat % 2:  # every other repeat the sweep goes first: whatever the order costs falls on both
                sweep.append(by_sweep(args.task, rates, args.slots, args.iterations, Path(b)))
                hand.append(by_hand(args.task, rates, args.slots, args.iterations, threads, Path(a)))
            else:
                hand.append(by_hand(args.task, rates, args.slots, args.iterations, threads, Path(a)))
                sweep.append(by_sweep(args.task, rates, args.slots, args.iterations, Path(b)))
        print(f"repeat {repeat + 1}: by hand {hand[-1]:.1f} s, sweep {sweep[-1]:.1f} s", flush=True)
    h, s = statistics.median(hand), statistics.median(sweep)
    print(f"{args.trials} trials on {args.slots} slots, {args.iterations} iterations each: by hand {h:.1f} s, "
          f"sweep {s:.1f} s (medians of {args.repeats}); overhead {100 * (s - h) / h:+.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()

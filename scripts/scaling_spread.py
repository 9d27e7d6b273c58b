"""bench's N-worker speed-up of two checkouts, alternated back to back: median and range of each.

    uv run python scripts/scaling_spread.py /path/to/other/checkout --runs 5
    uv run python scripts/scaling_spread.py /path/to/other/checkout --runs 5 -- Quadruped-Velocity-Flat --num-envs 256

Each run is one `bench <Task> --gpu-ids None --cpu-workers 2 ...` of each checkout (this one first in odd runs, the
other first in even ones), with `--rounds 1` where the checkout's bench has that flag; every run's speed-up per
phase is read from its --json. The other checkout needs its own environment (`uv sync` in it); both share this
shell's WARP_CACHE_PATH. A single run of best-of-3 blocks ranged 1.29x-2.33x on one quiet 2-core VM
(docs/benchmarks.md): only a median over alternated runs can tell a regression from noise.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import tempfile

HERE = pathlib.Path(__file__).resolve().parents[1]
PHASES = ("physics", "env", "rollout", "training")
DEFAULT_BENCH = ["Cartpole-Balance", "--num-envs", "1024"]


def run_bench(checkout: pathlib.Path, bench_args: list[str], out: pathlib.Path) -> dict[str, float]:
    """One bench of `checkout`; its speed-up per phase (the first env count)."""
    help_text = subprocess.run(["uv", "run", "--frozen", "bench", "--help"], cwd=checkout, capture_output=True,
                               text=True).stdout  # fmt: skip
    rounds = ["--rounds", "1"] if "--rounds" in help_text else []
    command = ["uv", "run", "--frozen", "bench", *bench_args, "--gpu-ids", "None", "--cpu-workers", "2", *rounds,
               "--quiet", "--json", str(out)]  # fmt: skip
    subprocess.run(command, cwd=checkout, check=True, capture_output=True, text=True)
    (entry, *_) = json.loads(out.read_text())["scaling"]
    return {phase: entry[phase]["speedup"] for phase in PHASES if phase in entry}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "other", type=pathlib.Path, help="the checkout to compare with (its own uv environment)"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "bench", nargs="*", help="bench's task and flags (default: Cartpole-Balance --num-envs 1024)"
    )
    args = parser.parse_args()
    sides = {"this": HERE, "other": args.other.resolve()}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            order = list(sides) if run % 2 == 0 else list(reversed(sides))
            for name in order:
                got[name].append(
                    run_bench(sides[name], args.bench or DEFAULT_BENCH, pathlib.Path(tmp, "b.json"))
                )
                line = ", ".join(f"{p} {s:.2f}x" for p, s in got[name][-1].items())
                print(f"run {run + 1} {name} ({sides[name]}): {line}", flush=True)
    for name, runs in got.items():
        parts = []
        for phase in PHASES:
            each = [r[phase] for r in runs if phase in r]
            if each:
                parts.append(f"{phase} {statistics.median(each):.2f}x [{min(each):.2f}-{max(each):.2f}]")
        print(f"{name}: median of {len(runs)} [range]: " + ", ".join(parts))


if __name__ == "__main__":
    main()

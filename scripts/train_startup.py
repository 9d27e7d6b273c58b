"""Start-up time of the real `train` command: from starting the process to its first env step.

    uv run python scripts/train_startup.py Cartpole-Balance --gpu-ids None
    uv run python scripts/train_startup.py Cartpole-Balance --gpu-ids None --cpu-workers 2 --repeats 3

Runs `train <Task> --max-iterations 1` (run directory in a temporary folder), timestamps the first iteration's
line on its console, and subtracts that iteration's collect + learn time (from metrics.jsonl): what is left is
process start -> first env step, measured from outside. Warp's kernel cache is checked before and after: new
modules mean the run compiled (a cold cache). `bench` reports the same quantity from inside the workers.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from mjfleet.bench import machine
from mjfleet.cli.common import quiet_warp


def measure_once(task: str, extra: list[str]) -> dict:
    before = machine.cached_modules()
    with tempfile.TemporaryDirectory() as logs:
        command = [
            str(pathlib.Path(sys.executable).parent / "train"),
            task,
            "--max-iterations",
            "1",
            "--logs-root",
            logs,
            "--log-format",
            "compact",
            "--agent.logger",
            "none",
            *extra,
        ]
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first_line_s = None
        output = []
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if first_line_s is None and line.startswith("it 1/"):
                first_line_s = time.perf_counter() - start
        code = proc.wait()
        total_s = time.perf_counter() - start
        if code != 0 or first_line_s is None:
            raise SystemExit(f"train failed ({code}):\n{''.join(output[-20:])}")
        (metrics,) = pathlib.Path(logs).glob("*/*/metrics.jsonl")
        record = json.loads(metrics.read_text().splitlines()[0])
    iteration_s = record["collect_time"] + record["learn_time"]
    compiled = len(machine.cached_modules() - before)
    return {
        "first_env_step_s": first_line_s - iteration_s,
        "first_iteration_line_s": first_line_s,
        "first_iteration_s": iteration_s,
        "process_total_s": total_s,
        "kernel_cache": "cold" if compiled else "warm",
        "modules_compiled": compiled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task")
    parser.add_argument("--repeats", type=int, default=1)
    args, extra = parser.parse_known_args()
    quiet_warp()
    results = [measure_once(args.task, extra) for _ in range(args.repeats)]
    for r in results:
        print(json.dumps(r))
    best = min(r["first_env_step_s"] for r in results)
    print(f"train {args.task} {' '.join(extra)}: first env step after {best:.1f} s (best of {len(results)})")


if __name__ == "__main__":
    main()

"""mjfleet vs mjlab on this machine, in one invocation: Cartpole-Balance training throughput at the same env count.

    uv run python scripts/vs_mjlab.py                       # 64 envs on CPU, 2 rounds, mjlab 1.6
    uv run python scripts/vs_mjlab.py --num-envs 64 256 --rounds 3 --iterations 40

mjlab runs from its own virtual environment (made once with uv, outside the project: by default
~/.cache/mjfleet/mjlab-<version>; `--mjlab-venv` points elsewhere), so neither project's pins touch the other's.
Each round trains mjlab's `Mjlab-Cartpole-Balance` and runs `bench Cartpole-Balance` (training phase) back to
back, on CPU (`--gpu-ids None`) with the same envs and rollout length; mjlab keeps its own defaults otherwise
(torch threads, network 64-64, 5 epochs x 4 minibatches, like mjfleet's task). mjlab's rate is the mean of
the "Steps per second" lines it prints, after `--skip` warm-up iterations; mjfleet's is bench's mean over its
timed iterations. The ratio divides the two means of the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

STEPS_PER_S = re.compile(r"Steps per second:\s*([\d.]+)")


def mjlab_venv(path: pathlib.Path, version: str) -> pathlib.Path:
    """The venv's `train` script, creating the venv with uv on first use."""
    train = path / "bin" / "train"
    if train.exists():
        return train
    uv = shutil.which("uv")
    if uv is None:
        raise SystemExit("error: uv is needed to create mjlab's virtual environment")
    import torch  # mjlab's torch = this project's torch: uv's cache has it, no second download

    torch_version = torch.__version__.split("+")[0]
    print(f"creating {path} (mjlab {version}, torch {torch_version})", flush=True)
    subprocess.run(
        [uv, "venv", "-q", "-p", f"{sys.version_info.major}.{sys.version_info.minor}", str(path)], check=True
    )
    env = {**os.environ, "VIRTUAL_ENV": str(path)}
    subprocess.run(
        [uv, "pip", "install", "-q", f"mjlab=={version}", f"torch=={torch_version}"], check=True, env=env
    )
    return train


def run_mjlab(train: pathlib.Path, num_envs: int, steps: int, iterations: int, skip: int) -> list[float]:
    with tempfile.TemporaryDirectory() as cwd:  # mjlab writes its logs/ under the working directory
        proc = subprocess.run(
            [
                str(train),
                "Mjlab-Cartpole-Balance",
                "--gpu-ids",
                "None",
                "--env.scene.num-envs",
                str(num_envs),
                "--agent.num-steps-per-env",
                str(steps),
                "--agent.max-iterations",
                str(iterations),
                "--agent.logger",
                "tensorboard",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
    rates = [float(x) for x in STEPS_PER_S.findall(proc.stdout)]
    if proc.returncode != 0 or len(rates) <= skip:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise SystemExit(f"error: mjlab failed ({proc.returncode}):\n" + "\n".join(tail))
    return rates[skip:]


def run_mjfleet(num_envs: int, steps: int, iterations: int) -> dict:
    bench = pathlib.Path(sys.executable).parent / "bench"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        proc = subprocess.run(
            [
                str(bench),
                "Cartpole-Balance",
                "--gpu-ids",
                "None",
                "--num-envs",
                str(num_envs),
                "--agent.num-steps-per-env",
                str(steps),
                "--iterations",
                str(iterations),
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"error: bench failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        result = json.loads(out.read_text())
    (point,) = result["runs"][0]["points"]
    return {**point["training"], "plan": result["runs"][0]["plan"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64])
    parser.add_argument(
        "--steps-per-env", type=int, default=24, help="rollout length of both (mjfleet's default)"
    )
    parser.add_argument(
        "--iterations", type=int, default=30, help="mjlab iterations (mjfleet: a third of them)"
    )
    parser.add_argument("--skip", type=int, default=3, help="mjlab's first iterations left out (warm-up)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mjlab-version", default="1.6.0")
    parser.add_argument("--mjlab-venv", type=pathlib.Path, default=None)
    parser.add_argument("--json", type=pathlib.Path, default=None)
    args = parser.parse_args()
    if min(args.num_envs) < 1 or args.rounds < 1 or args.iterations <= args.skip:
        parser.error("--num-envs and --rounds must be >= 1 and --iterations > --skip")
    cache = pathlib.Path(os.environ.get("MJFLEET_CACHE_DIR", pathlib.Path.home() / ".cache" / "mjfleet"))
    train = mjlab_venv(args.mjlab_venv or cache / f"mjlab-{args.mjlab_version}", args.mjlab_version)

    rows = []
    for num_envs in args.num_envs:
        for round_ in range(1, args.rounds + 1):
            mjlab = run_mjlab(train, num_envs, args.steps_per_env, args.iterations, args.skip)
            ours = run_mjfleet(num_envs, args.steps_per_env, max(3, args.iterations // 3))
            row = {
                "num_envs": num_envs,
                "round": round_,
                "mjlab_mean": statistics.fmean(mjlab),
                "mjlab_best": max(mjlab),
                "mjfleet_mean": ours["env_steps_per_s_mean"],
                "mjfleet_best": ours["env_steps_per_s"],
                "mjfleet_plan": ours["plan"],
            }
            row["ratio_of_means"] = row["mjfleet_mean"] / row["mjlab_mean"]
            rows.append(row)
            print(
                f"{num_envs:>6} envs, round {round_}: mjlab {row['mjlab_mean']:,.0f} (best {row['mjlab_best']:,.0f})"
                f"  mjfleet {row['mjfleet_mean']:,.0f} (best {row['mjfleet_best']:,.0f})"
                f"  -> {row['ratio_of_means']:.1f}x   [training env-steps/s, CPU]",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"mjlab_version": args.mjlab_version, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

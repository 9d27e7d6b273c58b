"""mjfleet beside mjlab 1.6 on the same robot, same env count, same device, in one invocation: env-steps/s of the
physics, the env step and training for both, and mjfleet's ratio to mjlab.

    uv run python scripts/vs_mjlab.py go1 g1 --num-envs 256          # the CPU figures in docs/benchmarks.md
    uv run python scripts/vs_mjlab.py cartpole --num-envs 64 --rounds 3
    uv run python scripts/vs_mjlab.py g1 --device cuda:0 --num-envs 4096

Robots (mjlab's task / mjfleet's): go1 Mjlab-Velocity-Flat-Unitree-Go1 / Go1-Velocity-Flat, g1
Mjlab-Velocity-Flat-Unitree-G1 / G1-Velocity-Flat, cartpole Mjlab-Cartpole-Balance / Cartpole-Balance. mjfleet's
robots must be fetched first (`uv run robots fetch unitree-go1`).

mjlab runs from a virtual environment of its own, made once with uv outside the project (default
<mjfleet cache>/mjlab-<version>, `--mjlab-venv` elsewhere), with its own warp kernel cache there: it is never
imported into mjfleet's environment. Its torch is the version mjfleet's lock has (uv's cache holds it already).
Per robot and round, both sides are measured back to back (mjlab first in odd rounds, mjfleet first in even ones):

- mjlab: physics and env from scripts/vs_mjlab_probe.py run by mjlab's Python (random actions; time inside
  `sim.step()` and whole blocks), training from mjlab's own `train` command: the mean of the "Steps per second"
  lines it prints after `--skip` warm-up iterations.
- mjfleet: `bench <task>` with the same env count, steps per block, blocks and timed iterations, and mjlab's
  networks (512-256-128 for the robots; bench's CPU default is smaller). Its means over the timed blocks.

Each side keeps its own torch thread policy (mjlab: torch's default, every core; mjfleet: bench's, as `train`).
The ratio divides the two means of the same round; the last lines give each ratio's median over the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
STEPS_PER_S = re.compile(r"Steps per second:\s*([\d.]+)")
PHASES = ("physics", "env", "training")
MJLAB_NETWORKS = (
    "512",
    "256",
    "128",
)  # mjlab 1.6.0 tasks/velocity/config/{go1,g1}/rl_cfg.py: actor and critic


@dataclasses.dataclass(frozen=True)
class Pair:
    """One robot's task in each project, and the mjfleet flags that give it mjlab's settings."""

    mjlab: str
    mjfleet: str
    mjfleet_flags: tuple[str, ...] = ()


NETWORKS = ("--agent.actor.hidden-dims", *MJLAB_NETWORKS, "--agent.critic.hidden-dims", *MJLAB_NETWORKS)
PAIRS = {
    "go1": Pair("Mjlab-Velocity-Flat-Unitree-Go1", "Go1-Velocity-Flat", NETWORKS),
    "g1": Pair("Mjlab-Velocity-Flat-Unitree-G1", "G1-Velocity-Flat", NETWORKS),
    "cartpole": Pair("Mjlab-Cartpole-Balance", "Cartpole-Balance"),
}


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and status 2, not argparse's usage block
        self.exit(2, f"vs_mjlab.py: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("robots", nargs="+", choices=sorted(PAIRS), metavar="robot", help=", ".join(PAIRS))
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N, for both sides")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3, help="timed training iterations, each side")
    parser.add_argument("--skip", type=int, default=2, help="mjlab's first iterations left out (warm-up)")
    parser.add_argument("--steps", type=int, default=50, help="env steps per timed physics/env block")
    parser.add_argument("--repeats", type=int, default=2, help="timed physics/env blocks, each side")
    parser.add_argument("--mjlab-version", default="1.6.0")
    parser.add_argument("--mjlab-venv", type=pathlib.Path, default=None)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write every figure here")
    args = parser.parse_args(argv)
    for name in ("num_envs", "rounds", "iterations", "steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.skip < 0:
        parser.error(f"--skip must be at least 0, not {args.skip}")
    if not re.fullmatch(r"cpu|cuda:\d+", args.device):
        parser.error(f"--device must be cpu or cuda:N, not {args.device!r}")
    return args


def mjlab_training_rates(stdout: str, skip: int) -> list[float]:
    """The env-steps/s of mjlab's iterations after the first `skip` (its log's "Steps per second" lines)."""
    return [float(x) for x in STEPS_PER_S.findall(stdout)][skip:]


def probe_rates(line: str) -> dict[str, float]:
    """Mean physics and env env-steps/s from scripts/vs_mjlab_probe.py's JSON line."""
    probe = json.loads(line)
    steps = probe["num_envs"] * probe["steps_per_block"]
    return {
        phase: steps * len(probe[f"{phase}_s"]) / sum(probe[f"{phase}_s"]) for phase in ("physics", "env")
    }


def bench_rates(result: dict) -> dict[str, float]:
    """Mean physics, env and training env-steps/s from `bench --json`'s file (its first env count)."""
    point = result["runs"][0]["points"][0]
    return {phase: point[phase]["env_steps_per_s_mean"] for phase in PHASES}


def ratios(mjfleet: dict[str, float], mjlab: dict[str, float]) -> dict[str, float]:
    return {phase: mjfleet[phase] / mjlab[phase] for phase in PHASES}


def mjlab_python(path: pathlib.Path, version: str) -> pathlib.Path:
    """The Python of mjlab's virtual environment, made with uv on first use."""
    python = path / "bin" / "python"
    if (path / "bin" / "train").exists():
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise SystemExit("vs_mjlab.py: error: uv is needed to make mjlab's virtual environment")
    torch = importlib.metadata.version("torch").split("+")[0]
    print(f"making {path} (mjlab {version}, torch {torch})", flush=True)
    subprocess.run([uv, "venv", "-q", "-p", f"{sys.version_info.major}.{sys.version_info.minor}", str(path)],
                   check=True)  # fmt: skip
    env = {**os.environ, "VIRTUAL_ENV": str(path)}
    subprocess.run([uv, "pip", "install", "-q", f"mjlab=={version}", f"torch=={torch}"], check=True, env=env)
    return python


def _run(command: list[str], what: str, **kwargs) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"vs_mjlab.py: error: {what} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


def run_mjlab(python: pathlib.Path, pair: Pair, args: argparse.Namespace) -> dict[str, float]:
    # mjlab's own kernel cache: its mujoco_warp is not mjfleet's; no PYTHONPATH of ours
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["WARP_CACHE_PATH"] = str(python.parent.parent / "warp-cache")
    probe = [str(python), str(HERE / "vs_mjlab_probe.py"), pair.mjlab, "--num-envs", str(args.num_envs),
             "--steps", str(args.steps), "--repeats", str(args.repeats), "--device", args.device]  # fmt: skip
    (line,) = [
        x for x in _run(probe, f"mjlab's probe of {pair.mjlab}", env=env).splitlines() if x.startswith("{")
    ]
    rates = probe_rates(line)
    gpu_ids = "None" if args.device == "cpu" else args.device.removeprefix("cuda:")
    train = [str(python.parent / "train"), pair.mjlab, "--gpu-ids", gpu_ids, "--env.scene.num-envs",
             str(args.num_envs), "--agent.max-iterations", str(args.skip + args.iterations),
             "--agent.logger", "tensorboard"]  # fmt: skip
    with tempfile.TemporaryDirectory() as cwd:  # mjlab writes its logs/ under the working directory
        trained = mjlab_training_rates(
            _run(train, f"mjlab's train {pair.mjlab}", cwd=cwd, env=env), args.skip
        )
    if len(trained) < args.iterations:
        raise SystemExit(f"vs_mjlab.py: error: mjlab's train printed {len(trained)} timed iterations")
    return {**rates, "training": statistics.fmean(trained)}


def run_mjfleet(pair: Pair, args: argparse.Namespace) -> dict[str, float]:
    bench = pathlib.Path(sys.executable).parent / "bench"
    gpu_ids = "None" if args.device == "cpu" else args.device.removeprefix("cuda:")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        _run([str(bench), pair.mjfleet, "--gpu-ids", gpu_ids, "--num-envs", str(args.num_envs), "--steps",
              str(args.steps), "--repeats", str(args.repeats), "--iterations", str(args.iterations), "--quiet",
              "--json", str(out), *pair.mjfleet_flags], f"bench {pair.mjfleet}")  # fmt: skip
        return bench_rates(json.loads(out.read_text()))


def report(robot: str, round_: int, row: dict, args: argparse.Namespace) -> str:
    """One round's figures as a small table."""
    pair = PAIRS[robot]
    lines = [f"{robot}, {args.num_envs} envs on {args.device}, round {round_}   env-steps/s (means):"]
    lines.append(f"  {'':34} {'physics':>10} {'env':>10} {'training':>10}")
    for side, task in (("mjlab", pair.mjlab), ("mjfleet", pair.mjfleet)):
        lines.append(f"  {side + ' ' + task:34} " + " ".join(f"{row[side][p]:>10,.0f}" for p in PHASES))
    lines.append(f"  {'mjfleet / mjlab':34} " + " ".join(f"{row['ratio'][p]:>9.2f}x" for p in PHASES))
    return "\n".join(lines)


def medians(rows: list[dict], robot: str) -> str:
    mine = [r["ratio"] for r in rows if r["robot"] == robot]
    parts = [f"{p} {statistics.median(x[p] for x in mine):.2f}x" for p in PHASES]
    return f"{robot}: mjfleet / mjlab, median of {len(mine)} round(s): " + ", ".join(parts)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from mjfleet.environ import cache_dir  # after parsing: a bad flag costs no import

    python = mjlab_python(args.mjlab_venv or cache_dir() / f"mjlab-{args.mjlab_version}", args.mjlab_version)
    rows = []
    for robot in args.robots:
        pair = PAIRS[robot]
        for round_ in range(1, args.rounds + 1):
            row: dict = {"robot": robot, "round": round_, "num_envs": args.num_envs, "device": args.device}
            order = ("mjlab", "mjfleet") if round_ % 2 else ("mjfleet", "mjlab")
            for side in order:
                row[side] = run_mjlab(python, pair, args) if side == "mjlab" else run_mjfleet(pair, args)
            row["ratio"] = ratios(row["mjfleet"], row["mjlab"])
            rows.append(row)
            print(report(robot, round_, row, args), flush=True)
            if args.json is not None:  # after every round: a run stopped later keeps what it measured
                record = {"mjlab_version": args.mjlab_version, "rows": rows}
                args.json.write_text(json.dumps(record, indent=1) + "\n")
    for robot in args.robots:
        print(medians(rows, robot))


if __name__ == "__main__":
    main()

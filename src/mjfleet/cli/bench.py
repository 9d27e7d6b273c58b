"""`uv run bench <Task> [flags]`: physics bound, env, rollout and training throughput of a task, in one run."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mjfleet import atomic
from mjfleet.bench import autotune, machine
from mjfleet.bench.console import BenchProgress, auto_sweep_progress
from mjfleet.bench.plot import draw, plot_path
from mjfleet.bench.report import scaling_over_rounds, summarize_run, summarize_startup
from mjfleet.bench.table import format_report
from mjfleet.cli.common import parse_task_command, quiet_warp, user_errors, worker_plan
from mjfleet.errors import UsageError
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.launch.devices import GpuRequest, make_plan
from mjfleet.launch.launcher import run_workers
from mjfleet.progress import Progress

PROG = "bench"
USAGE = """usage: bench <Task> [flags]

Measure a task's throughput: the physics bound (captured MuJoCo-Warp steps alone, on the states the env visits),
env steps with random actions, rollouts with policy inference, and full PPO (or SAC) iterations, side by side in
env-steps/s.
  bench Cartpole-Balance                                  the task's default env count, GPU 0 else CPU
  bench Cartpole-Balance --gpu-ids None --num-envs 64 256 1024    a sweep on CPU
  bench Cartpole-Balance --num-envs auto                  where throughput stops growing (cached)
  bench Cartpole-Balance --gpu-ids None --cpu-workers 2   2 workers, with scaling vs 1 worker
  bench Cartpole-Balance --algorithm sac                  SAC's iterations: env-steps/s and gradient steps/s
  bench <Task> --json out.json                            every figure as JSON too, and a picture: out.png
  bench <Task> --json - --plot bench.png                  JSON on stdout (the table on stderr), PNG there
  bench <Task> --help                                     every flag of that task"""


@dataclass
class BenchFlags:
    """Measure physics, env, rollout and training throughput of a task (env-steps/s), in one run.
    Every env and agent setting of the task is a flag too (--env.*, --agent.*)."""

    algorithm: Literal["ppo", "sac"] | None = None
    """The algorithm whose iterations the training phase times (alias of --agent.algorithm-name; default ppo)."""
    num_envs: tuple[str, ...] = ()
    """Environments per worker (alias of --env.num-envs, and wins over it): one value, several (a sweep: `64 256 1024`), or `auto` (where throughput stops growing; measured once per task, device, threads per worker, versions and task settings, then cached). Default: the task's default for the device."""
    gpu_ids: tuple[str, ...] = ("auto",)
    """GPUs, one worker each: `0 1`, `"[0, 1]"`, `all`, or `None`/`cpu` for CPU. auto: GPU 0 if CUDA is available, else CPU (as train)."""
    cpu_workers: int = 1
    """On CPU (--gpu-ids None, or by default without a GPU): CPU worker processes (gloo). Several workers also
    measure 1 worker for scaling."""
    threads: int | None = None
    """Torch threads per worker. Default as for train: 1 per CPU worker (its PPO update may use the cores the workers leave idle, when that measures faster); GPU workers split the cores."""
    hosts: tuple[str, ...] = ("localhost",)
    """Machines to run on (as for train); the 1-worker reference runs on this machine."""
    iterations: int = 3
    """Timed PPO iterations per env count, after the untimed ones: the first, and on CPU while the update's thread
    count is still being chosen (4 iterations)."""
    steps: int = 100
    """Policy steps per timed block of the physics, env and rollout phases."""
    repeats: int = 3
    """Timed blocks per phase; the table shows the best (the machine's capability), JSON keeps the mean too."""
    rounds: int = 3
    """With several workers: rounds of the 1-worker and the N-worker measurement, alternated back to back; the
    scaling figures are the median speed-up over the rounds, with its range."""
    json: str | None = None
    """Also write every figure to this JSON file, and draw them beside it (out.json -> out.png). `-`: the JSON
    on stdout and everything else bench prints on stderr (no PNG unless --plot)."""
    plot: str | None = None
    """Draw throughput per env count and phase (and the scaling over workers, with its spread) to this PNG.
    Default: beside the --json file; none without one."""
    retune: bool = False
    """With --num-envs auto: measure again instead of using the cached count."""
    torchrunx_log_dir: str | None = None
    """Worker log files (several workers only), unless $TORCHRUNX_LOG_DIR is set (it wins). Default: none."""
    quiet: bool = False
    """Only the final table: no progress bar or lines, no per-env-count lines (warnings still show)."""
    robot: str | None = None
    """A Python file that defines a RobotDescription: the robot of a task that takes one (Velocity-Flat), as
    train takes it. Workers load the same file. docs/bring-your-robot.md."""


def parse_args(argv: list[str]) -> tuple[str, Any]:
    """(task name, parsed flags): BenchFlags plus the task's own --env.* / --agent.* flags."""
    return parse_task_command(argv, PROG, USAGE, BenchFlags, sweeps=("num_envs",), device_defaults=True)


def parse_num_envs(tokens: tuple[str, ...] | list[str]) -> tuple[list[int], bool]:
    """(explicit counts, whether `auto` was asked for) from the --num-envs tokens."""
    sizes: list[int] = []
    auto = False
    for token in (t for t in re.split(r"[\s,]+", " ".join(tokens)) if t):
        if token.lower() == "auto":
            auto = True
            continue
        if not re.fullmatch(r"[+-]?\d+", token):
            raise UsageError(
                f"--num-envs: cannot read {token!r}; give whole numbers >= 1 (e.g. 64 256 1024) or auto"
            )
        if int(token) < 1:
            raise UsageError(f"--num-envs must be >= 1, got {int(token)}")
        sizes.append(int(token))
    if tokens and not sizes and not auto:
        raise UsageError("--num-envs needs a value: whole numbers >= 1 (e.g. 64 256 1024) or auto")
    return sizes, auto


def check_flags(flags: Any) -> None:
    for name in ("iterations", "steps", "repeats", "rounds"):
        if getattr(flags, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(flags, name)}")
    if flags.env.decimation < 1:
        raise UsageError(f"--env.decimation must be >= 1, got {flags.env.decimation}")
    if flags.agent.num_steps_per_env < 1:
        raise UsageError(f"--agent.num-steps-per-env must be >= 1, got {flags.agent.num_steps_per_env}")


def single_worker_plan(plan: WorkerPlan) -> WorkerPlan | None:
    """One worker in this process with the per-worker share of the machine the N-worker plan gives each."""
    if plan.is_cpu:
        return dataclasses.replace(plan, devices=("cpu",), hosts=("localhost",), notice=None)
    try:
        single = make_plan(GpuRequest("ids", (plan.gpu_ids[0],)), 1, ["localhost"])
    except UsageError:  # e.g. a UUID this process cannot select: no reference run
        return None
    return dataclasses.replace(single, threads_per_worker=plan.threads_per_worker)


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    """The console script: measure, print the table, write JSON if asked."""
    run(sys.argv[1:] if argv is None else argv)


def resolve(task_name: str, flags: Any) -> tuple[WorkerPlan, list[int], bool]:
    """Check the flags and decide (worker plan, explicit env counts, whether `auto` was asked); measures nothing."""
    from mjfleet.tasks import get_task

    check_flags(flags)
    sizes, auto = parse_num_envs(flags.num_envs)
    plan = worker_plan(flags)
    if not sizes and not auto:
        sizes = [flags.env.num_envs or get_task(task_name).default_num_envs(plan.devices[0])]
    check_sizes(sizes, flags)
    return plan, sorted(set(sizes)), auto


def check_sizes(sizes: list[int], flags: Any) -> None:
    if flags.agent.algorithm_name == "sac":
        for n in sizes:
            flags.agent.sac.check(n)
        return
    for n in sizes:
        batch = n * flags.agent.num_steps_per_env
        if batch < flags.agent.ppo.num_mini_batches:
            raise UsageError(
                f"--num-envs {n}: num_envs x num_steps_per_env = {batch} is smaller than "
                f"--agent.ppo.num-mini-batches {flags.agent.ppo.num_mini_batches}"
            )


def run(argv: list[str]) -> dict[str, Any]:
    """Measure as the command line asks; returns what --json writes (UsageError for bad input)."""
    quiet_warp()
    task_name, flags = parse_args(argv)
    plan, sizes, auto = resolve(task_name, flags)
    # `--json -`: stdout carries the JSON alone; the table, result lines and notices go to stderr
    to_stderr = contextlib.redirect_stdout(sys.stderr) if flags.json == "-" else contextlib.nullcontext()
    with to_stderr:
        result = _measure(argv, task_name, flags, plan, sizes, auto)
        print(format_report(result), flush=True)
        if flags.json and flags.json != "-":
            path = Path(flags.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(path, json.dumps(result, indent=2) + "\n")
            print(f"wrote {path}")
        png = plot_path(flags.json, flags.plot)
        if png is not None:
            print(f"wrote {draw(result, png)}")
    if flags.json == "-":
        print(json.dumps(result, indent=2), flush=True)
    return result


def _measure(argv: list[str], task_name: str, flags: Any, plan: WorkerPlan, sizes: list[int], auto: bool):
    from mjfleet.bench.measure import PHASES, BenchJob, bench_worker

    single = plan if plan.world_size == 1 else single_worker_plan(plan)
    parent_ready_s = machine.seconds_since_process_start()
    versions = machine.versions()

    from mjfleet.tasks.plugins import environment_task_modules, robot_modules

    task_modules = environment_task_modules() + robot_modules(flags.robot)

    def job(plan_: WorkerPlan, sizes_: list[int], **kwargs: Any) -> BenchJob:
        kwargs.setdefault("quiet", flags.quiet)
        return BenchJob(
            task=task_name,
            task_modules=task_modules,
            env=flags.env,
            agent=flags.agent,
            plan=plan_,
            sizes=tuple(sizes_),
            steps=flags.steps,
            repeats=flags.repeats,
            iterations=flags.iterations,
            **kwargs,
        )

    first_startup: dict[str, Any] | None = None
    auto_info = None
    if auto:
        if single is None:
            raise UsageError(
                "--num-envs auto needs a GPU this process can select; give --num-envs explicitly"
            )
        auto_info, first_startup = _auto_num_envs(task_name, single, flags, job, versions)
        sizes.append(auto_info["num_envs"])
        check_sizes([auto_info["num_envs"]], flags)
    sizes = sorted(set(sizes))

    runs = []
    rounds = flags.rounds if single is not None and plan.world_size > 1 else 1
    launches = rounds * ((single is not None) + (plan.world_size > 1))
    per_launch = len(sizes) * len(PHASES)
    with Progress("bench", launches * per_launch, "phases", quiet=flags.quiet) as bar:
        progress = BenchProgress(bar, per_launch)
        of_rounds = f", round {{}} of {rounds}" if rounds > 1 else ""
        for round_ in range(rounds):
            if single is not None:
                progress.start_launch("1 worker" + of_rounds.format(round_ + 1))
                # one worker runs in this process: it reports its phases as they go (not picklable otherwise)
                watch = {"on_phase": progress.on_phase} if single.in_process else {}
                raw = _rank0(run_workers(single, bench_worker, job(single, sizes, **watch)))
                startup = (round_ == 0 and first_startup) or summarize_startup(raw)
                runs.append({**summarize_run(raw, startup), "round": round_ + 1})
                progress.end_launch(runs[-1])
            if plan.world_size > 1:
                progress.start_launch(f"{plan.world_size} workers" + of_rounds.format(round_ + 1))
                raw = _rank0(
                    run_workers(
                        plan,
                        bench_worker,
                        job(plan, sizes, launch_time=time.time()),
                        log_dir=flags.torchrunx_log_dir,
                    )
                )
                startup = summarize_startup(raw, parent_ready_s)
                runs.append({**summarize_run(raw, startup), "round": round_ + 1})
                progress.end_launch(runs[-1])
                parent_ready_s = None  # only the first launch follows this process's start

    rounds_paired = single is not None and plan.world_size > 1  # runs alternate: 1 worker, N workers, ...
    return {
        "task": task_name,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine.machine(),
        "versions": versions,
        "settings": {
            "steps": flags.steps,
            "repeats": flags.repeats,
            "iterations": flags.iterations,
            "algorithm": flags.agent.algorithm_name,
            "num_steps_per_env": flags.agent.num_steps_per_env,
            "decimation": flags.env.decimation,
            "rounds": rounds,
            "sizes": sizes,
            "command": ["bench", *argv],
        },
        "runs": runs,
        "scaling": scaling_over_rounds(list(zip(runs[::2], runs[1::2], strict=True)))
        if rounds_paired
        else [],
        "auto": auto_info,
    }


def _auto_num_envs(task_name: str, single: WorkerPlan, flags: Any, job, versions: dict[str, str]):
    """The cached auto count, or a fresh sweep on one worker; returns (auto info, start-up of the first run)."""
    from mjfleet.bench.measure import bench_worker

    device = single.devices[0]
    config = autotune.config_digest(flags.env, flags.agent)
    key = autotune.cache_key(
        task_name, machine.device_name(device), single.threads_per_worker, versions, config
    )
    cached = None if flags.retune else autotune.load(key)
    if cached is not None:
        return {**cached, "cached": True, "cache_file": str(autotune.cache_path()), "key": key}, None

    first: dict[str, Any] = {}
    if not flags.quiet:
        print(
            f"--num-envs auto: sweeping {task_name} on {single.describe()} (rollout throughput)", flush=True
        )
    with auto_sweep_progress(flags.quiet) as bar:

        def measure(n: int) -> float:
            bar.update(status=f"measuring {n:,} envs")
            # quiet: the line below says what a doubling measured
            sweep_job = job(single, [n], phases=("rollout",), quiet=True)
            sweep_job = dataclasses.replace(
                sweep_job, steps=min(sweep_job.steps, 50), repeats=min(sweep_job.repeats, 2)
            )
            raw = _rank0(run_workers(single, bench_worker, sweep_job))
            if not first:
                first.update(summarize_startup(raw))
            rate = summarize_run(raw)["points"][0]["rollout"]["env_steps_per_s"]
            bar.update(advance=1, status=f"{n:,} envs: {rate:,.0f}/s")
            if not flags.quiet:
                print(f"--num-envs auto: {n:,} envs/worker: rollout {rate:,.0f} env-steps/s", flush=True)
            return rate

        entry = autotune.sweep(measure, "cuda" if device.startswith("cuda") else "cpu")
    autotune.store(key, entry)
    return {**entry, "cached": False, "cache_file": str(autotune.cache_path()), "key": key}, first or None


def _rank0(raw: dict[str, Any] | None) -> dict[str, Any]:
    """bench_worker's result: rank 0 returns the measurements (other ranks return None, and are not returned)."""
    if raw is None:
        raise RuntimeError("the benchmark's rank 0 returned no measurements")
    return raw


if __name__ == "__main__":
    main()

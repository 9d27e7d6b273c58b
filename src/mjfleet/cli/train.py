"""`uv run train <Task> [flags]`: the flags, and how a training run ended (done, interrupted, resume with).

What runs is `mjfleet.train`: the job resolved from these flags (`train.job`), the workers that train it
(`train.worker`, started by `mjfleet.launch.launcher.run_workers`), or this process as one worker of torchrun or
srun (`train.external`).
"""

from __future__ import annotations

import dataclasses
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.cli.common import command_argv, parse_task_command, user_errors, worker_plan
from mjfleet.fleet.srun import join_srun_step
from mjfleet.launch.devices import launched_externally
from mjfleet.launch.launcher import DEFAULT_HANG_FIRST_TIMEOUT_S, DEFAULT_HANG_TIMEOUT_S, run_workers
from mjfleet.launch.slurm import requeue_before_time_limit
from mjfleet.runs import RunDir
from mjfleet.runs.checkpoints import checkpoint_iteration
from mjfleet.train.job import TrainJob, reserve_run_dir
from mjfleet.train.job import resolve as resolve_job
from mjfleet.train.worker import train_worker

PROG = "train"
USAGE = """usage: train <Task> [flags]

Train a policy with PPO (or SAC) on a MuJoCo-Warp task.
  train Cartpole-Balance                           GPU 0 if there is one, else CPU
  train Cartpole-Balance --algorithm sac           off-policy SAC instead of PPO (docs/sac.md)
  train Cartpole-Balance --gpu-ids 0 1             one worker per GPU (or: all)
  train Cartpole-Balance --gpu-ids None --cpu-workers 2   CPU data-parallel (gloo)
  train Cartpole-Balance --resume                  continue the latest run from its latest checkpoint
  train <Task> --help                              every flag of that task"""


@dataclass
class TrainFlags:
    """Train a policy with PPO or SAC. Every env and agent setting of the task is a flag (--env.*, --agent.*)."""

    algorithm: Literal["ppo", "sac", "distillation"] | None = None
    """The learning algorithm (alias of --agent.algorithm-name): ppo (on-policy, the default), sac (off-policy
    with a replay buffer per worker; its settings are --agent.sac.*; docs/sac.md) or distillation (a student
    imitating --teacher; --agent.distillation.*)."""
    teacher: str | None = None
    """With --algorithm distillation: the teacher's checkpoint or run directory
    (alias of --agent.distillation.teacher)."""

    robot: str | None = None
    """A Python file that defines a RobotDescription: the robot of a task that takes one (Velocity-Flat; its
    experiment is named after the robot). Workers load the same file. docs/bring-your-robot.md."""

    gpu_ids: tuple[str, ...] = ("auto",)
    """GPUs to train on, one worker each: `0 1`, `"[0, 1]"`, `all`, or `None`/`cpu` for CPU. auto: GPU 0 if
    CUDA is available, else CPU. Ids index into CUDA_VISIBLE_DEVICES when it is set."""
    cpu_workers: int | None = None
    """On CPU (--gpu-ids None, or by default on a machine without a GPU): number of CPU worker processes (gloo
    data-parallel). Default: the task's (1; Quadruped-Velocity-Flat: 2), at most one per usable core."""
    workers_per_gpu: int = 1
    """Workers sharing each selected GPU (then gloo with CUDA tensors, as nccl refuses two ranks on one GPU): for
    small env counts and for testing the multi-worker CUDA path on one GPU, not for speed."""
    threads: int | None = None
    """Torch threads per worker, for everything. Default: 1 per CPU worker (use --cpu-workers to use more cores),
    and the PPO update may use the cores the workers leave idle when that measures faster; GPU workers split the
    machine's cores."""
    hosts: tuple[str, ...] = ("localhost",)
    """Machines to run on (`h1 h2`, or `slurm`); each runs one worker per selected GPU (on CPU: --cpu-workers
    workers). See docs/distributed.md."""
    rendezvous_host: str | None = None
    """With --hosts: the address (or name) of this machine that the other hosts connect to. Default: the address
    of the interface that routes to the first remote host (or $MJFLEET_RENDEZVOUS_HOST)."""
    num_envs: int | None = None
    """Environments per worker (alias of --env.num-envs). Default: the task's default for the device."""
    seed: int | None = None
    """Base seed (alias of --agent.seed). Worker k uses seed + k, k the GLOBAL rank (deliberately: on several hosts
    seed + local_rank would repeat the same seeds on every host)."""
    max_iterations: int | None = None
    """Training iterations (alias of --agent.max-iterations): each collects num-steps-per-env steps of every
    environment, then updates (PPO: its epochs; SAC: its gradient steps)."""
    max_env_steps: int | None = None
    """Train for this many environment steps in total, over all workers: converted to iterations (rounded up;
    printed) and used instead of --max-iterations."""
    run_name: str | None = None
    """Suffix of the run directory (alias of --agent.run-name)."""
    logs_root: str = "logs"
    """Run directories go to <logs-root>/<experiment>/<timestamp>[_<run-name>]/."""
    log_format: Literal["block", "compact"] = "block"
    """Console progress: a short block per iteration, or one line with ETA."""
    hang_timeout_s: float = DEFAULT_HANG_TIMEOUT_S
    """Several workers: a rank that makes no progress (no iteration phase, no exchange) for this many seconds ends
    the run with a line naming it and what it was last doing. 0: not watched. Rank 0's evaluation, video and
    checkpoint writes keep signalling, so they are not hangs."""
    hang_first_timeout_s: float = DEFAULT_HANG_FIRST_TIMEOUT_S
    """The same limit before a rank's first iteration ends (process start, kernel compile: minutes for a large
    model on a cold cache)."""
    torchrunx_log_dir: str | None = None
    """Worker log files (several workers only), unless $TORCHRUNX_LOG_DIR is set (it wins). Default:
    <run_dir>/torchrunx. "" disables."""
    resume: bool = False
    """Continue the latest run of this experiment (that has a checkpoint) from its latest checkpoint, in a new run
    directory; iteration numbers continue and --max-iterations counts from 0, not from the checkpoint."""
    load_run: str | None = None
    """Resume from this run: a run directory path, or a regex over run directory names (newest match). Implies
    --resume."""
    checkpoint: str | None = None
    """Resume from this checkpoint: an iteration number of the chosen run, or a file path. Implies --resume."""
    save_interval: int | None = None
    """Save a checkpoint every this many iterations (alias of --agent.save-interval); always at the end."""
    keep_last: int = 5
    """Keep the newest N checkpoints of the run, delete older ones (0: keep every checkpoint)."""
    keep_every: int = 500
    """Also keep, forever, a checkpoint at every multiple of K iterations (saved even between --save-interval
    saves; 0: no such milestones)."""
    export_on_save: bool = False
    """Export the policy to <run_dir>/exported/policy.onnx (+ policy.pt, policy.json, model.xml) at every save."""
    logger: Literal["tensorboard", "wandb", "none"] | None = None
    """Dashboard besides metrics.jsonl (alias of --agent.logger). wandb needs `uv sync --extra wandb`; offline:
    WANDB_MODE=offline."""
    wandb_project: str | None = None
    """wandb project (alias of --agent.wandb-project)."""
    wandb_upload_checkpoints: bool = False
    """With --logger wandb: log every saved checkpoint as a wandb model artifact."""
    eval_interval: int = 0
    """Every this many iterations, rank 0 evaluates the deterministic policy on environments of its own
    (Eval/* in metrics.jsonl and the dashboard) and keeps the best as model_best.pt. 0: never."""
    eval_episodes: int = 16
    """Episodes per periodic evaluation (on min(this, 64) environments)."""
    video: bool = False
    """Rank 0 records environment 0 of the training rollout to <run_dir>/videos/train_<iteration>.mp4 (and to
    wandb with --logger wandb), drawn from the steps training takes anyway (headless: MUJOCO_GL=egl, else
    osmesa)."""
    video_interval: int = 100
    """With --video: start a recording every this many iterations (at iterations 0, N, 2N, ...)."""
    video_length: int = 200
    """With --video: policy steps (frames) per recording; one longer than an iteration's rollout continues into
    the next iterations."""
    video_width: int = 640
    video_height: int = 480
    viewer: Literal["none", "viser"] = "none"
    """viser: rank 0's first environments live in a web browser while training (read-only; redrawn a few times a
    second; prints the URL)."""
    viewer_envs: int = 4
    """viser: how many environments (rank 0's first ones) the browser shows."""
    viewer_host: str = "127.0.0.1"
    """viser: the address its server binds. 0.0.0.0 lets other machines connect (no password: a warning says
    so)."""
    viewer_port: int = 8080
    """viser: the port it serves the page on; the next free one when that is busy."""
    wandb_run_path: str | None = None
    """Resume from the checkpoints a wandb run stored locally: `entity/project/run_id` (or `project/run_id`,
    `run_id`), found as <logs-root>/**/wandb/*run-*-<run_id>/files/model_<N>.pt, or such a wandb run directory.
    Needs a run trained with --wandb-upload-checkpoints (offline runs keep them there). Implies --resume;
    --checkpoint N picks model_N.pt."""


def parse_args(argv: list[str]) -> tuple[str, Any]:
    """(task name, parsed flags) from the command line."""
    return parse_task_command(argv, PROG, USAGE, TrainFlags, device_defaults=True)


def resolve(task_name: str, flags: Any) -> TrainJob:
    """The job these flags ask for, on the workers they ask for (`mjfleet.train.job.resolve`)."""
    from mjfleet.tasks import get_task

    return resolve_job(task_name, flags, worker_plan(flags, get_task(task_name).cpu_workers))


def resume_command(argv: list[str], run_dir: RunDir) -> str:
    """The command that continues `run_dir`: the original flags, with --resume/--load-run/--checkpoint replaced."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--resume", "--no-resume"):
            continue
        if name in ("--load-run", "--checkpoint", "--wandb-run-path"):
            skip = "=" not in arg
            continue
        kept.append(arg)
    return shlex.join(["uv", "run", PROG, *kept, "--load-run", str(run_dir.path)])


def _report_interrupt(job: TrainJob, argv: list[str], signum: int) -> None:
    latest = job.run_dir.latest_checkpoint()
    if latest is None:
        if job.resume_from is not None:  # stopped before its first save: where it started is still there
            print(
                f"{PROG}: interrupted before this run saved a checkpoint; {job.resume_from} is unchanged and can "
                "be resumed from again",
                file=sys.stderr,
            )
        else:
            print(f"{PROG}: interrupted before a checkpoint was saved; nothing to resume", file=sys.stderr)
        return
    print(
        f"{PROG}: stopped by {signal_name(signum)} after iteration {checkpoint_iteration(latest)}; "
        f"checkpoint {latest}\n"
        f"resume with: {resume_command(argv, job.run_dir)}",
        file=sys.stderr,
        flush=True,
    )


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    argv = command_argv(argv)
    task_name, flags = parse_args(argv)
    join_srun_step()  # a task of `srun -n N train ...` joins as one worker (mjfleet.launch.slurm)
    if launched_externally():
        from mjfleet.train.external import train_under_external_launcher

        train_under_external_launcher(
            task_name, flags, argv, lambda job, run, is_main: _run_and_report(job, argv, run, is_main)
        )
        return
    job = reserve_run_dir(dataclasses.replace(resolve(task_name, flags), command=tuple(argv)))
    _run_and_report(
        job,
        argv,
        lambda: run_workers(
            job.plan,
            train_worker,
            job,
            log_dir=flags.torchrunx_log_dir,
            default_log_dir=job.run_dir.path / "torchrunx",
            rendezvous_host=flags.rendezvous_host,
            hang_timeout_s=flags.hang_timeout_s,
            hang_first_timeout_s=flags.hang_first_timeout_s,
        ),
    )


def _remove_if_empty(run_dir: RunDir) -> None:
    """A run that failed before writing anything leaves nothing: its directory, and the experiment's folder and
    the logs root when this run made them (they are empty then)."""
    run_dir.remove_if_empty()
    for folder in run_dir.path.parents[:2]:
        try:
            folder.rmdir()
        except OSError:  # not empty (other runs), or not there
            return


def _run_and_report(
    job: TrainJob, argv: list[str], run: Callable[[], dict[str, Any]], is_main: bool = True
) -> None:
    """Run the training, report how it ended (on the main process), remove the run directory if nothing was
    written to it."""
    start = time.perf_counter()
    try:
        summary = run()
    except KeyboardInterrupt as exc:  # Interrupted (a clean stop), or a second Ctrl-C in the one-worker case
        signum = getattr(exc, "signum", signal.SIGINT)
        if is_main:
            _report_interrupt(job, argv, signum)
            _remove_if_empty(
                job.run_dir
            )  # stopped while Python modules were still importing: nothing written
            requeued = requeue_before_time_limit(signum)  # Slurm's time-limit warning (SIGUSR1)
            if requeued is not None:
                print(f"{PROG}: {requeued}", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None
    except BaseException:
        if is_main:
            _remove_if_empty(job.run_dir)
        raise
    if not is_main:
        return
    wall = time.perf_counter() - start
    first, last = summary["start_iteration"], summary["iterations"]
    done = f"{last} iterations" if first == 0 else f"iterations {first + 1}-{last} ({last - first} here)"
    print(
        f"done: {done}, {summary['env_steps'] - summary['start_env_steps']:,} env steps in {wall:.1f} s "
        f"(training {summary['train_time_s']:.1f} s); final mean return {summary['mean_return']:.2f}, "
        f"mean episode length {summary['mean_episode_length']:.1f}; run written to {summary['run_dir']}"
    )


if __name__ == "__main__":
    main()

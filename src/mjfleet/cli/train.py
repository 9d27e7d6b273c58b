"""`uv run train <Task> [flags]`: train a task with PPO, in one process or on several workers."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.cli.common import parse_task_command, quiet_warp, user_errors, worker_plan
from mjfleet.cli.live_viewer import open_training_viewer, training_viewer_settings
from mjfleet.envs import EnvConfig
from mjfleet.errors import UsageError, first_line
from mjfleet.launch.devices import WorkerPlan, external_plan, launched_externally, parse_gpu_ids
from mjfleet.launch.launcher import Interrupted, run_workers
from mjfleet.rl import AgentConfig
from mjfleet.runs import Retention, RunDir
from mjfleet.runs.checkpoints import (
    checkpoint_iteration,
    find_checkpoint,
    find_wandb_checkpoint,
    read_checkpoint,
)
from mjfleet.runs.video import choose_gl_backend, video_requested

PROG = "train"
USAGE = """usage: train <Task> [flags]

Train a policy with PPO on a MuJoCo-Warp task.
  train Cartpole-Balance                           GPU 0 if there is one, else CPU
  train Cartpole-Balance --gpu-ids 0 1             one worker per GPU (or: all)
  train Cartpole-Balance --gpu-ids None --cpu-workers 2   CPU data-parallel (gloo)
  train Cartpole-Balance --resume                  continue the latest run from its latest checkpoint
  train <Task> --help                              every flag of that task"""


@dataclass
class TrainFlags:
    """Train a policy with PPO. Every env and agent setting of the task is a flag (--env.*, --agent.*)."""

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
    num_envs: int | None = None
    """Environments per worker (alias of --env.num-envs). Default: the task's default for the device."""
    seed: int | None = None
    """Base seed (alias of --agent.seed). Worker k uses seed + k, k the GLOBAL rank (deliberately: on several hosts
    seed + local_rank would repeat the same seeds on every host)."""
    max_iterations: int | None = None
    """PPO iterations (alias of --agent.max-iterations)."""
    max_env_steps: int | None = None
    """Train for this many environment steps in total, over all workers: converted to iterations (rounded up;
    printed) and used instead of --max-iterations."""
    run_name: str | None = None
    """Suffix of the run directory (alias of --agent.run-name)."""
    logs_root: str = "logs"
    """Run directories go to <logs-root>/<experiment>/<timestamp>[_<run-name>]/."""
    log_format: Literal["block", "compact"] = "block"
    """Console progress: a short block per iteration, or one line with ETA."""
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
    """Export the policy to <run_dir>/exported/policy.onnx (+ policy.pt, policy.json) at every save."""
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
    # --- live viewer (wired by mjfleet.cli.live_viewer) ---
    viewer: Literal["none", "viser"] = "none"
    """viser: rank 0's first environments live in a web browser while training (read-only; redrawn at most 5
    times a second; prints the URL)."""
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


@dataclass(frozen=True)
class TrainJob:
    """Everything a worker needs, resolved once in the launching process."""

    task: str
    env: EnvConfig
    agent: AgentConfig
    plan: WorkerPlan
    run_dir: RunDir
    log_format: str = "block"
    resume_from: str | None = None
    """Checkpoint every worker loads before training (resolved in the parent, before run_dir exists)."""
    retention: Retention = dataclasses.field(default_factory=Retention)
    export_on_save: bool = False
    wandb_upload_checkpoints: bool = False
    command: tuple[str, ...] = ()
    """The command line as typed (without the program name), for params/run.yaml and the resume hint."""
    eval_interval: int = 0
    eval_episodes: int = 16
    video: tuple[int, int, int, int] | None = None
    """--video: (interval, length, width, height); None: no video."""
    viewer: tuple[int, str, int] | None = None
    """--viewer viser: (environments shown, host, port); None: no viewer."""


def parse_args(argv: list[str]) -> tuple[str, Any]:
    """(task name, parsed flags) from the command line."""
    return parse_task_command(argv, PROG, USAGE, TrainFlags, device_defaults=True)


def resolve(task_name: str, flags: Any, plan: WorkerPlan | None = None) -> TrainJob:
    """Apply device defaults, check values, pick the run directory (on `plan`, default: the one the flags ask for)."""
    from mjfleet.tasks import get_task

    spec = get_task(task_name)
    plan = worker_plan(flags, spec.cpu_workers) if plan is None else plan
    env, agent = flags.env, flags.agent  # the short aliases are applied already (mjfleet.cli.aliases)
    if "/" in agent.run_name or "\\" in agent.run_name or agent.run_name in (".", ".."):
        raise UsageError(f"--run-name {agent.run_name!r}: a run name is part of one directory name (no '/')")
    if env.num_envs is None:
        env.num_envs = spec.default_num_envs(plan.devices[0])
    if env.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {env.num_envs}")
    if flags.max_env_steps is not None:
        per_iteration = env.num_envs * agent.num_steps_per_env * plan.world_size
        if flags.max_env_steps < 1:
            raise UsageError(f"--max-env-steps must be >= 1, got {flags.max_env_steps}")
        agent.max_iterations = -(-flags.max_env_steps // per_iteration)
        print(
            f"--max-env-steps {flags.max_env_steps:,}: {agent.max_iterations} iterations of {per_iteration:,} "
            f"env steps ({plan.world_size} worker{'s' if plan.world_size > 1 else ''} x {env.num_envs} envs x "
            f"{agent.num_steps_per_env} steps)"
        )
    if agent.max_iterations < 1:
        raise UsageError(f"--max-iterations must be >= 1, got {agent.max_iterations}")
    if flags.eval_interval < 0 or flags.eval_episodes < 1:
        raise UsageError(
            f"--eval-interval must be >= 0 and --eval-episodes >= 1, got {flags.eval_interval} and "
            f"{flags.eval_episodes}"
        )
    if env.decimation < 1:
        raise UsageError(f"--env.decimation must be >= 1, got {env.decimation}")
    video = _video_settings(flags)
    if agent.save_interval < 1:
        raise UsageError(f"--agent.save-interval must be >= 1, got {agent.save_interval}")
    batch = env.num_envs * agent.num_steps_per_env
    if agent.algorithm.num_mini_batches < 1 or batch < agent.algorithm.num_mini_batches:
        raise UsageError(
            f"--agent.algorithm.num-mini-batches must be in [1, num_envs x num_steps_per_env = {batch}]"
        )
    if not 1 <= agent.algorithm.grad_sync_period <= agent.algorithm.num_mini_batches:
        raise UsageError(
            f"--agent.algorithm.grad-sync-period must be in [1, num-mini-batches = "
            f"{agent.algorithm.num_mini_batches}], got {agent.algorithm.grad_sync_period}"
        )
    retention = Retention(flags.keep_last, flags.keep_every)
    if agent.logger == "wandb" and importlib.util.find_spec("wandb") is None:
        raise UsageError("--logger wandb needs the optional wandb package: `uv sync --extra wandb`")
    if flags.wandb_upload_checkpoints and agent.logger != "wandb":
        raise UsageError("--wandb-upload-checkpoints needs --logger wandb")
    # Before the new run directory exists, so that --resume can never pick the (empty) run it is about to start.
    resume_from = None
    path = _resume_checkpoint(flags, agent)
    if path is not None:
        state = read_checkpoint(path)
        start = int(state["iter"])
        if start >= agent.max_iterations:
            raise UsageError(
                f"{path} is already at iteration {start}: pass --max-iterations above {start} (it counts from 0)"
            )
        trained_on = (state.get("infos") or {}).get("task")
        if trained_on and trained_on != spec.name:
            print(f"note: {path.name} was trained on {trained_on}; continuing it on {spec.name}")
        _adopt_network_shapes(agent, state, path)
        print(f"resuming from {path} (iteration {start}; training up to iteration {agent.max_iterations})")
        resume_from = str(path)
    run_dir = RunDir.new(agent.experiment_name, agent.run_name, root=flags.logs_root)
    return TrainJob(
        spec.name,
        env,
        agent,
        plan,
        run_dir,
        flags.log_format,
        resume_from=resume_from,
        retention=retention,
        export_on_save=flags.export_on_save,
        wandb_upload_checkpoints=flags.wandb_upload_checkpoints,
        eval_interval=flags.eval_interval,
        eval_episodes=flags.eval_episodes,
        video=video,
        viewer=training_viewer_settings(flags),  # live viewer
    )


def _adopt_network_shapes(agent: AgentConfig, state: dict[str, Any], path: pathlib.Path) -> None:
    """Resume with the checkpoint's hidden layers: e.g. a run trained on a GPU (the task's GPU networks) continued
    on a laptop (its CPU defaults may be smaller) must rebuild the networks it loads."""
    saved = state.get("rsl_rl_cfg") or {}
    for name, policy in (("actor", agent.actor), ("critic", agent.critic)):
        dims = (saved.get(name) or {}).get("hidden_dims")
        if dims is not None and tuple(dims) != tuple(policy.hidden_dims):
            print(
                f"note: {path.name} has {name} layers {tuple(dims)}; resuming with those, not {policy.hidden_dims}"
            )
            policy.hidden_dims = tuple(int(d) for d in dims)


def _resume_checkpoint(flags: Any, agent: AgentConfig) -> pathlib.Path | None:
    """The checkpoint --resume, --load-run, --checkpoint or --wandb-run-path choose; None: a fresh run."""
    if flags.wandb_run_path is not None:
        if flags.load_run is not None:
            raise UsageError("--wandb-run-path and --load-run both choose the run: pass one of them")
        return find_wandb_checkpoint(flags.wandb_run_path, flags.logs_root, flags.checkpoint)
    if flags.resume or flags.load_run is not None or flags.checkpoint is not None:
        experiment = pathlib.Path(flags.logs_root) / agent.experiment_name
        return find_checkpoint(experiment, flags.load_run, flags.checkpoint)
    return None


def _video_settings(flags: Any) -> tuple[int, int, int, int] | None:
    """--video's (interval, length, width, height), checked; None without --video."""
    if flags.video_interval < 1 or flags.video_length < 1:
        raise UsageError(
            f"--video-interval and --video-length must be >= 1, got {flags.video_interval} and "
            f"{flags.video_length}"
        )
    w, h = flags.video_width, flags.video_height
    if w < 2 or h < 2 or w % 2 or h % 2:
        raise UsageError(f"--video-width/--video-height must be even numbers >= 2 (H.264), got {w}x{h}")
    if not flags.video:
        return None
    return (flags.video_interval, flags.video_length, w, h)


def train_worker(job: TrainJob) -> dict[str, Any]:
    """Runs in every worker: build the simulation on this worker's device, train, return rank 0's summary.

    SIGINT/SIGTERM make every rank finish its iteration; rank 0 saves, and each worker raises
    :class:`Interrupted` (in a torchrunx worker that ends the process at once, with status 128 + the signal).
    """
    import torch
    import warp as wp

    from mjfleet.launch.worker import WorkerContext, seed_for, setup_worker
    from mjfleet.rl import FleetRunner
    from mjfleet.rl.stop import StopRequest
    from mjfleet.tasks import get_task

    quiet_warp()
    ctx = WorkerContext.from_env(job.plan)
    setup_worker(ctx, job.plan)
    seed = seed_for(job.agent.seed, ctx)
    torch.manual_seed(seed)
    spec = get_task(job.task)
    num_envs = job.env.num_envs
    assert num_envs is not None  # resolve() filled in the device default
    if ctx.is_main:
        print(
            f"{job.task}: {ctx.world_size} worker{'s' if ctx.world_size > 1 else ''} x {num_envs} envs = "
            f"{ctx.world_size * num_envs} envs on {job.plan.describe()}; run dir {job.run_dir.path}",
            flush=True,
        )
    # From here on a signal asks for a clean stop after the current iteration (one iteration at least runs).
    stop = StopRequest(abort_on_repeat=job.plan.in_process, announce=ctx.is_main)
    with stop, wp.ScopedDevice(ctx.device):
        env = spec.make_env(job.env, ctx.device)
        evaluator = None
        if ctx.is_main and job.eval_interval > 0:
            evaluator = _evaluator(spec, job, ctx.device)
        video = None
        if ctx.is_main and job.video is not None:
            from mjfleet.runs.video import TrainingVideo

            interval, length, width, height = job.video
            video = TrainingVideo(env, job.run_dir.path / "videos", interval, length, width, height)
        viewer = open_training_viewer(job.viewer, env, job.task) if ctx.is_main else None  # live viewer
        runner = FleetRunner(
            env,
            job.agent,
            job.run_dir if ctx.is_main else None,
            ctx.device,
            extra_checkpoint_info={"task": job.task, "env_cfg": dataclasses.asdict(job.env)},
            log_format=job.log_format,
            retention=job.retention,
            stop=stop,
            export_on_save=job.export_on_save,
            upload_checkpoints=job.wandb_upload_checkpoints,
            update_threads=job.plan.update_threads,
            evaluator=evaluator,
            eval_interval=job.eval_interval,
            video=video,
            on_step=viewer.step if viewer is not None else None,
        )
        if job.resume_from is not None:
            try:
                runner.load(job.resume_from, map_location=ctx.device)
            except (RuntimeError, KeyError, ValueError) as exc:
                first = first_line(exc)
                raise UsageError(
                    f"checkpoint {job.resume_from} does not fit this task's policy: {first}"
                ) from None
        start_iteration, start_env_steps = runner.current_learning_iteration, runner.env_steps
        if ctx.is_main and runner.reducer_name is not None:
            print(f"gradients averaged after every minibatch by {runner.reducer_name}", flush=True)
        if ctx.is_main:
            job.run_dir.create()
            _write_provenance(job.run_dir)
            job.run_dir.write_params(
                env=job.env,
                agent=job.agent,
                run={
                    "task": job.task,
                    "world_size": ctx.world_size,
                    "devices": list(job.plan.devices),
                    "hosts": list(job.plan.hosts),
                    "gradient_reducer": runner.reducer_name,
                    "seed": job.agent.seed,
                    "resumed_from": job.resume_from,
                    "start_iteration": start_iteration,
                    "keep_last": job.retention.keep_last,
                    "keep_every": job.retention.keep_every,
                    "command": list(job.command) if job.command else sys.argv,
                },
            )
        start = time.perf_counter()
        try:
            record = runner.learn(
                job.agent.max_iterations - start_iteration,
                init_at_random_ep_len=job.agent.init_at_random_ep_len,
            )
        finally:
            runner.close()
            if viewer is not None:
                viewer.close()
        if ctx.is_main:
            _plot(job.run_dir)
    if runner.interrupted is not None:
        raise Interrupted(runner.interrupted)
    return {
        "iterations": runner.current_learning_iteration,
        "start_iteration": start_iteration,  # > 0 when resumed: the counts below include the checkpoint's
        "env_steps": runner.env_steps,
        "start_env_steps": start_env_steps,
        "train_time_s": time.perf_counter() - start,
        "mean_return": record.get("mean_return"),
        "mean_episode_length": record.get("mean_episode_length"),
        "run_dir": str(job.run_dir.path),
    }


def _write_provenance(run_dir: RunDir) -> None:
    """params/versions.yaml, and inside a git repository params/git.yaml (commit, dirty) and params/git.diff."""
    from mjfleet.runs.provenance import git_state, versions

    state = git_state()
    if state is not None:
        run_dir.write_params(git=state[0])
        if state[0]["dirty"]:
            (run_dir.path / "params" / "git.diff").write_text(state[1])
    run_dir.write_params(versions=versions())


def _evaluator(spec, job: TrainJob, device: str):
    """Rank 0's periodic evaluation: `evaluate` on environments of its own, built once (outside training's random
    stream, so that evaluating changes nothing in training)."""
    import torch

    from mjfleet.evaluation import evaluate

    cfg = dataclasses.replace(job.env, num_envs=min(job.eval_episodes, 64))
    with torch.random.fork_rng(devices=[torch.device(device)] if device.startswith("cuda") else []):
        env = spec.make_env(cfg, device)
    return lambda policy: evaluate(env, policy, job.eval_episodes)


def _plot(run_dir: RunDir) -> None:
    """reward_curve.png at the end of training; a plotting problem must never fail the run."""
    from mjfleet.runs.plots import plot_reward_curve

    try:
        plot_reward_curve([run_dir.path], run_dir.reward_curve)
    except Exception as exc:  # noqa: BLE001
        print(f"warning: could not plot {run_dir.reward_curve}: {exc}", file=sys.stderr)


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
    argv = sys.argv[1:] if argv is None else list(argv)
    if video_requested(argv):
        choose_gl_backend()  # before anything imports mujoco
    quiet_warp()
    task_name, flags = parse_args(argv)
    if launched_externally():
        _train_as_one_of_the_launchers_workers(task_name, flags, argv)
        return
    job = _reserve_run_dir(dataclasses.replace(resolve(task_name, flags), command=tuple(argv)))
    _run_and_report(
        job,
        argv,
        lambda: run_workers(
            job.plan,
            train_worker,
            job,
            log_dir=flags.torchrunx_log_dir,
            default_log_dir=job.run_dir.path / "torchrunx",
        ),
    )


def _reserve_run_dir(job: TrainJob) -> TrainJob:
    try:  # here, once: two runs started in the same second get two directories
        return dataclasses.replace(job, run_dir=job.run_dir.reserve())
    except OSError as exc:
        raise UsageError(
            f"cannot create the run directory {job.run_dir.path}: {exc.strerror or exc}"
        ) from None


def _train_as_one_of_the_launchers_workers(task_name: str, flags: Any, argv: list[str]) -> None:
    """`torchrun --nproc_per_node N $(which train) ...` (or srun with RANK, WORLD_SIZE, MASTER_ADDR exported): this
    process is one worker of the launcher's process group. Rank 0 resolves the job and reserves the run directory,
    and every rank trains that same job, so there is one run directory with one writer, as with `--cpu-workers`."""
    import torch.distributed as dist

    tokens = None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids)
    if flags.workers_per_gpu != 1:
        raise UsageError(
            "--workers-per-gpu does not apply under a launcher such as torchrun: it placed the workers"
        )
    cpu_workers = 1 if flags.cpu_workers is None else flags.cpu_workers
    plan = external_plan(parse_gpu_ids(tokens), cpu_workers, list(flags.hosts), flags.threads)
    dist.init_process_group(plan.backend, init_method="env://")
    try:
        is_main = dist.get_rank() == 0
        agreed: list[Any] = [None]
        if is_main:
            if plan.notice:
                print(plan.notice)
            try:
                agreed[0] = _reserve_run_dir(
                    dataclasses.replace(resolve(task_name, flags, plan), command=tuple(argv))
                )
            except UsageError as exc:  # every rank must leave the broadcast below
                agreed[0] = exc
        dist.broadcast_object_list(agreed, src=0)
        if isinstance(agreed[0], UsageError):
            if is_main:
                raise agreed[0]
            raise SystemExit(2)  # rank 0 says why
        job: TrainJob = agreed[0]
        _run_and_report(job, argv, lambda: train_worker(job), is_main=is_main)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


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
            job.run_dir.remove_if_empty()  # stopped while Python modules were still importing: nothing written
        raise SystemExit(128 + signum) from None
    except BaseException:
        if is_main:
            job.run_dir.remove_if_empty()
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

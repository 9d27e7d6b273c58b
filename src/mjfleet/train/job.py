"""One training job, resolved once in the launching process: flags -> `TrainJob`, every check, the resume choice."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
from dataclasses import dataclass
from typing import Any

from mjfleet.envs import EnvConfig
from mjfleet.errors import UsageError
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.rl import AgentConfig
from mjfleet.runs import Retention, RunDir
from mjfleet.runs.checkpoints import (
    checkpoint_iteration,
    find_checkpoint,
    find_wandb_checkpoint,
    read_checkpoint,
)
from mjfleet.runs.continuation import continuation_for, trim_metrics


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
    task_modules: tuple[str, ...] = ()
    """Modules that register tasks (MJFLEET_TASK_MODULES as the parent read it, then the --robot file by its
    absolute path): every worker loads them before looking the task up, whatever environment it was started
    with."""
    viewer: tuple[int, str, int] | None = None
    """--viewer viser: (environments shown, host, port); None: no viewer."""
    slurm: dict[str, Any] | None = None
    """The Slurm job that runs this training (params/run.yaml records it, so a requeued job finds its run)."""
    continues_run: bool = False
    """`run_dir` exists already: a requeued Slurm job continues the run it started there from `resume_from`."""


def resolve(task_name: str, flags: Any, plan: WorkerPlan) -> TrainJob:
    """Apply device defaults, check every value once, choose the checkpoint to resume from and the run directory.
    `flags` are `train`'s (mjfleet.cli.train.TrainFlags with the task's --env.* / --agent.*); `plan` the workers'."""
    from mjfleet.launch.slurm import current_job
    from mjfleet.tasks import get_task
    from mjfleet.tasks.plugins import environment_task_modules, robot_modules
    from mjfleet.viewers.scene import training_viewer_settings

    spec = get_task(task_name)
    env, agent = flags.env, flags.agent  # the short aliases are applied already (mjfleet.cli.aliases)
    # A requeued Slurm job continues the run it started: same directory, its latest checkpoint. Looked up first,
    # so that its announcement is the first line.
    slurm_job = current_job()
    continued = continuation_for(pathlib.Path(flags.logs_root) / agent.experiment_name, slurm_job)
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
    if flags.eval_interval < 0 or flags.eval_episodes < 1:
        raise UsageError(
            f"--eval-interval must be >= 0 and --eval-episodes >= 1, got {flags.eval_interval} and "
            f"{flags.eval_episodes}"
        )
    if env.decimation < 1:
        raise UsageError(f"--env.decimation must be >= 1, got {env.decimation}")
    if (
        not 0.0 <= env.penalty_curriculum_start <= 1.0
        or min(env.penalty_curriculum_steps, env.penalty_curriculum_delay) < 0
    ):
        raise UsageError(
            "--env.penalty-curriculum-start must be in [0, 1] and --env.penalty-curriculum-steps and -delay >= 0, "
            f"got {env.penalty_curriculum_start}, {env.penalty_curriculum_steps} and {env.penalty_curriculum_delay}"
        )
    spec.check_env_config(env)
    video = _video_settings(flags)
    agent.check(env.num_envs)
    retention = Retention(flags.keep_last, flags.keep_every)
    if agent.logger == "wandb" and importlib.util.find_spec("wandb") is None:
        raise UsageError("--logger wandb needs the optional wandb package: `uv sync --extra wandb`")
    if flags.wandb_upload_checkpoints and agent.logger != "wandb":
        raise UsageError("--wandb-upload-checkpoints needs --logger wandb")
    # Before the new run directory exists, so that --resume can never pick the (empty) run it is about to start.
    resume_from = None
    path = continued.checkpoint if continued is not None else _resume_checkpoint(flags, agent)
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
        _check_algorithm(agent, state, path)
        _adopt_network_shapes(agent, state, path)
        print(f"resuming from {path} (iteration {start}; training up to iteration {agent.max_iterations})")
        if agent.algorithm_name == "sac":  # the buffer is not in checkpoints (too large; refilled quickly)
            print(
                f"replay buffer starts empty; warm-up {agent.sac.random_steps} steps with the checkpoint's policy"
            )
        resume_from = str(path)
    if agent.algorithm_name == "distillation":
        from mjfleet.rl.distillation import load_teacher

        if not agent.distillation.teacher and resume_from is not None:
            agent.distillation.teacher = resume_from  # a distillation checkpoint holds its teacher
        load_teacher(
            agent.distillation.teacher, spec.name
        )  # before the run directory exists: one line if wrong
    if continued is not None:
        run_dir = RunDir(continued.run_path)
    else:
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
        task_modules=environment_task_modules() + robot_modules(flags.robot),
        viewer=training_viewer_settings(flags),
        slurm=slurm_job.run_fields() if slurm_job is not None else None,
        continues_run=continued is not None,
    )


def _check_algorithm(agent: AgentConfig, state: dict[str, Any], path: pathlib.Path) -> None:
    """A checkpoint continues with the algorithm that trained it (its networks are that algorithm's), or with one
    that starts from it (PPO from a distilled student)."""
    from mjfleet.rl.algorithm import check_trained_with

    check_trained_with(state, agent.algorithm_name, path)


def _adopt_network_shapes(agent: AgentConfig, state: dict[str, Any], path: pathlib.Path) -> None:
    """Resume with the checkpoint's networks: its hidden layers (a run trained on a GPU with the task's GPU networks
    continued on a laptop, whose CPU defaults may be smaller), the actor's observation groups and memory (a
    recurrent run resumed, or fine-tuned, without repeating its flags)."""
    if agent.algorithm_name == "sac":
        saved_sac = (state.get("agent_cfg") or {}).get("sac") or {}
        for name in ("actor_hidden_dims", "critic_hidden_dims"):
            dims = saved_sac.get(name)
            if dims is not None and tuple(dims) != tuple(getattr(agent.sac, name)):
                print(f"note: {path.name} has SAC {name} {tuple(dims)}; resuming with those")
                setattr(agent.sac, name, tuple(int(d) for d in dims))
        return
    from mjfleet.rl.algorithm import trained_with

    saved = state.get("rsl_rl_cfg") or {}
    if trained_with(state) != agent.algorithm_name:  # PPO fine-tuning a distilled student
        print(
            f"note: fine-tuning {path.name}'s {trained_with(state)} student with {agent.algorithm_name}: a new "
            f"critic (trained alone for --agent.ppo.critic-warmup-iterations "
            f"{agent.ppo.critic_warmup_iterations}), action noise from --agent.actor.init-noise-std "
            f"({agent.actor.init_noise_std})"
        )
    for name, policy in (("actor", agent.actor), ("critic", agent.critic)):
        network = saved.get(name) or {}
        found = {"hidden_dims": network.get("hidden_dims")}
        if name == "actor" and "class_name" in network:  # the actor's inputs and memory too
            found["obs_groups"] = (saved.get("obs_groups") or {}).get("actor")
            found["rnn"] = network.get("rnn_type", "none")
            found["rnn_hidden_dim"] = network.get("rnn_hidden_dim", policy.rnn_hidden_dim)
            found["rnn_num_layers"] = network.get("rnn_num_layers", policy.rnn_num_layers)
        for field, value in found.items():
            value = tuple(value) if isinstance(value, list) else value
            if value is not None and value != getattr(policy, field):
                label = "layers" if field == "hidden_dims" else field
                print(
                    f"note: {path.name} has {name} {label} {value}; resuming with those, not {getattr(policy, field)}"
                )
                setattr(policy, field, value)
    if agent.algorithm_name == "distillation":  # the student reads the groups it was trained on
        agent.distillation.student_obs = agent.actor.obs_groups


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


def reserve_run_dir(job: TrainJob) -> TrainJob:
    """`job` with its run directory made (here, once: two runs started in the same second get two). A continued
    Slurm run keeps its directory and forgets the metrics of iterations after its checkpoint (trained again)."""
    if job.continues_run:
        assert job.resume_from is not None
        trim_metrics(job.run_dir.metrics_file, checkpoint_iteration(pathlib.Path(job.resume_from)))
        return job
    try:
        return dataclasses.replace(job, run_dir=job.run_dir.reserve())
    except OSError as exc:
        raise UsageError(
            f"cannot create the run directory {job.run_dir.path}: {exc.strerror or exc}"
        ) from None


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

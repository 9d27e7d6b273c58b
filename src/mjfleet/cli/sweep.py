"""`uv run sweep <Task> [flags] [-- train flags]`: a hyperparameter sweep and its seeds, with Optuna, on this
machine's CPU or GPUs, on hosts over ssh, or in a Slurm allocation or array (docs/sweeps.md).

  sweep --resume <dir> [--quiet]   continue a stopped sweep
  sweep --report <dir>      write its report again
  sweep --dashboard <dir>   optuna-dashboard on 127.0.0.1
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from mjfleet.cli.aliases import renamed_flags
from mjfleet.cli.common import command_argv, split_task, user_errors
from mjfleet.cli.parse import parse_flags
from mjfleet.errors import UsageError

PROG = "sweep"
USAGE = """usage: sweep <Task> --param PATH=DIST [--param ...] [flags] [-- train flags]

Sweep train's flags with Optuna; every trial is an ordinary run, judged by play's evaluation.
  sweep Cartpole-Balance --param agent.ppo.learning-rate=loguniform:1e-4:1e-2 --trials 8 --seeds 3 --iterations 50
  sweep Cartpole-Balance --param env.rewards.alive=choice:0.5,1,2 --gpu-ids None --slots 2 -- --num-envs 64
  sweep --resume sweeps/Cartpole-Balance/<time>       continue a stopped sweep (--quiet: no progress bar)
  sweep --dashboard sweeps/Cartpole-Balance/<time>    optuna-dashboard on 127.0.0.1 (prints the ssh -L line)
  sweep <Task> --help                                 every flag
Distributions: uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH, intlog:LOW:HIGH, choice:A,B,C"""
INSTALL = "sweep needs Optuna: install it with `uv sync --extra sweep`"


@dataclass
class SweepFlags:
    """Sweep train's flags with Optuna; each configuration runs --seeds times, each run judged by play's evaluation."""

    param: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """A swept train flag: PATH=DIST, e.g. agent.ppo.learning-rate=loguniform:1e-4:1e-2 (repeat the flag).
    DIST: uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH, intlog:LOW:HIGH or choice:A,B,C."""
    trials: int | None = None
    """Configurations to sample (each runs --seeds times). Default: 8, or 1 when no --param is given (seeds only)."""
    seeds: int = 1
    """Runs of each configuration, seeds --seed, --seed + 1, ...; the report judges them together (IQM, 95% CI)."""
    seed: int = 0
    """The first seed of every configuration (the same seeds for all, so that they are compared on equal draws)."""
    objective: str = "mean_return"
    """What the evaluation of each trial (play, eval.json) reports to optimise: mean_return, mean_episode_length,
    early_terminations (falls), metrics.<name> (metrics.lin_vel_error: tracking error), terminations.<cause>."""
    direction: Literal["auto", "maximize", "minimize"] = "auto"
    """auto: maximize returns and episode lengths, minimize errors and terminations."""
    iterations: int | None = None
    """Per-trial budget in training iterations (train --max-iterations). Default: the task's."""
    env_steps: int | None = None
    """Per-trial budget in environment steps (train --max-env-steps), instead of --iterations."""
    minutes: float | None = None
    """Per-trial wall-clock budget: train is stopped (it saves a checkpoint) and evaluated after this long."""
    sampler: Literal["tpe", "random", "grid", "cmaes"] = "tpe"
    """Optuna's sampler: TPE, random, grid (choice: and int: parameters; --trials caps the grid) or CMA-ES
    (numeric parameters only)."""
    sampler_seed: int = 0
    pruner: Literal["none", "median"] = "none"
    """median: stop a trial whose periodic evaluation (train --eval-interval --prune-interval) is worse than the
    median of earlier trials at the same iteration (objectives: mean_return, mean_episode_length, metrics.*)."""
    prune_interval: int = 10
    """With --pruner median: iterations between the periodic evaluations it judges."""
    eval_episodes: int = 32
    """Episodes of each trial's evaluation (play --episodes)."""
    eval_num_envs: int = 16
    """Environments of each trial's evaluation (play --num-envs)."""
    eval_command: tuple[float, float, float] | None = None
    """Velocity tasks: evaluate every trial at this command VX VY WZ (play --command), e.g. 0.8 0 0 forward."""
    gpu_ids: tuple[str, ...] = ("auto",)
    """GPUs to place trials on (`0 1`, `all`), or None for CPU. auto: as train."""
    cpu_workers: int | None = None
    """On CPU: worker processes of each trial (train --cpu-workers). Default 1."""
    slots: int | None = None
    """Trials at once. Default: on CPU the usable cores // --cpu-workers; on GPUs --trials-per-gpu per GPU group;
    with --hosts one per host."""
    gpus_per_trial: int = 1
    """GPUs of each trial (a multi-worker trial); the selected GPUs are split into groups of this many."""
    trials_per_gpu: int = 1
    """Trials sharing each GPU group at once (small env counts)."""
    hosts: tuple[str, ...] = ("localhost",)
    """Hosts to place trials on, one slot each (`h1 h2` over train's ssh launch, or `slurm`: the allocation's nodes)."""
    sweep_dir: str | None = None
    """The sweep's directory (study, runs, report). Default: sweeps/<Task>/<time>. An existing one of the same
    command is joined (each task of a Slurm array runs the same command)."""
    storage: str | None = None
    """The study's storage: an RDB URL (sqlite:///x.db, postgresql://...) or a journal file path on a shared
    filesystem. Default: <sweep dir>/study.journal."""
    quiet: bool = False
    """Only each trial's line and the final summary: no progress bar, no periodic progress lines (not stored with
    the sweep: `sweep --resume <dir> --quiet` chooses again)."""


QUIET = ("--quiet", "--no-quiet")


def current_spelling(argv: list[str]) -> list[str]:
    """`argv` with the flags renamed since (mjfleet.cli.aliases: `agent.algorithm.*` is `agent.ppo.*`) written the
    current way: each --param's path and the train flags after `--`, so that the study, sweep.json and report.md
    name parameters as `train --help` does."""
    cut = argv.index("--") if "--" in argv else len(argv)
    out: list[str] = []
    for i, arg in enumerate(argv[:cut]):
        if arg.startswith("--param="):
            out.append("--param=" + _renamed_param(arg.removeprefix("--param=")))
        elif i > 0 and argv[i - 1] == "--param":
            out.append(_renamed_param(arg))
        else:
            out.append(arg)
    return out + (["--", *renamed_flags(argv[cut + 1 :])] if cut < len(argv) else [])


def _with_quiet(argv: list[str], quiet: bool) -> list[str]:
    """A stored command line (which never holds --quiet) with --quiet, before train's flags, if asked for."""
    cut = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:cut], *(["--quiet"] if quiet else []), *argv[cut:]]


def _renamed_param(text: str) -> str:
    path, sep, dist = text.partition("=")
    dashes = len(path) - len(path.lstrip("-"))
    new = renamed_flags(["--" + path.lstrip("-")])[0][2:]
    return path[:dashes] + new + sep + dist


def parse(argv: list[str]) -> tuple[str, SweepFlags, list[str]]:
    """(task, flags, fixed train flags) of `sweep <Task> [flags] [-- train flags]`."""
    cut = argv.index("--") if "--" in argv else len(argv)
    task, rest = split_task(argv[:cut], PROG, USAGE)
    from mjfleet.tasks import get_task

    task = get_task(task).name
    flags = parse_flags(SweepFlags, rest, prog=f"{PROG} {task}", description=SweepFlags.__doc__)
    return task, flags, argv[cut + 1 :]


def _require_optuna() -> None:
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep prints one line per trial itself
    except ImportError:
        raise UsageError(INSTALL) from None


def _sweep_dir(flags: SweepFlags, task: str) -> Path:
    if flags.sweep_dir:
        return Path(flags.sweep_dir).resolve()
    return (Path("sweeps") / task / time.strftime("%Y-%m-%d_%H-%M-%S")).resolve()


def check_only(argv: list[str], preflight: bool = False) -> Any:
    """The checked plan of `sweep <argv>`, nothing started (the docs' commands are checked so)."""
    from mjfleet.cli.train import parse_args as parse_train
    from mjfleet.sweep.checks import check

    _require_optuna()
    task, flags, fixed = parse(argv)
    return check(task, flags, fixed, _sweep_dir(flags, task), parse_train, preflight=preflight), flags, fixed


def start(argv: list[str], resume: bool = False) -> None:
    """Check everything, then run the sweep (a new one, or the one in --sweep-dir, joined or resumed)."""
    plan, flags, fixed = check_only(argv, preflight=True)
    record = plan.sweep_dir / "sweep.json"
    command = ["--sweep-dir", str(plan.sweep_dir)] if not flags.sweep_dir else []
    stored = [
        *[a for a in argv[: argv.index("--") if "--" in argv else len(argv)] if a not in QUIET],
        *command,
        *(["--", *fixed] if fixed else []),
    ]
    if record.exists():
        previous = json.loads(record.read_text())["argv"]
        if current_spelling(previous) != current_spelling(stored):
            raise UsageError(
                f"{plan.sweep_dir} holds another sweep ({shlex.join(previous)}): choose another --sweep-dir"
            )
        # the same sweep, stored before a flag was renamed: its study knows the old names
        if previous != stored:
            stored = previous
            plan = check_only(_with_quiet(previous, flags.quiet), preflight=True)[0]
    from mjfleet.sweep.session import run_session

    run_session(plan, stored, resume=resume, quiet=flags.quiet)


def _stored_argv(directory: str, what: str) -> list[str]:
    record = Path(directory) / "sweep.json"
    if not record.exists():
        raise UsageError(f"--{what} {directory}: not a sweep directory (no sweep.json)")
    return json.loads(record.read_text())["argv"]


def _dashboard(args: list[str]) -> None:
    from mjfleet.sweep.dashboard import DashboardFlags, serve

    if not args:
        raise UsageError("--dashboard needs the sweep directory: sweep --dashboard <dir>")
    directory, rest = args[0], args[1:]
    flags = parse_flags(DashboardFlags, rest, prog=f"{PROG} --dashboard {directory}")
    _require_optuna()
    argv = _stored_argv(directory, "dashboard")
    serve(Path(directory), parse(argv)[1].storage, flags)


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    argv = command_argv(argv)
    if argv and argv[0] in ("--resume", "--report"):
        what = argv[0][2:]
        quiet = what == "resume" and argv[2:] == ["--quiet"]
        if len(argv) != 2 and not quiet:
            also = " [--quiet]" if what == "resume" else ""
            raise UsageError(f"--{what} takes the sweep directory only: sweep --{what} <dir>{also}")
        stored = _stored_argv(argv[1], what)
        if what == "report":
            from mjfleet.sweep.session import report_only

            _require_optuna()
            task, flags, _ = parse(stored)
            report_only(task, flags, Path(argv[1]).resolve(), stored)
            return
        start(_with_quiet(stored, quiet), resume=True)
        return
    if argv and argv[0] == "--dashboard":
        _dashboard(argv[1:])
        return
    start(current_spelling(argv))


if __name__ == "__main__":
    main()

"""Shared command-line plumbing: task-first parsing, user errors as one line with exit status 2."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from mjfleet.cli.aliases import (
    apply_aliases,
    mjlab_flag_hint,
    mjlab_task_hint,
    recipe_weight_flags,
    task_flag_to_positional,
)
from mjfleet.cli.parse import parse_flags
from mjfleet.errors import UsageError
from mjfleet.fleet.plan import WorkerPlan
from mjfleet.launch.devices import GpuRequest, make_plan, parse_gpu_ids, runs_on_cpu
from mjfleet.launch.launcher import WorkerFailed
from mjfleet.warp_log import quiet_warp

__all__ = ["fail", "gpu_request", "parse_task_command", "quiet_warp", "user_errors", "worker_plan"]


def fail(prog: str, message: str) -> NoReturn:
    """Print a user error as one line and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def user_errors(prog: str) -> Callable:
    """Decorator for console-script mains, so no user sees a traceback for these:

    UsageError -> one line, exit 2; a failed worker -> one line, exit 1; Ctrl-C / SIGTERM -> 128 + signal.
    """

    def wrap(main: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(main)
        def run(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except UsageError as exc:
                fail(prog, str(exc))
            except WorkerFailed as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                raise SystemExit(1) from None
            except KeyboardInterrupt as exc:
                print(f"{prog}: interrupted", file=sys.stderr)
                raise SystemExit(getattr(exc, "exit_code", 130)) from None
            except BrokenPipeError:  # output piped into a reader that closed early (`... --help | head`)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
                raise SystemExit(1) from None

        return run

    return wrap


def command_argv(argv: list[str] | None) -> list[str]:
    """The command's arguments (sys.argv's when None), after the process-wide set-up every command needs first:
    the headless OpenGL backend when a video is asked for (before anything imports mujoco), and quiet warp."""
    from mjfleet.runs.video import choose_gl_backend, video_requested

    argv = sys.argv[1:] if argv is None else list(argv)
    if video_requested(argv):
        choose_gl_backend()
    quiet_warp()
    return argv


def gpu_request(flags: Any) -> GpuRequest:
    """The --gpu-ids flag, read (`auto`, its default, is the machine's default device)."""
    return parse_gpu_ids(None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids))


def worker_plan(flags: Any, default_cpu_workers: int = 1) -> WorkerPlan:
    """The worker plan from the common --gpu-ids / --cpu-workers / --hosts / --threads flags (prints any notice,
    unless the command has --quiet). `default_cpu_workers`: the task's, used on CPU when --cpu-workers is not
    given."""
    plan = make_plan(
        gpu_request(flags),
        cpu_workers=flags.cpu_workers,
        hosts=list(flags.hosts),
        threads=flags.threads,
        default_cpu_workers=default_cpu_workers,
        workers_per_gpu=getattr(flags, "workers_per_gpu", 1),
    )
    if plan.notice and not getattr(flags, "quiet", False):
        print(plan.notice)
    return plan


def split_task(argv: list[str], prog: str, usage: str) -> tuple[str, list[str]]:
    """The positional task name (or mjlab's `--task X`) and the remaining flags; prints usage for a bare `--help`."""
    argv = task_flag_to_positional(argv)
    if not argv or argv[0] in ("-h", "--help"):
        from mjfleet.tasks import task_names

        print(usage)
        print("\ntasks:\n" + "\n".join(f"  {name}" for name in task_names()))
        raise SystemExit(0 if argv else 2)
    if argv[0].startswith("-"):
        fail(prog, f"the task name comes first, e.g. `{prog} Cartpole-Balance {' '.join(argv)}`")
    return argv[0], argv[1:]


def robot_flag(args: list[str]) -> str | None:
    """The value of `--robot FILE` / `--robot=FILE` in `args` (None when absent)."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--robot" or arg.startswith("--robot="):
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if not value or value.startswith("-"):
                raise UsageError("--robot needs a file, e.g. `--robot my_robot.py`")
            return value
    return None


EXAMPLE_DEFAULTS = (
    "Defaults shown: those of a Unitree Go1 (`robots show unitree-go1`); with --robot FILE, your robot's."
)


def wants_help(args: list[str]) -> bool:
    """Whether `args` ask for help (-h/--help before a `--`)."""
    for arg in args:
        if arg == "--":
            return False
        if arg in ("-h", "--help"):
            return True
    return False


def help_spec(template: Any) -> Any:
    """A task that takes a robot (`--robot FILE`), for its --help without one: its flags over the defaults of an
    example robot, mjfleet's Unitree Go1 with the reward recipe a robot file gets by default, so that every flag
    is listed; the description says whose defaults they are. Nothing is registered or fetched."""
    from mjfleet.robots.unitree_go1 import UNITREE_GO1

    example = dataclasses.replace(UNITREE_GO1, recipe=None)
    return dataclasses.replace(
        template.for_robot(example),
        name=template.name,
        description=f"{template.description} {EXAMPLE_DEFAULTS}",
    )


def with_task_configs(base: type, env_default: Any, agent_default: Any, name: str) -> type:
    """A dataclass type = `base` + `env` and `agent` fields typed as this task's own config classes.

    tyro builds flags from annotations, so the task's concrete config types must appear in them.
    """
    return dataclasses.make_dataclass(
        name,
        [
            ("env", type(env_default), dataclasses.field(default_factory=lambda: env_default)),
            ("agent", type(agent_default), dataclasses.field(default_factory=lambda: agent_default)),
        ],
        bases=(base,),
    )


def parse_task_command(
    argv: list[str],
    prog: str,
    usage: str,
    flags_base: type,
    description: str | None = None,
    sweeps: tuple[str, ...] = (),
    env_defaults: Callable[[Any], Any] | None = None,
    device_defaults: bool = False,
):
    """(task name, flags) for `<prog> <Task> [flags]`: `flags_base` plus the task's own --env.* / --agent.*, with
    the short aliases the user gave already applied to them (see mjfleet.cli.aliases; ``sweeps`` as there).
    ``env_defaults(spec)`` gives the env config the --env.* flags change (default: ``spec.env_config()``).
    ``device_defaults``: the --agent.* defaults are the task's for the device --gpu-ids picks (`flags_base` has
    it), CPU or GPU (TaskSpec.agent_config_cpu)."""
    from mjfleet.tasks import get_task
    from mjfleet.tasks.plugins import task_for_robot

    task_name, rest = split_task(argv, prog, usage)
    try:
        spec = get_task(task_name)
    except UsageError:
        # an unknown name that is mjlab's: name mjfleet's counterpart instead of the closest spellings
        hint = mjlab_task_hint(task_name)
        if hint is None:
            raise
        raise UsageError(hint) from None
    # Before the flags: the task's --env.* defaults come from the robot (its home pose, its reward weights).
    robot = robot_flag(rest)
    if robot is not None and "robot" not in {f.name for f in dataclasses.fields(flags_base)}:
        raise UsageError(f"`{prog}` does not take --robot (train, play and bench do)")
    if robot is None and spec.for_robot is not None and wants_help(rest):
        spec = help_spec(spec)
        description = f"{description} {EXAMPLE_DEFAULTS}" if description else None
    else:
        spec = task_for_robot(spec, robot)

    def parse(on_cpu: bool) -> Any:
        env_default = env_defaults(spec) if env_defaults is not None else spec.env_config()
        agent_default = spec.default_agent_config("cpu" if on_cpu else "cuda")
        flags_type = with_task_configs(flags_base, env_default, agent_default, f"{prog.title()}Config")
        args = recipe_weight_flags(rest, getattr(env_default, "rewards", None))
        try:
            return parse_flags(
                flags_type, args, prog=f"{prog} {spec.name}", description=description or spec.description
            )
        except UsageError:
            # a flag spelled as in mjlab: name mjfleet's instead of tyro's guess
            hint = mjlab_flag_hint(rest)
            if hint is None:
                raise
            raise UsageError(hint) from None

    if device_defaults and spec.agent_config_cpu is not None:
        # Parse over the defaults of this machine's default device (what --help shows), and once more over the
        # other device's if --gpu-ids picks that: flags given win either way.
        guess = runs_on_cpu(GpuRequest("default"))
        flags = parse(guess)
        if runs_on_cpu(gpu_request(flags)) != guess:
            flags = parse(not guess)
    else:
        flags = parse(on_cpu=False)
    apply_aliases(flags, sweeps)
    spec.check_ready()
    return spec.name, flags

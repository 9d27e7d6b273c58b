"""`uv run tasks`: list the registered tasks."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from mjfleet.cli.common import user_errors
from mjfleet.cli.parse import parse_flags
from mjfleet.errors import UsageError

PROG = "tasks"


@dataclass
class TasksFlags:
    """List the tasks `train`, `play` and `bench` accept: each one's description, its default environment counts
    on CPU and GPU, its CPU workers, and the plug-in module that registered it (docs/tasks.md)."""


def parse_args(argv: list[str]) -> TasksFlags:
    """No arguments (a task's own flags are `train <Task> --help`'s): anything else is a one-line UsageError."""
    try:
        return parse_flags(TasksFlags, argv, prog=PROG)
    except UsageError as exc:
        what = str(exc).removesuffix(f" (see `{PROG} --help`)")
        raise UsageError(f"{what}: `tasks` takes none (a task's flags: `train <Task> --help`)") from None


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    parse_args(sys.argv[1:] if argv is None else list(argv))
    from mjfleet.tasks import get_task, task_names
    from mjfleet.tasks.plugins import sources

    names = task_names()
    width = max(len(n) for n in names)
    for name in names:
        spec = get_task(name)
        source = f" [plug-in: {sources[name]}]" if name in sources else ""
        print(
            f"{name:<{width}}  {spec.description}  [envs: {spec.num_envs_cpu} CPU / {spec.num_envs_gpu} GPU; "
            f"CPU workers: {spec.cpu_workers}]{source}"
        )


if __name__ == "__main__":
    main()

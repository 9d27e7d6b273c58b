"""`uv run tasks`: list the registered tasks."""

from __future__ import annotations

import argparse

from mjfleet.cli.common import user_errors
from mjfleet.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse, its errors a UsageError (one line, exit 2) instead of its two-line usage and message."""

    def error(self, message: str):
        hint = "`tasks` takes none (a task's flags: `train <Task> --help`)"
        raise UsageError(f"{message}: {hint}" if "unrecognized arguments" in message else message)


@user_errors("tasks")
def main(argv: list[str] | None = None) -> None:
    parser = _Parser(prog="tasks", description="List the tasks `train`, `play` and `bench` accept.")
    parser.parse_args(argv)
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

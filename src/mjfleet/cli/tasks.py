"""`uv run tasks`: list the registered tasks."""

from __future__ import annotations

import argparse

from mjfleet.cli.common import user_errors


@user_errors("tasks")
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="tasks", description="List the tasks `train`, `play` and `bench` accept."
    )
    parser.parse_args(argv)
    from mjfleet.tasks import get_task, task_names
    from mjfleet.tasks.plugins import sources

    names = task_names()
    width = max(len(n) for n in names)
    for name in names:
        spec = get_task(name)
        source = f" [plug-in: {sources[name]}]" if name in sources else ""
        print(
            f"{name:<{width}}  {spec.description}  [envs: {spec.num_envs_cpu} CPU / {spec.num_envs_gpu} GPU]"
            f"{source}"
        )


if __name__ == "__main__":
    main()

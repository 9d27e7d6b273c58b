"""Tasks: each registers an env class, its configs and its defaults. Importing this package registers all."""

from mjfleet.tasks import cartpole  # noqa: F401 - registers the Cartpole tasks
from mjfleet.tasks.registry import TaskSpec, get_task, register, task_names

__all__ = ["TaskSpec", "get_task", "register", "task_names"]

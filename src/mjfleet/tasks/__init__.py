"""Tasks: each registers an env class, its configs and its defaults. Importing this package registers all.

Tasks that live outside mjfleet register too (see mjfleet.tasks.plugins): installed packages through the
entry-point group `mjfleet.tasks`, and modules named in MJFLEET_TASK_MODULES (comma-separated, importable module
names). Workers import this package as well, so they see the same tasks.
"""

from mjfleet.tasks import cartpole, humanoid, locomotion  # noqa: F401 - importing registers the tasks
from mjfleet.tasks.plugins import load_entry_points as _load_entry_points
from mjfleet.tasks.plugins import load_environment_modules as _load_environment_modules
from mjfleet.tasks.registry import TaskSpec, get_task, register, task_names

_load_entry_points()
_load_environment_modules()

__all__ = ["TaskSpec", "get_task", "register", "task_names"]

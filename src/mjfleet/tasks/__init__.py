"""Tasks: each registers an env class, its configs and its defaults. Importing this package registers all.

Tasks that live outside mjfleet register too when their modules are named in MJFLEET_TASK_MODULES
(comma-separated, importable module names); workers inherit the variable, so they see the same tasks.
"""

import importlib as _importlib
import os as _os

from mjfleet.tasks import cartpole, locomotion  # noqa: F401 - importing registers the Cartpole, Quadruped tasks
from mjfleet.tasks.registry import TaskSpec, get_task, register, task_names

for _module in filter(None, (m.strip() for m in _os.environ.get("MJFLEET_TASK_MODULES", "").split(","))):
    _importlib.import_module(_module)

__all__ = ["TaskSpec", "get_task", "register", "task_names"]

"""Tasks: each registers an env class, its configs and its defaults. Importing this package registers all.

Tasks that live outside mjfleet register too when their modules are named in MJFLEET_TASK_MODULES
(comma-separated, importable module names); workers inherit the variable, so they see the same tasks.
"""

import importlib as _importlib
import os as _os

from mjfleet.errors import UsageError as _UsageError
from mjfleet.tasks import cartpole, humanoid, locomotion  # noqa: F401 - importing registers the tasks
from mjfleet.tasks.registry import TaskSpec, get_task, register, task_names

for _module in filter(None, (m.strip() for m in _os.environ.get("MJFLEET_TASK_MODULES", "").split(","))):
    try:
        _importlib.import_module(_module)
    except ModuleNotFoundError as _exc:
        if _exc.name is None or not (_module == _exc.name or _module.startswith(_exc.name + ".")):
            raise  # the module exists but imports something missing: its traceback says what
        raise _UsageError(
            f"MJFLEET_TASK_MODULES names {_module!r}, which is not importable here (is its directory on "
            "PYTHONPATH?)"
        ) from None

__all__ = ["TaskSpec", "get_task", "register", "task_names"]

# MuJoCo's Python API is a compiled extension without type stubs; everything it exports is typed as Any here so
# that pyright checks mjfleet's own code rather than reporting every mujoco.<name> as unknown.
from typing import Any

def __getattr__(name: str) -> Any: ...

"""torchrunx is reached through one module, launch/seam.py. Every torchrunx name it relies on still exists with the
parameters, fields and methods mjfleet uses: a torchrunx upgrade that changes one fails here, naming it, rather
than at a user's launch."""

import ast
import dataclasses
import importlib
import inspect
import pathlib

import pytest

from mjfleet.launch import seam
from mjfleet.launch.seam import RELIED_ON

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "mjfleet"
SEAM = SRC / "launch" / "seam.py"


def torchrunx_imports(path: pathlib.Path) -> set[str]:
    """The torchrunx names `path` imports ("torchrunx.utils.comm.AgentStatus"), at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("torchrunx")
        ):
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "torchrunx"}
    return found


def resolve(dotted: str) -> object:
    module, _, attribute = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        pytest.fail(
            f"{dotted} is gone from the installed torchrunx ({exc}); mjfleet.launch.seam relies on it"
        )


def offered(obj: object) -> set[str]:
    """The parameter, field and attribute names `obj` offers."""
    names = set(dir(obj)) if isinstance(obj, type) else set()
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):
        names |= {f.name for f in dataclasses.fields(obj)}
    elif callable(obj):
        names |= set(inspect.signature(obj).parameters)
    return names


@pytest.mark.parametrize("reliance", RELIED_ON, ids=lambda r: r.name)
def test_each_torchrunx_name_the_seam_relies_on_offers_what_mjfleet_uses(reliance):
    missing = [name for name in reliance.needs if name not in offered(resolve(reliance.name))]
    assert missing == [], f"{reliance.name} no longer has {missing}, which mjfleet uses: {reliance.why}"


def test_the_seam_gives_a_reason_for_every_torchrunx_name_it_imports():
    assert torchrunx_imports(SEAM) == {r.name for r in RELIED_ON}
    assert all(r.why for r in RELIED_ON)


def test_no_module_of_mjfleet_but_the_seam_imports_torchrunx():
    others = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p != SEAM and torchrunx_imports(p)}
    assert others == set(), "import these torchrunx names through mjfleet.launch.seam"


def test_both_launcher_agent_exchanges_go_through_the_all_gather_that_the_signed_group_overrides():
    # launch/group.py signs frames in its _all_gather; were torchrunx's sync_* to stop calling it, payloads and
    # statuses would travel unsigned.
    class Recording(seam.LauncherAgentGroup):
        def __post_init__(self) -> None:
            self.sent = []

        def _all_gather(self, obj: object) -> list:
            self.sent.append(obj)
            return ["launcher", "agent 1", "agent 2"]

    group = Recording(launcher_hostname="h", launcher_port=1, world_size=3, rank=0, agent_timeout=1)
    payloads = group.sync_payloads(payload="payload")
    statuses = group.sync_agent_statuses(status="status")
    assert group.sent == ["payload", "status"], (
        "torchrunx.utils.comm.LauncherAgentGroup.sync_* no longer call _all_gather"
    )
    assert payloads == ("launcher", ["agent 1", "agent 2"]) and statuses == ["agent 1", "agent 2"], (
        "torchrunx.utils.comm.LauncherAgentGroup.sync_* changed what they return"
    )

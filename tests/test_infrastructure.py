"""The rule for tests whose infrastructure .ci/run installs: skipped with the reason outside CI, failed under CI."""

from types import SimpleNamespace

import pytest
from conftest import pytest_runtest_setup
from helpers import in_ci, missing_infrastructure, needs_infrastructure, require_infrastructure

REASON = "needs Xvfb (apt-get install xvfb; .ci/run installs it)"


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("", False), ("false", False)])
def test_ci_is_read_from_the_ci_variable(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_missing_infrastructure_fails_with_the_reason_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        missing_infrastructure(REASON)
    assert "CI=true" in str(failed.value) and REASON in str(failed.value)


def test_missing_infrastructure_skips_with_the_reason_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        missing_infrastructure(REASON)
    assert str(skipped.value) == REASON


@pytest.mark.parametrize("ci", ["true", None])
def test_infrastructure_that_is_there_neither_skips_nor_fails(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    require_infrastructure(None)


def _item_needing(reason: str | None) -> SimpleNamespace:
    def probe() -> str | None:  # a named function, as the test modules pass (a lambda is no test function)
        return reason

    marks = [needs_infrastructure(probe).mark]
    return SimpleNamespace(iter_markers=lambda name: [m for m in marks if m.name == name])


def test_a_marked_test_is_failed_under_ci_before_its_fixtures_when_its_probe_finds_something_missing(
    monkeypatch,
):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="Xvfb"):
        pytest_runtest_setup(_item_needing(REASON))
    pytest_runtest_setup(_item_needing(None))


def test_a_marked_test_is_skipped_outside_ci_when_its_probe_finds_something_missing(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Xvfb"):
        pytest_runtest_setup(_item_needing(REASON))


def test_every_test_ci_names_exists_and_is_marked_slow_for_its_second_step():
    """.ci/run's second step selects `-m slow` tests by file and by id: a renamed file or test would otherwise
    drop out of CI silently (pytest runs what is left), and an unmarked one would be deselected."""
    import ast
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    named = re.findall(r"(tests/[\w/]+\.py)(?:::(\w+)(?:\[([\w-]+)\])?)?", (root / ".ci" / "run").read_text())
    assert len(named) >= 8, named
    for path, name, param in named:
        assert (root / path).is_file(), f".ci/run names {path}, which does not exist"
        if name:
            tree = ast.parse((root / path).read_text())
            (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name] or [
                None
            ]
            assert function is not None, f".ci/run names {path}::{name}, which does not exist"
            marks = [ast.unparse(d) for d in function.decorator_list]
            # a parametrized case may carry the mark itself: pytest.param("sac", marks=pytest.mark.slow)
            case_marked = any(f"pytest.param('{param}', marks=pytest.mark.slow)" in m for m in marks if param)
            module_marked = re.search(r"^pytestmark = .*pytest\.mark\.slow", (root / path).read_text(), re.M)
            assert "pytest.mark.slow" in marks or case_marked or module_marked, (
                f"{path}::{name} is not marked slow: CI's `-m slow` skips it"
            )

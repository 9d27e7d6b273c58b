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

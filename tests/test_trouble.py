"""Physics trouble as shares of env steps, named on a line and warned about once."""

from __future__ import annotations

from mjfleet.runs.trouble import WARN_SHARE, TroubleWatch, combine, describe, shares


def test_counts_become_shares_of_the_steps_and_shares_stay_shares():
    record = {"Sim/nan_resets": 600.0, "Metrics/sim_solver_limit": 0.001, "Metrics/sim_overflow": 0.0}
    assert shares(record, env_steps=12_000) == {"nan_resets": 0.05, "solver_limit": 0.001}
    assert describe(record, 12_000) == "nan_resets 600 (5.00%)  solver_limit 0.10%"
    assert describe({"Sim/nan_resets": 0.0, "Metrics/sim_solver_limit": float("nan")}, 100) == ""


def test_a_warning_names_the_kind_and_its_cause_once_and_only_above_the_threshold():
    watch = TroubleWatch("play")
    below = {"Sim/nan_resets": WARN_SHARE * 1000 * 0.5}
    assert watch.warnings(below, env_steps=1000) == []
    above = {"Sim/nan_resets": 50.0}
    (line,) = watch.warnings(above, env_steps=1000, where="at iteration 3")
    assert line.startswith(
        "play: warning: nan_resets in 5.00% of env steps at iteration 3: the physics diverged"
    )
    assert watch.warnings(above, env_steps=1000) == []  # once per run and kind


def test_records_of_equal_steps_combine_counts_summed_and_shares_averaged():
    """Two iterations (or workers): a share one record lacks is 0 there; other log entries are not trouble."""
    first = {"Sim/nan_resets": 3.0, "Metrics/sim_solver_limit": 0.004, "Perf/update_threads": 2.0}
    second = {"Sim/nan_resets": 1.0, "Metrics/sim_overflow": 0.002}
    assert combine([first, second]) == {
        "Sim/nan_resets": 4.0, "Metrics/sim_solver_limit": 0.002, "Metrics/sim_overflow": 0.001,
    }  # fmt: skip
    assert combine([{"mean_return": 1.0}]) == {} and combine([]) == {}

"""scripts/vs_mjlab.py without mjlab's environment: its flags (bad ones are one line and status 2), how it reads
each side's output (mjlab's training log, its probe's JSON line, `bench --json`), the ratios it prints, and its
mjfleet half run for real at a tiny size with the very flags it passes to `bench`."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import sys

import pytest
from helpers import assert_usage_exit

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "vs_mjlab.py"
_spec = importlib.util.spec_from_file_location("vs_mjlab", SCRIPT)
assert _spec is not None and _spec.loader is not None
vs = importlib.util.module_from_spec(_spec)
sys.modules["vs_mjlab"] = vs  # its dataclasses look their module up there
_spec.loader.exec_module(vs)

# Two iterations as rsl_rl's logger prints them (rsl_rl/utils/logger.py: "Steps per second:" right-aligned)
MJLAB_LOG = """\
################################################################################
                       Learning iteration 0/3
                       Total steps: 6144
                  Steps per second: 812
                   Collection time: 6.512s
################################################################################
                       Learning iteration 1/3
                  Steps per second: 1530
                   Mean reward: 0.41
                       Learning iteration 2/3
                  Steps per second: 1570
"""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["h1"], "invalid choice: 'h1'"),
        (["go1", "--num-envs", "0"], "--num-envs must be at least 1"),
        (["g1", "--rounds", "0"], "--rounds must be at least 1"),
        (["go1", "--skip", "-1"], "--skip must be at least 0"),
        (["go1", "--device", "gpu0"], "--device must be cpu or cuda:N"),
        (["go1", "--iterations", "two"], "invalid int value: 'two'"),
    ],
)
def test_a_bad_flag_is_one_line_and_status_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as exit_info:
        vs.parse_args(argv)
    assert_usage_exit(exit_info, capsys.readouterr().err, needle)


def test_the_defaults_are_the_documented_cpu_comparison():
    args = vs.parse_args(["go1", "g1"])
    assert args.robots == ["go1", "g1"] and args.num_envs == 256 and args.device == "cpu"
    assert (vs.PAIRS["go1"].mjlab, vs.PAIRS["go1"].mjfleet) == (
        "Mjlab-Velocity-Flat-Unitree-Go1",
        "Go1-Velocity-Flat",
    )
    assert (vs.PAIRS["g1"].mjlab, vs.PAIRS["g1"].mjfleet) == (
        "Mjlab-Velocity-Flat-Unitree-G1",
        "G1-Velocity-Flat",
    )


def test_mjlab_training_rate_leaves_out_the_warm_up_iterations():
    assert vs.mjlab_training_rates(MJLAB_LOG, skip=1) == [1530.0, 1570.0]
    assert vs.mjlab_training_rates(MJLAB_LOG, skip=0)[0] == 812.0
    assert vs.mjlab_training_rates("no iterations here", skip=0) == []


def test_the_probe_line_gives_mean_rates_over_its_blocks():
    line = json.dumps({"num_envs": 4, "steps_per_block": 10, "env_s": [2.0, 1.0], "physics_s": [1.0, 0.5]})
    rates = vs.probe_rates(line)
    assert rates["env"] == pytest.approx(4 * 10 * 2 / 3.0)
    assert rates["physics"] == pytest.approx(4 * 10 * 2 / 1.5)


def test_the_ratio_is_mjfleet_over_mjlab_per_phase_and_its_median_over_rounds():
    mjlab = {"physics": 1000.0, "env": 800.0, "training": 500.0}
    rows = [
        {"robot": "go1", "mjlab": mjlab, "mjfleet": {"physics": 2000.0, "env": 800.0, "training": 250.0}},
        {"robot": "go1", "mjlab": mjlab, "mjfleet": {"physics": 3000.0, "env": 1600.0, "training": 500.0}},
        {"robot": "go1", "mjlab": mjlab, "mjfleet": {"physics": 1000.0, "env": 400.0, "training": 1000.0}},
    ]
    for row in rows:
        row["ratio"] = vs.ratios(row["mjfleet"], row["mjlab"])
    assert rows[0]["ratio"] == {"physics": 2.0, "env": 1.0, "training": 0.5}
    args = vs.parse_args(["go1"])
    table = vs.report("go1", 1, rows[0], args)
    assert "Mjlab-Velocity-Flat-Unitree-Go1" in table and "Go1-Velocity-Flat" in table
    assert table.splitlines()[-1].split()[-3:] == ["2.00x", "1.00x", "0.50x"]
    assert vs.medians(rows, "go1").endswith("physics 2.00x, env 1.00x, training 1.00x")


@pytest.mark.slow  # 109 s on the shared 2-core VM (bench's update tuning and the compiled loss of new networks)
def test_the_mjfleet_half_runs_bench_with_the_flags_it_passes_and_reads_its_json():
    # Cartpole at 4 envs with mjlab's robot networks: every flag the robots' runs pass to bench
    pair = vs.Pair("Mjlab-Cartpole-Balance", "Cartpole-Balance", vs.NETWORKS)
    args = vs.parse_args(
        ["cartpole", "--num-envs", "4", "--steps", "3", "--repeats", "1", "--iterations", "1"]
    )
    rates = vs.run_mjfleet(pair, args)
    assert set(rates) == set(vs.PHASES)
    assert all(math.isfinite(rate) and rate > 0 for rate in rates.values()), rates

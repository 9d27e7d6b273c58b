"""`bench`: every figure is measured on the real simulator and reported consistently. No timing is asserted."""

import json
import math
import pathlib
import subprocess
import sys

import pytest
from helpers import assert_real_plot, missing_infrastructure, run_cli, run_in_terminal

from mjfleet.bench import autotune, machine
from mjfleet.bench.report import scaling, summarize_run

BIN = pathlib.Path(sys.executable).parent
LOUD = ["--gpu-ids", "None", "--iterations", "1", "--steps", "4", "--repeats", "2"]
TINY = [*LOUD, "--quiet"]
PHASES = ("physics", "env", "rollout", "training")
DIVERGING = ["--env.init-velocity-range", "1e30"]
"""Cartpole made to go NaN: every reset draws a pole velocity of up to 1e30 rad/s, whose first physics step is
not finite, so every world is reset on NaN at every step."""
COLOURS = {
    "physics": (31, 119, 180),
    "env": (255, 127, 14),
    "rollout": (44, 160, 44),
    "training": (214, 39, 40),
}
"""matplotlib's tab:blue, tab:orange, tab:green and tab:red: the colour of each phase in bench's picture."""


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli("bench", *args, timeout=timeout)


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    from mjfleet.cli.bench import main

    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_positive_rate(value) -> None:
    assert isinstance(value, float) and math.isfinite(value) and value > 0


def colour_share(png: pathlib.Path, rgb: tuple[int, int, int], columns: slice = slice(None)) -> float:
    """The share of the image's pixels (in `columns`) drawn in `rgb`, give or take antialiasing."""
    import matplotlib.image
    import numpy as np

    image = matplotlib.image.imread(str(png))[:, columns, :3] * 255
    return float((np.abs(image - np.array(rgb)).max(axis=-1) < 12).mean())


def assert_consistent_point(point: dict, workers: int) -> None:
    """Every figure of one env count is there, positive, and the ratios are the ratios of the rates."""
    assert point["total_envs"] == point["num_envs"] * workers
    physics = point["physics"]
    for phase in PHASES:
        assert_positive_rate(point[phase]["env_steps_per_s"])
        assert_positive_rate(point[phase]["env_steps_per_s_mean"])
        assert point[phase]["env_steps_per_s"] >= point[phase]["env_steps_per_s_mean"] * (1 - 1e-9)
    assert physics["world_steps_per_s"] == pytest.approx(physics["env_steps_per_s"] * point["decimation"])
    for phase in ("env", "rollout", "training"):
        ratio = point[phase]["env_steps_per_s"] / physics["env_steps_per_s"]
        assert point[phase]["vs_physics"] == pytest.approx(ratio)
    training = point["training"]
    assert training["collect_share"] + training["update_share"] == pytest.approx(1.0)
    assert 0 < training["collect_share"] < 1
    assert training["steps_per_iteration"] == 24 * point["num_envs"] * workers
    assert training["env_steps_per_s"] == pytest.approx(
        training["steps_per_iteration"] / training["iteration_s"]
    )
    # an iteration is timed whole (record to record), so it lasts longer than its collection
    assert training["env_steps_per_s"] < training["collection_env_steps_per_s"]
    assert point["memory"]["peak_rss_mib_max"] > 0
    assert len(point["memory"]["peak_rss_mib_per_worker"]) == workers


def test_a_sweep_through_the_console_script_reports_every_figure_for_each_env_count(tmp_path):
    out = tmp_path / "bench.json"
    result = bench("Cartpole-Balance", "--num-envs", "32", "16", *TINY, "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "physics bound" in result.stdout and "start-up" in result.stdout

    report = json.loads(out.read_text())
    assert report["task"] == "Cartpole-Balance"
    assert set(report["versions"]) >= {"mjfleet", "torch", "warp-lang", "mujoco-warp", "rsl-rl-lib"}
    assert report["machine"]["cores"] >= 1 and report["machine"]["cpu"]
    (run,) = report["runs"]
    assert run["workers"] == 1 and run["device"] == "cpu" and run["device_name"]
    assert [p["num_envs"] for p in run["points"]] == [16, 32]  # ascending, whatever the order asked
    for point in run["points"]:
        assert_consistent_point(point, workers=1)
        assert point["training"]["grad_allreduce_share_of_update"] is None  # one worker: nothing to reduce
        # a healthy cart-pole: the trouble was counted in both phases, and there was none
        assert point["trouble"]["physics"]["env_steps"] == 4 * 2 * point["num_envs"]
        assert point["trouble"]["physics"]["shares"] == point["trouble"]["training"]["shares"] == {}
    assert "trouble" not in result.stdout and "warning" not in result.stderr
    startup = run["startup"]
    assert startup["kernel_cache"] in ("warm", "cold")
    assert startup["first_env_step_s"] > startup["build_s"] > 0
    assert report["scaling"] == []


def test_two_cpu_workers_report_scaling_against_one_worker_and_the_all_reduce_share(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code, stdout, _ = run_main(
        capsys,
        "Cartpole-Balance",
        "--num-envs",
        "16",
        "--cpu-workers",
        "2",
        *TINY,
        "--rounds",
        "2",
        "--json",
        str(out),
    )
    assert code == 0
    assert "scaling, 2 workers vs 1 (same envs per worker; median of 2 alternated rounds" in stdout
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert [(r["workers"], r["round"]) for r in runs] == [(1, 1), (2, 1), (1, 2), (2, 2)]  # alternated
    single, multi = runs[:2]
    assert single["workers"] == 1 and multi["workers"] == 2
    assert single["threads_per_worker"] == multi["threads_per_worker"]  # same share of the machine each
    assert_consistent_point(multi["points"][0], workers=2)
    training = multi["points"][0]["training"]
    for key in ("grad_allreduce_share_of_update", "grad_allreduce_share_of_iteration"):
        assert 0 < training[key] < 1
    assert training["grad_allreduce_share_of_iteration"] < training["grad_allreduce_share_of_update"]
    assert training["gradient_reducer"] == "shared-memory"  # named by the reducer the workers chose
    assert multi["startup"]["launch_to_first_env_step_s"] > 0
    assert multi["startup"]["first_env_step_s"] >= multi["startup"]["launch_to_first_env_step_s"]

    (entry,) = report["scaling"]
    assert entry["num_envs"] == 16 and entry["workers"] == 2 and entry["rounds"] == 2
    for phase in PHASES:
        rate = [r["points"][0][phase]["env_steps_per_s"] for r in runs]
        each = [rate[1] / rate[0], rate[3] / rate[2]]  # each round's 2 workers over its own 1 worker
        assert entry[phase]["speedups"] == pytest.approx(each)
        assert entry[phase]["speedup"] == pytest.approx(sum(each) / 2)  # the median of two
        assert entry[phase]["range"] == pytest.approx([min(each), max(each)])
        assert entry[phase]["efficiency"] == pytest.approx(entry[phase]["speedup"] / 2)
        assert entry[phase]["best_speedup"] == pytest.approx(max(rate[1], rate[3]) / max(rate[0], rate[2]))

    png = out.with_suffix(".png")  # beside the JSON: throughput (left) and scaling (right, one bar per phase)
    assert_real_plot(png)
    for phase, rgb in COLOURS.items():
        assert colour_share(png, rgb, slice(-500, None)) > 0.002, f"no {phase} bar in the scaling panel"


def test_num_envs_auto_uses_the_cached_count_and_json_dash_puts_only_the_json_on_stdout(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(tmp_path))
    from mjfleet.tasks import get_task

    spec = get_task("Cartpole-Balance")
    key = autotune.cache_key(
        "Cartpole-Balance",
        machine.cpu_model(),
        1,  # 1 torch thread: the CPU default
        machine.versions(),
        autotune.config_digest(spec.env_config(), spec.agent_config()),  # the task's own settings
    )
    autotune.store(key, {"num_envs": 16, "sweep": {"16": 1.0}, "date": "2026-11-22"})
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_main(capsys, "Cartpole-Balance", "--num-envs", "auto", *TINY, "--json", "-")
    assert code == 0
    report = json.loads(stdout)  # stdout is the JSON, whole
    assert report["auto"]["cached"] and report["auto"]["num_envs"] == 16
    assert [p["num_envs"] for p in report["runs"][0]["points"]] == [16]
    assert "auto num-envs: 16" in stderr  # the table went to stderr
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob("*.png"))  # no file, no picture


def test_the_auto_sweep_stops_where_throughput_stops_growing_and_picks_the_knee():
    curve = {64: 10.0, 128: 19.0, 256: 30.0, 512: 31.0, 1024: 32.0, 2048: 100.0}
    measured = []

    def measure(n):
        measured.append(n)
        return curve[n]

    entry = autotune.sweep(measure, "cpu")
    assert measured == [64, 128, 256, 512, 1024]  # two doublings in a row gain < 10%: stop
    assert entry["num_envs"] == 256  # the smallest count within 90% of the best
    assert autotune.pick({64: 50.0, 128: 95.0, 256: 100.0}) == 128


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["Cartpole-Balanse"], "unknown task"),
        (["Cartpole-Balance", "--num-envs", "0"], "--num-envs must be >= 1"),
        (["Cartpole-Balance", "--num-envs", "abc"], "cannot read 'abc'"),
        (["Cartpole-Balance", "--num-envs", "16", "--iterations", "0"], "--iterations"),
        (["Cartpole-Balance", "--gpu-ids", "None", "--cpu-workers", "0"], "--cpu-workers"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(args, needle, capsys):
    code, _, err = run_main(capsys, *args)
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("bench: error:")


def test_help_lists_the_tasks_and_the_task_help_lists_the_bench_flags(capsys):
    code, stdout, _ = run_main(capsys, "--help")
    assert code == 0 and "Cartpole-Balance" in stdout
    code, stdout, _ = run_main(capsys, "Cartpole-Balance", "--help")
    assert code == 0
    for flag in ("--num-envs", "--gpu-ids", "--cpu-workers", "--iterations", "--json", "--env.decimation"):
        assert flag in stdout


def test_a_block_lasts_as_long_as_the_slowest_worker():
    def rank(times, collect, update):
        point = {
            "num_envs": 10,
            "decimation": 2,
            "steps_per_block": 100,
            "steps_per_iteration": 240,
            "build_s": 0.1,
            "peak_rss_bytes": 2**20,
            "physics_s": times,
            "iterations": [{"collect_s": collect, "update_s": update, "grad_allreduce_s": 0.1}],
        }
        return {
            "startup": {"first_env_step_s": 1.0, "build_s": 0.1, "process_age_at_start_s": 0.5},
            "points": [point],
        }

    raw = {
        "workers": 2,
        "plan": "2 CPU workers",
        "device": "cpu",
        "device_name": "cpu",
        "threads_per_worker": 1,
        "ranks": [rank([1.0, 2.0], 0.5, 0.5), rank([2.0, 1.0], 0.25, 1.0)],
    }
    run = summarize_run(raw)
    point = run["points"][0]
    assert point["physics"]["env_steps_per_s"] == pytest.approx(2 * 10 * 100 / 2.0)
    assert point["training"]["env_steps_per_s"] == pytest.approx(2 * 240 / 1.25)
    assert point["training"]["grad_allreduce_share_of_update"] == pytest.approx((0.1 / 0.5 + 0.1 / 1.0) / 2)
    single = {"workers": 1, "points": [{"num_envs": 10, "physics": {"env_steps_per_s": 500.0}}]}
    (entry,) = scaling(single, run)
    assert entry["physics"]["efficiency"] == pytest.approx(1000.0 / 500.0 / 2)


def test_resolve_checks_a_command_and_plans_it_without_measuring():
    from mjfleet.cli.bench import parse_args, resolve

    args = [
        "Cartpole-Balance",
        "--gpu-ids",
        "None",
        "--cpu-workers",
        "2",
        "--threads",
        "1",
        "--num-envs",
        "64,16",
    ]
    plan, sizes, auto = resolve(*parse_args(args))
    assert plan.world_size == 2 and plan.threads_per_worker == 1 and plan.is_cpu
    assert sizes == [16, 64] and not auto


def test_peak_rss_starts_a_new_window_per_env_count():
    """bench resets the peak before each env count: a larger count measured before (an in-process
    `--num-envs auto` sweep) does not show in a smaller one's figure."""
    import mmap

    if not machine.reset_peak_rss():
        missing_infrastructure("no /proc/self/clear_refs here (Linux): the peak counts from process start")
    base = machine.peak_rss_bytes()
    # Fresh pages from the kernel, returned on close: an allocator could instead hand back memory an earlier test
    # in this process freed but kept resident, raising no peak (it failed once after test_docs, in one process).
    block = mmap.mmap(-1, 64 * 2**20)
    for page in range(0, len(block), mmap.PAGESIZE):
        block[page] = 1  # touched: resident
    assert machine.peak_rss_bytes() >= base + 60 * 2**20
    block.close()
    assert machine.reset_peak_rss()
    assert machine.peak_rss_bytes() < base + 32 * 2**20


def test_the_auto_cache_tells_task_settings_apart_but_not_the_env_count():
    from mjfleet.tasks import get_task

    spec = get_task("Cartpole-Balance")
    env, agent = spec.env_config(), spec.agent_config()
    digest = autotune.config_digest(env, agent)
    env.num_envs = 12345  # what the sweep varies
    assert autotune.config_digest(env, agent) == digest
    env.decimation += 1
    assert autotune.config_digest(env, agent) != digest
    env.decimation -= 1
    agent.actor.hidden_dims = (8,)
    assert autotune.config_digest(env, agent) != digest


@pytest.fixture(scope="module")
def diverging_bench(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, pathlib.Path]:
    """One bench of a Cartpole made to go NaN, its output read through a pipe as a log gets it: (the process,
    its JSON, the PNG beside it). Several tests read it: a bench costs tens of seconds here."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    result = bench("Cartpole-Balance", "--num-envs", "16", "32", *LOUD, *DIVERGING, "--json", str(out))
    assert result.returncode == 0, result.stderr
    return result, json.loads(out.read_text()), out.with_suffix(".png")


def test_in_a_log_progress_is_plain_lines_on_stderr_and_the_results_stay_on_stdout(diverging_bench):
    result, _, _ = diverging_bench
    progress = [
        line for line in result.stderr.splitlines() if line.startswith("bench: ") and "phases" in line
    ]
    assert progress[0] == "bench: 0 of 8 phases, 0 s"  # 2 env counts x 4 phases
    assert progress[-1].startswith("bench: 8 of 8 phases, 1 worker done, ")
    # the start, the end and at most one per 30 s between: far fewer than the run's ~20 updates
    number, unit = progress[-1].rsplit(", ", 1)[1].split()
    seconds = int(number) if unit == "s" else int(number) * 60 + 30  # "2 min" is rounded to the minute
    assert len(progress) <= 2 + seconds // 30
    for text in (result.stdout, result.stderr):
        assert "\r" not in text and "\x1b" not in text
    assert "Cartpole-Balance: 1 x 16 envs  physics" in result.stdout and "envs/worker" in result.stdout
    assert "envs/worker" not in result.stderr and "phases" not in result.stdout


def test_physics_trouble_reaches_the_result_line_the_table_the_json_and_one_warning(diverging_bench):
    result, report, _ = diverging_bench
    trouble = report["runs"][0]["points"][0]["trouble"]
    assert trouble["physics"]["record"]["Sim/nan_resets"] == 4 * 2 * 16  # every world at every timed step
    assert trouble["physics"]["shares"] == {"nan_resets": pytest.approx(1.0)}
    assert trouble["training"]["shares"]["nan_resets"] > 0.5
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("Cartpole-Balance: 1 x 16")]
    assert "  trouble: physics: nan_resets 128 (100.00%); training: nan_resets " in line
    assert line.endswith(" (100.00%)")
    assert "16  trouble: physics: nan_resets 128 (100.00%)" in result.stdout  # the table's line
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [  # once per kind, however many phases met it
        "bench: warning: nan_resets in 100.00% of env steps (1 x 16 envs, physics phase): the physics diverged "
        "and those worlds were reset (too large a timestep, stiff gains or armature 0 on a fast joint, "
        "interpenetrating geoms at the start)"
    ]


def test_the_picture_beside_the_json_draws_every_phase(diverging_bench):
    _, _, png = diverging_bench
    assert_real_plot(png)
    for phase, rgb in COLOURS.items():
        # a line across the panel from 16 to 32 envs (~0.0025): more than its legend entry and a marker (~0.0004)
        assert colour_share(png, rgb) > 0.001, f"no {phase} line"


def test_in_a_terminal_progress_is_a_redrawn_bar_and_ctrl_c_gives_the_terminal_back():
    code, out = run_in_terminal([str(BIN / "bench"), "Cartpole-Balance", "--num-envs", "16", *LOUD],
                                interrupt_after="16 envs, building", timeout=300)  # fmt: skip
    assert code == 130 and out.rstrip().endswith("bench: interrupted")  # as without a bar: 128 + SIGINT
    assert "\r" in out and "0/4" in out and "phases" in out  # a bar, redrawn in place
    assert out.rfind("\x1b[?25h") > out.rfind("\x1b[?25l")  # the cursor was hidden for the bar and is back

"""`sweep`'s parts that need no training: parameters and their distributions, the objective, bad input (one line,
exit 2, before any trial), the study as a queue of configurations and seeds, recovery of interrupted trials, and
the report's statistics (IQM and the bootstrap interval), ranking and plots, and the dashboard's address."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_usage_exit, needs_infrastructure

from mjfleet.cli import sweep as sweep_cli
from mjfleet.errors import UsageError
from mjfleet.sweep.objective import parse_objective
from mjfleet.sweep.params import parse_param, parse_params
from mjfleet.sweep.report import collect, ranking_table
from mjfleet.sweep.stats import iqm, stratified_bootstrap_ci
from mjfleet.sweep.study import STUDY_NAME, TrialQueue

try:
    import optuna
except ImportError:  # the sweep extra is not installed: tests that need it skip (fail under CI)
    optuna = None
NEEDS_OPTUNA = needs_infrastructure(
    lambda: None if optuna else "the sweep extra is missing: uv sync --extra sweep"
)

LR = "agent.ppo.learning-rate"
TINY = ["Cartpole-Balance", "--gpu-ids", "None", "--slots", "1", "--iterations", "1"]


def test_each_distribution_is_read_into_its_bounds_or_choices():
    assert parse_param(f"{LR}=loguniform:1e-4:1e-2").low == pytest.approx(1e-4)
    assert parse_param("agent.ppo.num-learning-epochs=int:1:8").probe_values() == ["1", "8"]
    alive = parse_param("env.rewards.alive=choice:0.5,1,2")
    assert alive.kind == "choice" and alive.choices == ("0.5", "1", "2")
    assert alive.flags("2") == ["--env.rewards.alive", "2"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (f"{LR}", "write PATH=DISTRIBUTION"),
        (f"{LR}=lognormal:1:2", "unknown distribution 'lognormal'"),
        (f"{LR}=loguniform:1e-2", "write loguniform:LOW:HIGH"),
        (f"{LR}=loguniform:0:1", "needs LOW > 0"),
        (f"{LR}=uniform:2:1", "needs LOW < HIGH"),
        ("agent.ppo.num-mini-batches=int:1:2.5", "bounds must be integers"),
        ("env.rewards.alive=choice:1,,2", "no empty values"),
        ("seed=int:0:5", "the sweep sets this flag itself"),
    ],
)
def test_a_malformed_parameter_is_a_usage_error_naming_it(text, needle):
    with pytest.raises(UsageError, match=needle):
        parse_param(text)


def test_a_parameter_given_twice_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        parse_params([f"{LR}=uniform:0.1:0.2", f"{LR}=uniform:0.3:0.4"])


def test_the_objective_reads_evaluation_numbers_with_the_direction_that_means_better():
    summary = {
        "mean_return": 12.5,
        "metrics": {"lin_vel_error": 0.25},
        "terminations": {"time_out": 3, "fell": 5},
    }
    assert parse_objective("mean_return", "auto").direction == "maximize"
    error = parse_objective("metrics.lin_vel_error", "auto")
    assert (error.direction, error.value(summary)) == ("minimize", 0.25)
    assert parse_objective("early_terminations", "auto").value(summary) == 5.0
    assert parse_objective("terminations.fell", "auto").value(summary) == 5.0
    with pytest.raises(UsageError, match="does not report it"):
        parse_objective("mean_reward", "auto")


def test_iqm_is_the_mean_of_the_middle_half_and_the_interval_holds_it():
    scores = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0])
    assert iqm(scores) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))  # scipy's trim_mean(x, 0.25)
    assert iqm(np.array([1.0, 2.0, 9.0])) == pytest.approx(4.0)  # fewer than four runs: nothing is trimmed
    low, high = stratified_bootstrap_ci(scores)
    assert low <= iqm(scores) <= high
    wide = stratified_bootstrap_ci(np.array([0.0, 10.0, 0.0, 10.0]))
    narrow = stratified_bootstrap_ci(np.array([4.9, 5.1, 4.9, 5.1]))
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def _queue(configs: int, seeds: int) -> TrialQueue:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(
        study_name=STUDY_NAME, storage=storage, sampler=optuna.samplers.RandomSampler(seed=0)
    )
    return TrialQueue(study, storage, parse_params([f"{LR}=loguniform:1e-4:1e-2"]), configs, seeds, seed=7)


@NEEDS_OPTUNA
def test_the_queue_hands_out_each_configuration_once_per_seed_then_stops():
    queue = _queue(configs=3, seeds=2)
    handed = []
    while (nxt := queue.next()) is not None:
        handed.append((nxt.config, nxt.seed, nxt.trial.params[LR]))
        queue.study.tell(nxt.trial, 1.0)
    assert len(handed) == 6
    by_config: dict[int, list] = {}
    for config, seed, lr in handed:
        by_config.setdefault(config, []).append((seed, lr))
    assert len(by_config) == 3
    for runs in by_config.values():
        assert sorted(seed for seed, _ in runs) == [7, 8]
        assert len({lr for _, lr in runs}) == 1  # the seeds of one configuration share its parameters


def _first_trial_with_a_checkpoint(tmp_path):
    """A one-trial queue, its first trial taken, and a run directory with a checkpoint for it."""
    queue = _queue(configs=1, seeds=1)
    first = queue.next()
    assert first is not None
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model_3.pt").write_bytes(b"")
    return queue, first, run_dir


@NEEDS_OPTUNA
def test_an_interrupted_trial_is_continued_from_its_run_directory(tmp_path):
    queue, first, run_dir = _first_trial_with_a_checkpoint(tmp_path)
    first.trial.set_user_attr("run_dir", str(run_dir))
    # the sweep died while it ran (kill -9, a Slurm requeue): its RUNNING trial is this owner's and stale
    assert queue.recover(stale=True) == [first.trial.number]
    again = queue.next()
    assert again is not None and again.resume_run == str(run_dir)
    assert (again.config, again.seed) == (first.config, first.seed)
    assert again.trial.params == first.trial.params and not again.evaluate_only
    assert queue.recover(stale=False) == []  # continued already: not twice


@NEEDS_OPTUNA
def test_a_trial_interrupted_in_its_evaluation_is_only_evaluated_again(tmp_path):
    from optuna.trial import TrialState

    queue, first, run_dir = _first_trial_with_a_checkpoint(tmp_path)
    for key, value in {"run_dir": str(run_dir), "interrupted": True, "trained": True}.items():
        first.trial.set_user_attr(key, value)  # as the runner tells an evaluation that the sweep's stop ended
    queue.study.tell(first.trial, state=TrialState.FAIL)
    assert queue.recover(stale=False) == [first.trial.number]
    again = queue.next()
    assert again is not None and again.resume_run == str(run_dir) and again.evaluate_only


def _trial(lr: float, config: int, seed: int, value: float | None, reason: str = "", terminations=None):
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    attrs = {"config": config, "seed": seed} | ({"fail_reason": reason} if reason else {})
    if terminations is not None:  # as the runner keeps a complete trial's eval.json
        attrs["eval"] = {"mean_return": value, "terminations": terminations}
    return create_trial(
        params={LR: lr}, distributions={LR: FloatDistribution(1e-5, 20.0, log=True)}, value=value,
        state=TrialState.COMPLETE if value is not None else TrialState.FAIL, user_attrs=attrs,
    )  # fmt: skip


# Falls within one step of the ranking (15-20 % of the episodes that ended): the IQM decides among these.
FELL_ALIKE = {"fell": 6, "time_out": 26}


@NEEDS_OPTUNA
def test_the_report_ranks_configurations_that_fall_alike_by_their_iqm_over_seeds_failures_last():
    study = optuna.create_study(direction="maximize")
    for t in [
        _trial(1e-3, 0, 0, 200.0, terminations={"fell": 0, "time_out": 32}),
        _trial(1e-3, 0, 1, 210.0, terminations={"fell": 16, "time_out": 21}),
        _trial(1e-3, 0, 2, 190.0, terminations={"fell": 2, "too_low": 1, "time_out": 30}),
        _trial(10.0, 3, 0, 20.0, terminations=FELL_ALIKE), _trial(10.0, 3, 1, 25.0, terminations=FELL_ALIKE),
        _trial(10.0, 3, 2, 15.0, terminations=FELL_ALIKE),
        _trial(3e-3, 6, 0, 240.0, terminations=FELL_ALIKE),
        _trial(3e-3, 6, 1, None, "train was killed by SIGKILL: (no output)"),
        _trial(5.0, 9, 0, None, "the evaluation's mean_return is nan"),
    ]:  # fmt: skip
        study.add_trial(t)
    ranked = collect(study, parse_objective("mean_return", "auto"))
    assert [r.config for r in ranked] == [6, 0, 3, 9]
    assert ranked[1].iqm == pytest.approx(200.0) and ranked[1].ci[0] <= 200.0 <= ranked[1].ci[1]
    assert ranked[0].failed == {1: "train was killed by SIGKILL: (no output)"}
    assert ranked[-1].iqm is None
    # falls, which the objective does not show, are counted per seed and over the configuration's seeds
    assert ranked[1].ended_early == {0: (0, 32), 1: (16, 37), 2: (3, 33)}
    table = ranking_table(ranked, parse_objective("mean_return", "auto"))
    assert "the evaluation's mean_return is nan" in table
    header, _, first, second = table.splitlines()[3:7]
    assert header.split(" | ")[5] == "ended early"
    assert first.split(" | ")[5] == "6 of 32 (19%)" and second.split(" | ")[5] == "19 of 102 (19%)"


def _g1_like_sweep() -> list:
    """Two configurations of a velocity task over two seeds each: config 0 tracks better (0.40) but its robots
    fell in every episode; config 1 tracks worse (0.50) and never fell."""
    objective = parse_objective("metrics.lin_vel_error", "auto")
    study = optuna.create_study(direction=objective.direction)
    for t in [
        _trial(1e-3, 0, 0, 0.40, terminations={"fell": 64, "time_out": 0}),
        _trial(1e-3, 0, 1, 0.41, terminations={"fell": 64, "time_out": 0}),
        _trial(3e-3, 1, 0, 0.50, terminations={"fell": 0, "time_out": 64}),
        _trial(3e-3, 1, 1, 0.52, terminations={"fell": 0, "time_out": 64}),
    ]:
        study.add_trial(t)
    return collect(study, objective)


@NEEDS_OPTUNA
def test_a_configuration_whose_seeds_fell_clearly_more_ranks_below_one_that_fell_less_whatever_its_objective():
    ranked = _g1_like_sweep()
    assert [r.config for r in ranked] == [1, 0]
    assert ranked[1].iqm < ranked[0].iqm  # the objective alone would have ranked config 0 first


@NEEDS_OPTUNA
def test_the_ranking_table_says_falls_rank_first_and_shows_each_configurations_share():
    table = ranking_table(_g1_like_sweep(), parse_objective("metrics.lin_vel_error", "auto"))
    assert "Ranked by the share of episodes that ended early (falls) in steps of 5 percentage points" in table
    rows = [
        line.split(" | ") for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")
    ]
    assert [row[5] for row in rows] == ["0 of 128 (0%)", "128 of 128 (100%)"]


@NEEDS_OPTUNA
def test_a_configuration_whose_falls_were_not_reported_ranks_after_those_whose_falls_are_known():
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(1e-3, 0, 0, 100.0, terminations={"fell": 30, "time_out": 2}))
    study.add_trial(_trial(3e-3, 1, 0, 300.0))  # no terminations kept: not reported, not zero
    ranked = collect(study, parse_objective("mean_return", "auto"))
    assert [r.config for r in ranked] == [0, 1]
    assert ranked[1].ended_early == {} and ranked[1].ended_early_total() == "-"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ["--param=agent.ppo.learnin-rate=loguniform:1e-4:1e-2"],
            ["--param agent.ppo.learnin-rate", "did you mean"],
        ),
        ([f"--param={LR}=loguniform:1e-4"], [f"--param {LR}", "loguniform:LOW:HIGH"]),
        ([f"--param={LR}=choice:1e-3,fast"], [f"--param {LR}=fast"]),
        ([f"--param={LR}=uniform:0.1:0.2", "--objective", "mean_reward"], ["--objective 'mean_reward'"]),
        (
            [f"--param={LR}=uniform:0.1:0.2", "--storage", "sqlite:////nonexistent/dir/study.db"],
            ["--storage sqlite:////nonexistent/dir/study.db: cannot open"],
        ),
        ([f"--param={LR}=uniform:0.1:0.2", "--", "--num-envs", "zero"], ["train flags --num-envs zero"]),
        ([f"--param={LR}=uniform:0.1:0.2", "--", "--seed", "3"], ["--seed after --"]),
        ([f"--param={LR}=uniform:0.1:0.2", "--sampler", "grid"], ["--sampler grid needs choice:"]),
        ([f"--param={LR}=uniform:0.1:0.2", "--hosts", "no-such-host.invalid"], ["--hosts: cannot resolve"]),
    ],
    ids=[
        "unknown-path",
        "malformed",
        "bad-choice",
        "objective",
        "storage",
        "train-flag",
        "reserved",
        "grid",
        "host",
    ],
)
@NEEDS_OPTUNA
def test_bad_input_is_one_line_and_exit_2_before_any_trial(args, needles, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_info:
        sweep_cli.main([*TINY[:1], "--sweep-dir", str(sweep_dir), *TINY[1:], *args])
    assert_usage_exit(exit_info, capsys.readouterr().err, *needles)
    assert not (sweep_dir / "runs").exists() and not (sweep_dir / "sweep.json").exists()


@NEEDS_OPTUNA
def test_an_objective_the_tasks_evaluation_does_not_report_is_found_before_any_trial(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_info:
        sweep_cli.main([*TINY, "--sweep-dir", str(sweep_dir), f"--param={LR}=uniform:0.1:0.2",
                        "--objective", "metrics.lin_vel_error"])  # fmt: skip
    assert_usage_exit(exit_info, capsys.readouterr().err, "--objective metrics.lin_vel_error",
                      "Cartpole-Balance's evaluation does not report it")  # fmt: skip
    assert not sweep_dir.exists()


@NEEDS_OPTUNA
def test_resume_of_a_directory_that_holds_no_sweep_says_so(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep_cli.main(["--resume", str(tmp_path)])
    assert_usage_exit(exit_info, capsys.readouterr().err, "not a sweep directory")


@NEEDS_OPTUNA
def test_a_directory_of_another_sweep_is_not_joined(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text(json.dumps({"argv": ["Cartpole-Balance", "--trials", "3"]}))
    with pytest.raises(SystemExit) as exit_info:
        sweep_cli.main([*TINY, "--sweep-dir", str(tmp_path), f"--param={LR}=uniform:0.1:0.2"])
    assert_usage_exit(exit_info, capsys.readouterr().err, "holds another sweep")


@NEEDS_OPTUNA
def test_an_evaluation_command_for_a_task_without_commands_is_refused_before_any_trial(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sweep_cli.main([*TINY, "--sweep-dir", str(tmp_path / "s"), f"--param={LR}=uniform:0.1:0.2",
                        "--eval-command", "0.8", "0", "0"])  # fmt: skip
    assert_usage_exit(
        exit_info, capsys.readouterr().err, "--eval-command: Cartpole-Balance takes no velocity command"
    )


@NEEDS_OPTUNA
def test_a_configuration_with_one_completed_seed_says_it_has_no_interval():
    study = optuna.create_study(direction="maximize")
    for t in [_trial(1e-3, 0, 0, 200.0), _trial(1e-3, 0, 1, 210.0), _trial(3e-3, 2, 0, 150.0)]:
        study.add_trial(t)
    ranked = collect(study, parse_objective("mean_return", "auto"))
    assert ranked[1].config == 2 and ranked[1].ci is None and ranked[1].as_dict()["ci95"] is None
    rows = ranking_table(ranked, parse_objective("mean_return", "auto")).splitlines()[5:7]
    assert rows[0].split(" | ")[3].startswith("[") and rows[1].split(" | ")[3] == "1 seed: no interval"


def test_the_old_spelling_of_ppo_flags_is_taken_and_the_sweep_records_the_new_one(tmp_path):
    old = [*TINY, "--param", "agent.algorithm.learning-rate=loguniform:1e-4:1e-2",
           "--param=agent.algorithm.entropy-coef=uniform:0:0.01", "--", "--agent.algorithm.schedule", "fixed"]  # fmt: skip
    new = sweep_cli.current_spelling(old)
    assert new == [*TINY, "--param", f"{LR}=loguniform:1e-4:1e-2", "--param=agent.ppo.entropy-coef=uniform:0:0.01",
                   "--", "--agent.ppo.schedule", "fixed"]  # fmt: skip
    if optuna is None:
        return
    plan, _, fixed = sweep_cli.check_only([*new[:-3], "--sweep-dir", str(tmp_path), *new[-3:]])
    assert [p.path for p in plan.spec.params] == [LR, "agent.ppo.entropy-coef"]
    assert fixed == ["--agent.ppo.schedule", "fixed"]


@NEEDS_OPTUNA
def test_report_md_shows_its_plots_by_links_relative_to_itself(tmp_path):
    from mjfleet.sweep.report import write_report

    study = optuna.create_study(direction="maximize")
    for config, lr, values in [(0, 1e-3, (200.0, 210.0)), (2, 3e-3, (150.0, 120.0))]:
        for seed, value in enumerate(values):
            run_dir = tmp_path / "runs" / f"c{config}_s{seed}"
            run_dir.mkdir(parents=True)
            lines = [
                {"iteration": i, "env_steps": 512 * (i + 1), "mean_return": value * i / 9} for i in range(10)
            ]
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
            t = _trial(lr, config, seed, value)
            t.user_attrs["run_dir"] = str(run_dir)
            study.add_trial(t)
    write_report(study, parse_objective("mean_return", "auto"), tmp_path, "uv run sweep ...")
    report = tmp_path / "report" / "report.md"
    links = re.findall(r"!\[([^]]+)\]\(([^)]+)\)", report.read_text())
    assert ("learning curves", "learning_curves.png") in links
    for _, target in links:
        assert not Path(target).is_absolute() and (report.parent / target).stat().st_size > 5_000


def test_the_dashboard_holds_the_port_it_bound_and_moves_past_a_busy_one():
    from mjfleet.sweep.dashboard import listen

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"study"]

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        server = listen("127.0.0.1", taken, app)
        try:
            assert server.server_port != taken
            with (
                socket.socket() as other,
                pytest.raises(OSError),
            ):  # held from the bind on: no one else gets it
                other.bind(("127.0.0.1", server.server_port))
            served = threading.Thread(target=server.handle_request)
            served.start()
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/", timeout=30) as reply:
                assert reply.read() == b"study"
            served.join(timeout=30)
        finally:
            server.server_close()
    any_port = listen("127.0.0.1", 0, app)  # 0: the one the system gives, read back
    try:
        assert any_port.server_port > 0
    finally:
        any_port.server_close()


def test_an_idle_browser_connection_does_not_hold_up_the_dashboards_other_requests():
    from mjfleet.sweep.dashboard import listen

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"study"]

    server = listen("127.0.0.1", 0, app)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        # a browser opens connections ahead of its requests; a one-at-a-time server would wait on this one
        with socket.create_connection(("127.0.0.1", server.server_port)):
            time.sleep(0.5)
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/", timeout=10) as reply:
                assert reply.read() == b"study"
    finally:
        server.shutdown()
        server.server_close()


def test_the_viewer_and_the_dashboard_say_their_address_with_one_helper():
    from mjfleet.address import address_line, exposure_warning
    from mjfleet.sweep import dashboard
    from mjfleet.viewers import scene

    assert scene.viewer_address_line is address_line and dashboard.address_line is address_line
    line = address_line("127.0.0.1", 8081)
    assert line.startswith("open http://127.0.0.1:8081 (from another machine: ssh -L 8081:127.0.0.1:8081 ")
    assert exposure_warning("127.0.0.1", "the dashboard", "read the study") is None
    assert scene.exposure_warning("0.0.0.0").startswith("warning: the viewer listens on 0.0.0.0")

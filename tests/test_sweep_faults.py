"""`sweep`'s budgets and faults for real: the median pruner on train's periodic evaluation, a --minutes budget, a
Slurm requeue of an array task while its trial trains, and `--hosts slurm` in a batch job on the one-node test
cluster (tests/slurm_cluster.py, daemons stopped by pid). Real `sweep`, `train` and `play` processes of tiny
Cartpole trials, as in tests/test_sweep_run.py (whose settings these share); `.ci/run` runs them in its second
step. A host that fails mid-sweep is tested with the namespace hosts, in tests/test_hosts.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers import needs_infrastructure, poll, require_infrastructure, run_cli
from test_sweep_run import (
    EVAL,
    LR,
    NO_HANG_S,
    ROOT,
    TRAIN_FLAGS,
    optuna,
    report_of,
    slurm_env,
    start_sweep,
    stop_tree,
    study_of,
    submit_sweep_array,
    trials_of,
)

UPRIGHT = "env.rewards.upright"

pytestmark = [
    pytest.mark.slow,  # real train and play processes, minutes on 2 cores: `.ci/run` runs them in its second step
    needs_infrastructure(lambda: None if optuna else "the sweep extra is missing: uv sync --extra sweep"),
]


def test_the_median_pruner_prunes_a_configuration_without_the_upright_reward_and_keeps_its_run(tmp_path):
    sweep_dir = tmp_path / "sweep"
    # Without its upright term (most of each step's reward), a trial's periodic evaluation, on its own rewards, is
    # far below the default's from the first one. (A far too large learning rate was tried first: Optuna compares a
    # trial's best evaluation so far with the median, and its first evaluation, before the updates ruin the policy,
    # was often lucky enough to shield it.) The grid's order with --sampler-seed 1 is 0.7, then 0: the default's two
    # seeds are the median pruner's two startup trials, and 0's seeds are judged against them.
    result = run_cli(
        "sweep", "Cartpole-Balance", "--param", f"{UPRIGHT}=choice:0.7,0", "--sampler", "grid", "--sampler-seed",
        "1", "--trials", "2", "--seeds", "2", "--iterations", "8", "--pruner", "median", "--prune-interval", "2",
        "--gpu-ids", "None", "--slots", "2", "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS,
        cwd=tmp_path, timeout=NO_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = sorted(study_of(sweep_dir).get_trials(), key=lambda t: t.number)
    states = {t.number: (t.params[UPRIGHT], t.state.name) for t in trials}
    assert [s for weight, s in states.values() if weight == "0.7"] == ["COMPLETE", "COMPLETE"], states
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned and all(t.params[UPRIGHT] == "0" for t in pruned), states
    assert all(s in ("COMPLETE", "PRUNED") for _, s in states.values()), states
    for t in pruned:
        label = f"trial {t.number} (config {t.user_attrs['config']}, seed {t.user_attrs['seed']})"
        assert label in result.stdout and "pruned: pruned by the median pruner" in result.stdout
        assert t.user_attrs["fail_reason"] == "pruned by the median pruner"
        assert t.intermediate_values, "a pruned trial reported no periodic evaluation"
    # How early it stops depends on how fast train runs past the sweep's look at its metrics (every 0.5 s): not
    # asserted. A pruned trial is not evaluated; its run keeps train's last checkpoint and plays.
    run_dir = Path(pruned[0].user_attrs["run_dir"])
    assert not (run_dir / "eval.json").exists()
    assert list(run_dir.glob("model_*.pt")), "a pruned trial's train saved no checkpoint"
    run_cli("play", "Cartpole-Balance", "--load-run", str(run_dir), "--gpu-ids", "None", "--episodes", "2",
            "--num-envs", "2", cwd=tmp_path, check=True)  # fmt: skip
    [bad] = [c for c in report_of(sweep_dir)["configurations"] if c["params"][UPRIGHT] == "0"]
    assert "pruned by the median pruner" in bad["failed"].values(), bad
    assert "pruned by the median pruner" in (sweep_dir / "report" / "report.md").read_text()


def test_a_minutes_budget_stops_a_huge_iteration_budget_with_a_checkpoint_then_evaluates_it(tmp_path):
    sweep_dir = tmp_path / "sweep"
    iterations = 100_000  # hours of training here: the minute is what stops it
    result = run_cli(
        "sweep", "Cartpole-Balance", "--iterations", str(iterations), "--minutes", "1", "--gpu-ids", "None",
        "--slots", "1", "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS, cwd=tmp_path, timeout=NO_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [trial] = study_of(sweep_dir).get_trials()
    assert trial.state.name == "COMPLETE", trial.user_attrs
    run_dir = Path(trial.user_attrs["run_dir"])
    done = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= len(done) < iterations
    saved = max(int(p.stem.split("_")[1]) for p in run_dir.glob("model_[0-9]*.pt"))
    assert saved == len(done)  # the checkpoint train saved when stopped, after its last iteration
    summary = json.loads((run_dir / "eval.json").read_text())
    assert trial.value == summary["mean_return"] and summary["episodes"] == 16
    assert trial.user_attrs["seconds"] < NO_HANG_S


def _job_fields(cluster, job: str) -> dict[str, str]:
    shown = subprocess.run(cluster.client("scontrol", "show", "job", job), capture_output=True, text=True,
                           env=slurm_env(cluster), timeout=60)  # fmt: skip
    return dict(re.findall(r"(\w+)=(\S*)", shown.stdout))


def _wait_job_end(cluster, job: str, logs: Path) -> dict[str, str]:
    ended = poll(lambda: _job_fields(cluster, job), lambda f: f.get("JobState") not in ("PENDING", "RUNNING",
                 "CONFIGURING", "COMPLETING", "REQUEUED", None), timeout=NO_HANG_S, every=2.0)  # fmt: skip
    assert ended.get("JobState") == "COMPLETED", f"{ended.get('JobState')}: {_tail(logs)}"
    return ended


def _tail(logs: Path) -> str:
    """The end of a job's output: `logs`, or the files `logs`'s name matches as a pattern in its directory."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(logs.parent.glob(logs.name)))[-4000:]


def test_a_requeued_array_task_continues_its_interrupted_trial_and_the_study_loses_none(tmp_path):
    """`scontrol requeue` of an array task while its trial trains: Slurm's SIGTERM stops the sweep and its train
    (which saves a checkpoint); the task, started again by Slurm, joins the same study and continues that trial
    from its checkpoint, in a run directory of its own, before it takes the next."""
    from slurm_cluster import missing_reason, running_cluster

    require_infrastructure(missing_reason())
    sweep_dir, iterations = tmp_path / "sweep", 16
    sweep = ["Cartpole-Balance", "--param", f"{LR}=choice:1e-3,3e-3", "--sampler", "grid", "--trials", "2",
             "--iterations", str(iterations), "--gpu-ids", "None", "--slots", "1", "--sweep-dir", str(sweep_dir),
             *EVAL, *TRAIN_FLAGS]  # fmt: skip
    logs = tmp_path / "array_*.out"
    with running_cluster(tmp_path / "slurm") as cluster:
        env = slurm_env(cluster)
        task = submit_sweep_array(cluster, "0", sweep, tmp_path / "array_%a.out") + "_0"
        training = poll(lambda: list((sweep_dir / "runs").glob("*/*/metrics.jsonl")), timeout=NO_HANG_S)
        assert training, f"the first trial did not reach its first iteration: {_tail(logs)}"
        subprocess.run(cluster.client("scontrol", "requeue", task), env=env, timeout=60, check=True)
        # Slurm holds a requeued job back (its BeginTime): let it start at once, in the next second (slurmd
        # refuses a launch whose credential is from the second the killed instance's was revoked in).
        requeued = poll(lambda: _job_fields(cluster, task), lambda f: f.get("Restarts") == "1"
                        and f.get("JobState") in ("PENDING", "RUNNING"), timeout=NO_HANG_S, every=0.3)  # fmt: skip
        assert requeued.get("Restarts") == "1", f"{requeued}: {_tail(logs)}"
        if requeued["JobState"] == "PENDING":
            time.sleep(1.5)
            subprocess.run(cluster.client("scontrol", "update", f"JobId={task}", "StartTime=now"), env=env,
                           timeout=60)  # fmt: skip
        _wait_job_end(cluster, task, logs)
    text = _tail(logs)
    # Whether the first start told the study (its SIGTERM handled within Slurm's KillWait) or was killed first
    # (the trial left RUNNING), the second start continues trial 0.
    assert (
        "sweep: continuing interrupted trial(s) 0 from their checkpoints" in text.split("(restart 1)")[1]
    ), text
    trials = sorted(study_of(sweep_dir).get_trials(), key=lambda t: t.number)
    assert {t.user_attrs["owner"] for t in trials} == {f"slurm:{task}"}
    stopped = [t for t in trials if t.state.name != "COMPLETE"]
    assert [(t.number, t.state.name, t.user_attrs.get("interrupted")) for t in stopped] == [(0, "FAIL", True)]
    done = [t for t in trials if t.state.name == "COMPLETE"]
    # Every configuration's seed completed once: none lost, none run twice.
    assert sorted((t.user_attrs["config"], t.user_attrs["seed"]) for t in done) == [(0, 0), (2, 0)], text
    [again] = [t for t in done if t.user_attrs.get("continues") == 0]
    assert again.params == trials[0].params
    run_dir = Path(again.user_attrs["run_dir"])
    run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
    assert Path(run["resumed_from"]).parent == Path(trials[0].user_attrs["run_dir"]), run  # continued
    assert (run_dir / f"model_{iterations}.pt").exists()
    assert [c["seeds_completed"] for c in report_of(sweep_dir)["configurations"]] == [1, 1]


def test_hosts_slurm_in_a_batch_job_places_the_trials_on_the_allocations_node(tmp_path):
    from slurm_cluster import missing_reason, running_cluster

    require_infrastructure(missing_reason())
    sweep_dir = tmp_path / "sweep"
    sweep = ["uv", "run", "--frozen", "sweep", "Cartpole-Balance", "--iterations", "2", "--gpu-ids", "None",
             "--hosts", "slurm", "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS]  # fmt: skip
    logs = tmp_path / "job.out"
    with running_cluster(tmp_path / "slurm") as cluster:
        submitted = subprocess.run(
            cluster.client("sbatch", "--parsable", f"--output={logs}", f"--chdir={ROOT}", "-n", "1",
                           f"--wrap=exec {' '.join(sweep)}"),
            capture_output=True, text=True, env=slurm_env(cluster), timeout=60,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        _wait_job_end(cluster, submitted.stdout.strip().split(";")[0], logs)
        node = cluster.node
    text = _tail(logs)
    assert f"on 1 slot(s) ({node})" in text, text
    [trial] = study_of(sweep_dir).get_trials()
    assert trial.state.name == "COMPLETE" and trial.user_attrs["slot"] == node, text
    run = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "params" / "run.yaml").read_text())
    assert run["hosts"] == [node], run


def test_ctrl_c_during_a_trials_evaluation_leaves_it_interrupted_and_resume_evaluates_it(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = start_sweep("Cartpole-Balance", "--iterations", "2", "--gpu-ids", "None", "--slots", "1",
                       "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS, cwd=tmp_path)  # fmt: skip
    try:
        evaluating = poll(lambda: trials_of(sweep_dir, "play"), timeout=NO_HANG_S)
        assert evaluating, "the trial's evaluation did not start"
        proc.send_signal(signal.SIGINT)  # Ctrl-C while play evaluates the trained run
        out, err = proc.communicate(timeout=NO_HANG_S)
    finally:
        stop_tree(proc)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    [stopped] = study_of(sweep_dir).get_trials()
    assert stopped.state.name == "FAIL" and stopped.user_attrs.get("interrupted"), stopped.user_attrs
    assert stopped.user_attrs["fail_reason"] == "interrupted during its evaluation"

    resumed = run_cli("sweep", "--resume", str(sweep_dir), cwd=tmp_path, timeout=NO_HANG_S)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    first, again = sorted(study_of(sweep_dir).get_trials(), key=lambda t: t.number)
    assert again.state.name == "COMPLETE" and again.user_attrs["continues"] == first.number, again.user_attrs
    # Trained to its budget already: the same run, evaluated again, nothing trained again.
    run_dir = Path(again.user_attrs["run_dir"])
    assert run_dir == Path(first.user_attrs["run_dir"]) and list(sweep_dir.glob("runs/*/*")) == [run_dir]
    assert max(int(p.stem.split("_")[1]) for p in run_dir.glob("model_[0-9]*.pt")) == 2
    assert again.value == json.loads((run_dir / "eval.json").read_text())["mean_return"]

"""`sweep` for real: Cartpole trials as real `train` and `play` processes on CPU slots, faults (kill -9 of a trial,
Ctrl-C and `--resume`), the dashboard drawn in a real browser, and a Slurm array whose tasks join one study.

Each trial is CI-sized (a few iterations of a few dozen environments), but the processes are real: minutes in all
on 2 cores, so `.ci/run` runs these in its second step."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import needs_infrastructure, poll, require_infrastructure, run_cli, run_in_terminal

try:
    import optuna
except ImportError:  # the sweep extra is not installed: these tests skip (fail under CI)
    optuna = None

pytestmark = [
    pytest.mark.slow,  # real train and play processes, minutes on 2 cores: `.ci/run` runs them in its second step
    needs_infrastructure(lambda: None if optuna else "the sweep extra is missing: uv sync --extra sweep"),
]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
LR = "agent.ppo.learning-rate"
TRAIN_FLAGS = ["--", "--num-envs", "32", "--agent.num-steps-per-env", "16", "--agent.ppo.schedule", "fixed",
               "--logger", "none"]  # fmt: skip
"""Fixed train flags of every trial: small, and a fixed learning rate (the adaptive schedule would rescue a bad
one, and the test asks whether the parameter matters)."""
EVAL = ["--eval-episodes", "16", "--eval-num-envs", "16"]
NO_HANG_S = 900
"""A hang guard, not a timing: how long a sweep of these tiny trials may take on a loaded 2-core machine."""


def study_of(sweep_dir: Path):
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep_dir / "study.journal")))
    return optuna.load_study(study_name="sweep", storage=storage)


def report_of(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "report" / "report.json").read_text())


def start_sweep(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([str(BIN / "sweep"), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def stop_tree(proc: subprocess.Popen) -> None:
    """For a test's `finally`: the sweep and every process it started, killed by pid."""
    if proc.poll() is None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for p in [psutil.Process(proc.pid), *children]:
            try:
                p.kill()
            except psutil.Error:
                pass
    proc.wait(timeout=60)


def slurm_env(cluster) -> dict[str, str]:
    """What the test cluster's jobs inherit: the cluster, the shared kernel cache and a frozen `uv run`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    return env | {**cluster.env(), "WARP_CACHE_PATH": os.environ["WARP_CACHE_PATH"], "UV_FROZEN": "1"}


def submit_sweep_array(cluster, array: str, sweep: list[str], output: Path) -> str:
    """sbatch scripts/slurm/sweep.sbatch as an array (`--array=<array>`) running `sweep`; returns the job id."""
    submitted = subprocess.run(
        cluster.client("sbatch", "--parsable", f"--output={output}", f"--chdir={ROOT}", f"--array={array}", "-n",
                       "1", str(ROOT / "scripts" / "slurm" / "sweep.sbatch"), *sweep),
        capture_output=True, text=True, env=slurm_env(cluster), timeout=60,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def trials_of(sweep_dir: Path, command: str = "train") -> list[psutil.Process]:
    """The running `train` (or `play`) processes of trials of `sweep_dir` (started in sessions of their own): their
    command line names a path under the sweep's runs/ (train's --log-root, play's --load-run)."""
    found = []
    for p in psutil.process_iter():
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if f"mjfleet.cli.{command}" in cmd and any(part.startswith(str(sweep_dir / "runs")) for part in cmd):
            found.append(p)
    return found


def test_eight_cartpole_trials_on_two_cpu_slots_rank_a_far_too_large_learning_rate_last(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        "sweep", "Cartpole-Balance", "--param", f"{LR}=choice:3e-4,1e-3,3e-3,10", "--sampler", "grid",
        "--trials", "4", "--seeds", "2", "--iterations", "12", "--gpu-ids", "None", "--slots", "2",
        "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS, cwd=tmp_path, timeout=NO_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = study_of(sweep_dir)
    trials = study.get_trials()
    assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials), [
        t.user_attrs for t in trials
    ]
    # Two slots: never more than two trials at once.
    events = sorted([(t.datetime_start, 1) for t in trials] + [(t.datetime_complete, -1) for t in trials])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert peak == 2
    report = report_of(sweep_dir)
    ranked = report["configurations"]
    assert [c["seeds_completed"] for c in ranked] == [2, 2, 2, 2]
    assert ranked[-1]["params"][LR] == "10", ranked
    assert ranked[0]["iqm"] > ranked[-1]["ci95"][1]  # the best is clearly above the worst's interval
    for c in ranked:
        low, high = c["ci95"]
        assert low <= c["iqm"] <= high
    assert Path(report["plots"]["learning_curves"]).stat().st_size > 10_000
    assert "| rank |" in (sweep_dir / "report" / "report.md").read_text()
    # Every trial is an ordinary run directory: play exports its policy unchanged.
    best_run = Path(ranked[0]["runs"]["0"][-1])
    assert best_run.parent.parent == sweep_dir / "runs" and (best_run / "eval.json").exists()
    run_cli("play", "Cartpole-Balance", "--load-run", str(best_run), "--gpu-ids", "None", "--episodes", "4",
            "--export", cwd=tmp_path, check=True)  # fmt: skip
    assert (best_run / "exported" / "policy.onnx").exists()


def test_kill_9_of_a_trials_worker_fails_that_trial_with_its_reason_and_the_sweep_goes_on(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = start_sweep(
        "Cartpole-Balance", "--param", f"{LR}=choice:1e-3,3e-3", "--sampler", "grid", "--trials", "2",
        "--iterations", "40", "--gpu-ids", "None", "--slots", "1", "--sweep-dir", str(sweep_dir), *EVAL,
        *TRAIN_FLAGS, cwd=tmp_path,
    )  # fmt: skip
    try:
        first = poll(lambda: [p for p in trials_of(sweep_dir) if any((sweep_dir / "runs").glob("*/*/metrics.jsonl"))],
                     timeout=NO_HANG_S)  # fmt: skip
        assert first, "no trial reached its first iteration"
        victim = first[0]
        victim.kill()  # kill -9: the trial's only worker (one CPU worker runs in the train process)
        out, err = proc.communicate(timeout=NO_HANG_S)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
    finally:
        stop_tree(proc)
    trials = sorted(study_of(sweep_dir).get_trials(), key=lambda t: t.number)
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[0].user_attrs["fail_reason"].startswith("train was killed by SIGKILL")
    assert "trial 0 (config 0, seed 0) on cpu0: failed: train was killed by SIGKILL" in out
    last = report_of(sweep_dir)["configurations"][-1]
    assert last["config"] == 0 and last["failed"]["0"].startswith("train was killed by SIGKILL")


def test_ctrl_c_stops_the_sweep_cleanly_and_resume_continues_its_trials_from_their_checkpoints(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["Cartpole-Balance", "--param", f"{LR}=loguniform:3e-4:3e-3", "--trials", "2", "--iterations", "80",
            "--gpu-ids", "None", "--slots", "2", "--sweep-dir", str(sweep_dir), *EVAL, *TRAIN_FLAGS]  # fmt: skip
    proc = start_sweep(*args, cwd=tmp_path)
    try:
        both = poll(lambda: len(list((sweep_dir / "runs").glob("*/*/metrics.jsonl"))) == 2, timeout=NO_HANG_S)
        assert both, "the two trials did not both reach their first iteration"
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = proc.communicate(timeout=NO_HANG_S)
    finally:
        stop_tree(proc)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert f"continue with: uv run sweep --resume {sweep_dir}" in out
    assert not trials_of(sweep_dir)
    stopped = study_of(sweep_dir).get_trials()
    assert [t.user_attrs.get("interrupted") for t in stopped] == [True, True]
    for t in stopped:
        assert list(Path(t.user_attrs["run_dir"]).glob("model_*.pt")), (
            "train saved no checkpoint when stopped"
        )

    resumed = run_cli("sweep", "--resume", str(sweep_dir), cwd=tmp_path, timeout=NO_HANG_S)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    trials = sorted(study_of(sweep_dir).get_trials(), key=lambda t: t.number)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"]
    for t in trials[2:]:
        first = trials[t.user_attrs["continues"]]
        assert t.params == first.params and t.user_attrs["seed"] == first.user_attrs["seed"]
        run_dir = Path(t.user_attrs["run_dir"])
        run = yaml.safe_load((run_dir / "params" / "run.yaml").read_text())
        assert Path(run["resumed_from"]).parent == Path(
            first.user_attrs["run_dir"]
        )  # continued, not restarted
        assert max(int(p.stem.split("_")[1]) for p in run_dir.glob("model_[0-9]*.pt")) == 80
    assert [c["seeds_completed"] for c in report_of(sweep_dir)["configurations"]] == [1, 1]


def test_in_a_terminal_the_bar_counts_trials_and_ctrl_c_gives_the_cursor_back_and_a_log_resumes_it(tmp_path):
    """One trial, under a pseudo-terminal: the bar (redrawn, its running trial's iteration and return), Ctrl-C
    during it (the trial saves a checkpoint, the cursor comes back), then `--resume` through a pipe: plain lines,
    no escape codes. The parameter is given in its old spelling, which the study records in the new.

    The bar looks at the trial once a second and these iterations are quick, so Ctrl-C follows the first
    iteration the bar shows, whichever it is, with at least 20 of the 120 left to stop in."""
    sweep_dir = tmp_path / "sweep"
    argv = [str(BIN / "sweep"), "Cartpole-Balance", "--param", "agent.algorithm.learning-rate=choice:1e-3",
            "--trials", "1", "--iterations", "120", "--gpu-ids", "None", "--slots", "1", "--sweep-dir",
            str(sweep_dir), *EVAL, *TRAIN_FLAGS]  # fmt: skip
    code, out = run_in_terminal(
        argv, env={"PYTHONUNBUFFERED": "1"}, timeout=NO_HANG_S,
        interrupt_after=re.compile(r"trial 0 it \d{1,2}/120"),
    )  # fmt: skip
    assert code == 130, out[-3000:]
    # redrawn in place, with the running trial's iteration
    assert "\r" in out and "1 running, 0 left; trial 0 it " in out
    hidden, shown = out.rfind("\x1b[?25l"), out.rfind("\x1b[?25h")
    assert hidden != -1 and shown > hidden, "the bar hid the cursor and did not show it again"
    assert "trial 0 (config 0, seed 0) on cpu0: interrupted" in out and "sweep --resume" in out
    (stopped,) = study_of(sweep_dir).get_trials()
    assert stopped.user_attrs["interrupted"] and list(stopped.params) == [LR]
    assert list(Path(stopped.user_attrs["run_dir"]).glob("model_*.pt")), (
        "train saved no checkpoint when stopped"
    )

    resumed = run_cli("sweep", "--resume", str(sweep_dir), cwd=tmp_path, timeout=NO_HANG_S)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    lines = resumed.stdout.splitlines()
    assert "sweep: 0 of 1 trials, 0 s" in lines and any(
        line.startswith("sweep: 1 of 1 trials") for line in lines
    )
    assert any(line.startswith("sweep: trial 1 (config 0, seed 0) on cpu0: mean_return ") for line in lines)
    for text in (resumed.stdout, resumed.stderr):
        assert "\r" not in text and "\x1b" not in text
    assert [t.state.name for t in study_of(sweep_dir).get_trials()] == ["FAIL", "COMPLETE"]


def test_quiet_prints_only_each_trials_line_and_the_summary(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        "sweep", "Cartpole-Balance", "--trials", "1", "--iterations", "2", "--gpu-ids", "None", "--slots", "1",
        "--sweep-dir", str(sweep_dir), "--quiet", *EVAL, *TRAIN_FLAGS, cwd=tmp_path, timeout=NO_HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep_lines = [line for line in result.stdout.splitlines() if line.startswith("sweep:")]
    assert len(sweep_lines) == 2 and sweep_lines[0].startswith("sweep: trial 0 (config 0, seed 0) on cpu0: ")
    assert sweep_lines[1] == f"sweep: report written to {sweep_dir / 'report'}"
    assert "--quiet" not in json.loads((sweep_dir / "sweep.json").read_text())["argv"]


CHROMIUM = "/usr/bin/chromium"
NEEDS_CHROMIUM = needs_infrastructure(
    lambda: None if Path(CHROMIUM).exists() else f"needs Debian's chromium at {CHROMIUM}"
)


@NEEDS_CHROMIUM
def test_the_dashboard_serves_the_sweeps_study_on_loopback_drawn_in_a_real_browser(tmp_path):
    from optuna.distributions import FloatDistribution
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import create_trial
    from playwright.sync_api import sync_playwright

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    argv = ["Cartpole-Balance", "--param", f"{LR}=loguniform:1e-4:1e-2", "--sweep-dir", str(sweep_dir)]
    (sweep_dir / "sweep.json").write_text(json.dumps({"argv": argv}))
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep_dir / "study.journal")))
    study = optuna.create_study(study_name="sweep", storage=storage, direction="maximize")
    for k, value in enumerate([120.5, 231.25, 64.0]):
        study.add_trial(create_trial(params={LR: 10 ** (-4 + k)}, distributions={LR: FloatDistribution(1e-4, 1e-1, log=True)},
                                     value=value, user_attrs={"config": k, "seed": 0}))  # fmt: skip
    proc = start_sweep("--dashboard", str(sweep_dir), "--port", "18765", cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert "open http://127.0.0.1:" in line and "ssh -L" in line, line
        url = line.split("open ", 1)[1].split()[0]
        listening = poll(lambda: [c for c in psutil.Process(proc.pid).net_connections() if c.status == "LISTEN"],
                         timeout=60)  # fmt: skip
        assert {c.laddr.ip for c in listening} == {"127.0.0.1"}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox", "--disable-background-networking"])  # fmt: skip
            try:
                page = browser.new_page()
                page.goto(url)
                page.get_by_text(re.compile(r"^0\. sweep$")).first.wait_for(
                    timeout=60_000
                )  # the study, by name
                page.goto(url.rstrip("/") + "/dashboard/studies/0")
                page.get_by_text("231.25").first.wait_for(timeout=60_000)  # the best trial's value, drawn
                page.screenshot(path=str(tmp_path / "dashboard.png"))
            finally:
                browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            stop_tree(proc)


def test_a_slurm_array_whose_tasks_run_the_same_sweep_joins_one_study(tmp_path):
    """The shipped scripts/slurm/sweep.sbatch, unchanged, as a 2-task array on the one-node test cluster."""
    from slurm_cluster import missing_reason, running_cluster

    require_infrastructure(missing_reason())
    sweep_dir = tmp_path / "sweep"
    sweep = ["Cartpole-Balance", "--param", f"{LR}=choice:1e-3,10", "--sampler", "grid", "--trials", "2",
             "--iterations", "8", "--gpu-ids", "None", "--slots", "1", "--sweep-dir", str(sweep_dir), *EVAL,
             *TRAIN_FLAGS]  # fmt: skip
    with running_cluster(tmp_path / "slurm") as cluster:
        env = slurm_env(cluster)
        job = submit_sweep_array(cluster, "0-1", sweep, tmp_path / "array_%a.out")

        def ended() -> bool:
            shown = subprocess.run(cluster.client("squeue", "-h", "-j", job), capture_output=True, text=True,
                                   env=env, timeout=60)  # fmt: skip
            return shown.returncode == 0 and not shown.stdout.strip()

        assert poll(ended, timeout=NO_HANG_S, every=2.0), f"array job {job} did not end"
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("array_*.out")))
    trials = study_of(sweep_dir).get_trials()
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials), logs[-4000:]
    assert {t.user_attrs["owner"] for t in trials} == {f"slurm:{job}_0", f"slurm:{job}_1"}, logs[-4000:]
    assert report_of(sweep_dir)["configurations"][-1]["params"][LR] == "10"

"""Data-parallel training with real worker processes: 2 CPU workers over gloo, through the users' launcher."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import BIN, TWO_CPU_WORKERS, run_cli
from launch_helpers import within_no_hang_limit

from mjfleet.launch.devices import make_plan, parse_gpu_ids
from mjfleet.launch.launcher import run_workers

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.fixture
def plan(monkeypatch):
    # Workers import their function's module by name: put tests/ on their path.
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}:{':'.join(sys.path)}")
    return make_plan(parse_gpu_ids(["None"]), cpu_workers=2)


REDUCERS = ["shared-memory", "all-gather", "all-reduce", "none"]
"""Every reducer runs through the averaged-gradient step both algorithms share (`mjfleet.rl.gradients`) once;
the algorithms' own 2-process checks below use one reducer each."""
AVERAGED_CASES = [("shared-memory", "compiled", 1), ("all-gather", "as-written", 2)]
NORMALISER_REDUCERS = ["shared-memory", "all-reduce"]
SAC_REDUCERS = ["all-reduce"]


def _cartpole_teacher(path: pathlib.Path) -> pathlib.Path:
    """An untrained PPO checkpoint of the small Cartpole: a teacher whose labels the student can be fitted to."""
    import distributed_workers as w

    torch.manual_seed(0)
    w.build_runner(w.NUM_ENVS, seed=0).save(path, infos={"task": "Cartpole-Balance"})
    return path


@pytest.fixture(scope="module")
def shared_launch(tmp_path_factory):
    """One 2-worker launch running, in turn, what the tests below check: 3 iterations averaged by the default
    reducer and by none, the averaged-gradient step through every reducer, the normaliser through two reducers, one
    averaged update per reducer and path (rank files under `out/<case>`), SAC's training and averaged step, a
    recurrent student's distillation update, shared-memory rounds, and last (it sets RANK and WORLD_SIZE to nonsense) a runner
    built from its context. Starting the workers once instead of for each check keeps the suite short."""
    import distributed_workers as w

    out = tmp_path_factory.mktemp("averaged")
    calls = [("train_and_compare", ("auto",)), ("train_and_compare", ("none",))]
    calls += [("averaged_step", (reducer,)) for reducer in REDUCERS]
    calls += [("normaliser_statistics", (reducer,)) for reducer in NORMALISER_REDUCERS]
    for case in AVERAGED_CASES:
        (out / "-".join(map(str, case))).mkdir()
        reducer, update, sync = case
        calls.append(
            ("averaged_update", (str(out / "-".join(map(str, case))), reducer, update == "compiled", sync))
        )
    calls.append(("sac_train_and_compare", ("auto",)))
    for reducer in SAC_REDUCERS:
        (out / f"sac-{reducer}").mkdir()
        calls.append(("sac_averaged_update", (str(out / f"sac-{reducer}"), reducer)))
    (out / "distillation").mkdir()
    teacher = _cartpole_teacher(out / "teacher.pt")
    calls.append(("distillation_update", (str(out / "distillation"), str(teacher), "all-reduce")))
    calls += [("shared_memory_rounds", (200,)), ("train_with_bogus_rank_variables", ())]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", f"{TESTS}:{':'.join(sys.path)}")
        plan = make_plan(parse_gpu_ids(["None"]), cpu_workers=2)
        results = run_workers(plan, w.in_sequence, plan, calls, log_dir="")
    steps = dict(zip(REDUCERS, results[2 : 2 + len(REDUCERS)], strict=True))
    normaliser = dict(zip(NORMALISER_REDUCERS, results[2 + len(REDUCERS) : 4 + len(REDUCERS)], strict=True))
    return {
        "auto": results[0],
        "none": results[1],
        "steps": steps,
        "normaliser": normaliser,
        "out": out,
        "sac": results[-4 - len(SAC_REDUCERS)],
        "shared_memory_rounds": results[-2],
        "context_not_variables": results[-1],
    }


def test_ranks_end_with_identical_parameters_while_their_environments_differ(shared_launch):
    result = shared_launch["auto"]
    assert result["world_size"] == 2 and result["seeds"] == [0, 1]
    assert result["params_identical"]
    assert not result["env_data_identical"]
    # Rank 0's view of the per-iteration exchanges: 2 + 3 episodes, returns 1 and 2 per step, the metric averaged.
    assert result["reducer"] == "shared-memory"  # CPU workers on one host
    episodes = result["episodes"]
    assert episodes["episodes"] == 5 and episodes["mean_return"] == pytest.approx((2 * 1 + 3 * 2) / 5)
    assert episodes["Metrics/rank"] == pytest.approx(0.5)
    assert result["agreed_stop"] == signal.SIGTERM


def test_a_runner_takes_its_ranks_from_its_context_not_from_rank_variables(shared_launch):
    result = shared_launch["context_not_variables"]
    assert result["world_size"] == 2 and result["reducer"] == "shared-memory"
    assert result["params_identical"] and not result["env_data_identical"]
    assert (
        result["startup"]
        == "update: PPO loss compiled (torch.compile); gradients averaged after every minibatch by shared-memory"
    )


@pytest.mark.parametrize("reducer", NORMALISER_REDUCERS)
def test_the_normaliser_syncs_through_the_reducer_as_rsl_rl_syncs_it(shared_launch, reducer):
    """Identical statistics on both ranks, bit for bit rsl_rl's own (its all_reduce calls), and those of one
    process holding both ranks' data (up to float32 summation order)."""
    result = shared_launch["normaliser"][reducer]
    assert result["reducer"] == reducer
    assert result["identical_on_ranks"] and result["equal_to_rsl_rl"]
    assert result["max_difference_to_one_process"] < 1e-5


@pytest.mark.parametrize("reducer", REDUCERS)
def test_the_averaged_gradient_step_equals_one_process_stepping_on_the_mean_gradients(shared_launch, reducer):
    """The step PPO and SAC share: rank 0's parameters broadcast, then three steps (gradients and an extra slot
    averaged, each network clipped, one fused AdamW step) equal one process stepping on both ranks' mean
    gradients; identical on both ranks. Reducer "none" steps each rank on its own gradients: they drift apart."""
    result = shared_launch["steps"][reducer]
    assert result["reducer"] == reducer
    assert result["broadcast_identical"] and result["moved"]
    assert result["max_difference_to_one_process"] < 1e-6
    assert result["extra_difference"] < 1e-6
    assert result["identical_on_ranks"] == (reducer != "none")


def test_without_gradient_averaging_the_ranks_drift_apart(shared_launch):
    assert not shared_launch["none"]["params_identical"]


@pytest.mark.parametrize("case", AVERAGED_CASES, ids=["-".join(map(str, c)) for c in AVERAGED_CASES])
def test_averaged_update_equals_one_process_update_on_both_ranks_data(shared_launch, case):
    """Both update paths average to the one-process update; so do 2 minibatches per rank accumulated into one
    step (grad_sync_period 2): the mean of the same gradients."""
    import distributed_workers as w
    import tensordict  # noqa: F401 - registers its TensorDict (the rank files' observations) as safe to load

    reducer, _, _ = case
    out = shared_launch["out"] / "-".join(map(str, case))
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["reducer"] for r in ranks] == [reducer, reducer]
    assert torch.equal(ranks[0]["final_actor"]["mlp.0.weight"], ranks[1]["final_actor"]["mlp.0.weight"])

    single = w.build_runner(2 * w.NUM_ENVS, seed=0, single_update=True)
    single.alg.get_policy().load_state_dict(ranks[0]["initial_actor"])
    single.alg.critic.load_state_dict(ranks[0]["initial_critic"])
    storage = single.alg.storage
    for name in w.STORAGE_FIELDS:
        getattr(storage, name).copy_(torch.cat([r[name] for r in ranks], dim=1))
    storage.observations.copy_(torch.cat([r["observations"] for r in ranks], dim=1))
    storage.distribution_params = tuple(
        torch.cat([r["distribution_params"][i] for r in ranks], dim=1) for i in range(2)
    )
    storage.step = w.STEPS
    single.alg.optimize()
    # Same update up to float32 summation order: Adam moves each parameter by about the learning rate (1e-3),
    # so a 2e-5 tolerance is 2% of one step.
    for key, value in single.alg.get_policy().state_dict().items():
        torch.testing.assert_close(value, ranks[0]["final_actor"][key], atol=2e-5, rtol=1e-4)
    # And the update really moved the parameters.
    assert not torch.equal(ranks[0]["final_actor"]["mlp.0.weight"], ranks[0]["initial_actor"]["mlp.0.weight"])


def test_a_two_worker_distillation_update_equals_one_process_holding_both_batches(shared_launch):
    """A GRU student's update (two truncated-backpropagation steps over a rollout in which episodes end), its
    gradients averaged across the ranks: what one process holding both ranks' rollouts computes."""
    import distributed_workers as w
    import tensordict  # noqa: F401 - registers its TensorDict (the rank files' observations) as safe to load

    out = shared_launch["out"]
    ranks = [torch.load(out / "distillation" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["reducer"] for r in ranks] == ["all-reduce", "all-reduce"]
    assert all(r["dones"].any() for r in ranks)  # hidden states are reset inside the replayed rollout
    single = w.build_runner(
        2 * w.NUM_ENVS, seed=0, algorithm="distillation", teacher=str(out / "teacher.pt")
    ).alg
    single.student.load_state_dict(ranks[0]["initial"])
    for name in w.DISTILLATION_FIELDS:
        getattr(single.storage, name).copy_(torch.cat([r[name] for r in ranks], dim=1))
    single.storage.step = w.STEPS
    single.update()
    for key, value in single.student.state_dict().items():
        torch.testing.assert_close(value, ranks[0]["final"][key], atol=2e-5, rtol=1e-4)
        assert torch.equal(ranks[0]["final"][key], ranks[1]["final"][key])
    assert not torch.equal(
        ranks[0]["final"]["rnn.rnn.weight_hh_l0"], ranks[0]["initial"]["rnn.rnn.weight_hh_l0"]
    )


# SAC's own launch costs as much as PPO's (~1 min on 2 cores): slow, while its agreement is checked every iteration
# in the shared launch (`sac_train_and_compare`).
@pytest.mark.parametrize("algorithm", ["ppo", pytest.param("sac", marks=pytest.mark.slow)])
def test_ranks_that_stop_agreeing_end_the_run_at_the_next_check_naming_them(plan, algorithm):
    import distributed_workers as w

    from mjfleet.launch.launcher import WorkerFailed

    before = _descendants()  # what earlier tests may have left running is theirs to answer for
    with (
        within_no_hang_limit("ranks that stopped agreeing ending the run"),
        pytest.raises(WorkerFailed) as failed,
    ):
        run_workers(plan, w.diverge_after_one_iteration, plan, algorithm, log_dir="")
    message = str(failed.value)
    assert "\n" not in message
    assert "differ between rank 0 and rank(s) [1] after iteration 2" in message  # the first check after it
    assert _wait_for_no_new_children(before, timeout=30) == []  # no worker or agent left behind


def test_sac_ranks_end_with_identical_networks_targets_and_temperature_while_their_data_differ(shared_launch):
    result = shared_launch["sac"]
    assert result["reducer"] == "shared-memory"
    assert "gradients averaged after every gradient step by shared-memory" in result["startup"]
    assert result["moved"] and result["params_identical"]
    assert not result["env_data_identical"]


@pytest.mark.parametrize("reducer", SAC_REDUCERS)
def test_an_averaged_sac_step_equals_one_process_step_on_both_ranks_batches(shared_launch, reducer):
    """Critic, actor, temperature and targets after one gradient step averaged over 2 ranks equal one process's
    step on both ranks' batches (and the policy's noise draws) together, up to float32 summation order."""
    import distributed_workers as w

    from mjfleet.rl.sac.replay import Batch

    out = shared_launch["out"] / f"sac-{reducer}"
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["reducer"] for r in ranks] == [reducer, reducer]
    alg = w.build_runner(2 * w.NUM_ENVS, seed=0, algorithm="sac").alg
    initial = ranks[0]["initial"]
    alg.actor.load_state_dict(initial["actor"])
    alg.critic.load_state_dict(initial["critic"])
    alg.target.load_state_dict(initial["target"])
    with torch.no_grad():
        alg.log_alpha.copy_(initial["log_alpha"])
    batch = Batch(**{k: torch.cat([r["batch"][k] for r in ranks]) for k in ranks[0]["batch"]})
    noise = tuple(torch.cat([r["noise"][i] for r in ranks]) for i in range(2))
    alg.compute_gradients(batch, noise)
    alg.apply_gradients()
    expected = ranks[0]["final"]
    # Adam's first step moves each parameter by about the learning rate (3e-4): 2e-5 is 7% of one step.
    for name, net in (("actor", alg.actor), ("critic", alg.critic), ("target", alg.target)):
        for key, value in net.state_dict().items():
            torch.testing.assert_close(value, expected[name][key], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(alg.log_alpha.detach(), expected["log_alpha"], atol=2e-5, rtol=1e-4)
    assert torch.equal(expected["actor"]["mlp.0.weight"], ranks[1]["final"]["actor"]["mlp.0.weight"])
    assert not torch.equal(expected["actor"]["mlp.0.weight"], initial["actor"]["mlp.0.weight"])


def _descendants() -> set[int]:
    """PIDs of this process's live (not zombie) descendants, read from /proc."""
    parents = {}
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X"):
            parents[int(proc.name)] = int(fields[1])
    found, frontier = set(), [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.update(children)
        frontier += children
    return found


def _wait_for_no_new_children(before: set[int], timeout: float) -> list[int]:
    """PIDs of this process's live descendants that were not in `before`, once they are gone or `timeout` passed
    (a hang guard: they are normally gone when the launcher returns)."""
    deadline = time.monotonic() + timeout
    while (left := sorted(_descendants() - before)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_shared_memory_sums_are_exact_in_every_round_and_a_missing_rank_times_out(shared_launch):
    result = shared_launch["shared_memory_rounds"]
    assert [r["wrong"] for r in result] == [0, 0]
    assert "rank(s) [0] did not reach" in result[1]["timed_out"]


# --------------------------------------------------------------------------- the train command, 2 CPU workers


def test_two_cpu_workers_write_one_run_directory_with_global_counts(tmp_path):
    result = run_cli("train", "Cartpole-Balance", *TWO_CPU_WORKERS, "--max-iterations", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "logs" / "cartpole_balance").iterdir()
    assert "2 workers x 16 envs = 32 envs" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1]  # one writer: no duplicated lines
    assert records[-1]["env_steps"] == 2 * 8 * 16 * 2
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1


@pytest.mark.parametrize("flags", [["--cpu-workers", "2"], ["--gpu-ids", "0", "1"], ["--hosts", "h1", "h2"]])
def test_flags_that_place_workers_are_usage_errors_under_an_external_launcher(flags, tmp_path):
    launched = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
    }
    result = run_cli(
        "train", "Cartpole-Balance", *flags, cwd=tmp_path, timeout=120, env={**launched, "MASTER_PORT": "1"}
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "do not apply under a launcher such as torchrun" in lines[0], result.stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_two_workers_accumulating_two_minibatches_with_periodic_evaluation_learn_cartpole(tmp_path):
    """The README's Cartpole run on 2 CPU workers with --agent.ppo.grad-sync-period 2 and --eval-interval 5:
    one run directory, eval rows in metrics.jsonl, model_best.pt, and >= 95% of the maximum return."""
    args = ["--gpu-ids", "None", "--cpu-workers", "2", "--agent.ppo.grad-sync-period", "2"]
    result = subprocess.run(
        [str(BIN / "train"), "Cartpole-Balance", *args, "--eval-interval", "5", "--logs-root", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = (tmp_path / "cartpole_balance").iterdir()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "Eval/mean_return" in r]
    assert [r["iteration"] for r in evals] == [r["iteration"] for r in rows if (r["iteration"] + 1) % 5 == 0]
    assert (run_dir / "model_best.pt").exists()
    max_return = 250  # 5 s episodes at 50 steps/s, at most one reward point per step
    assert evals[-1]["Eval/mean_return"] >= 0.95 * max_return, [r["Eval/mean_return"] for r in evals]

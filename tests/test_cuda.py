"""The CUDA path, on a real GPU: these run on a machine with one (a lent GPU machine) and skip elsewhere.

CI has no GPU; run them there with `python -m pytest tests/test_cuda.py` (see docs/benchmarks.md).
"""

import contextlib
import io
import json
import pathlib
import sys

import pytest
import torch
from helpers import run_cli

from mjfleet.tasks import get_task

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DEVICE = "cuda:0"
TASKS = ["Cartpole-Balance", "Quadruped-Velocity-Flat"]


def make_env(task: str, num_envs: int, capture: bool = True, seed: int = 0):
    spec = get_task(task)
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    cfg.capture_graphs = capture
    torch.manual_seed(seed)
    return spec.make_env(cfg, DEVICE)


def make_training(task: str, num_envs: int = 256, algorithm: str = "ppo"):
    """(env, runner, alg): the task's environment and a FleetRunner on it, the algorithm in training mode."""
    from mjfleet.rl import FleetRunner

    env = make_env(task, num_envs)
    agent = get_task(task).agent_config()
    agent.algorithm_name = algorithm
    agent.logger = "none"
    with contextlib.redirect_stdout(io.StringIO()):
        runner = FleetRunner(env, agent, None, DEVICE, log_format="compact")
    runner.alg.train_mode()
    return env, runner, runner.alg


def assert_collects_without_host_syncs(alg, env):
    """10 rollout steps after 3 of warm-up (lazy allocations, first-call paths) in which no torch call waits for
    the GPU; the env steps as one replayed graph."""
    obs = collect(alg, env, env.get_observations(), 3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        collect(alg, env, obs, 10)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert env.step_is_graph


def collect(alg, env, obs, steps: int):
    """`steps` rollout steps (policy inference, env step, storage) in inference mode; returns the last observations."""
    with torch.inference_mode():
        for _ in range(steps):
            actions = alg.act(obs)
            obs, rewards, dones, extras = env.step(actions)
            alg.process_env_step(obs, rewards, dones, extras)
    return obs


def test_the_env_step_graph_allocates_from_its_own_memory_pool():
    """Tensors the recorded step makes after the physics (whose solver loop warp records by pausing and resuming
    the capture) live in the graph's pool: the general pool would hand their memory out again after recording."""
    env = make_env("Quadruped-Velocity-Flat", 64)
    actions = torch.zeros(env.num_envs, env.num_actions, device=DEVICE)
    for _ in range(3):  # the second step records, the third replays
        env.step(actions)
    graph = env._step_graph
    assert graph is not None and graph.pool is not None
    pools = {tuple(graph.pool.id), tuple(graph.graph.pool())}  # the kept pool and the graph's private one
    segments = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) in pools]
    obs, rewards, *_ = graph.output
    for tensor in (obs["actor"], obs["critic"], rewards):
        address = tensor.data_ptr()
        assert any(s["address"] <= address < s["address"] + s["total_size"] for s in segments)


@pytest.mark.parametrize("task", TASKS)
def test_graph_replayed_env_steps_agree_with_op_by_op_steps_on_cuda(task):
    """Whole-step CUDA graph (physics + torch, random draws included) == the same steps launched op by op."""
    envs = [make_env(task, 64, capture=c) for c in (True, False)]
    for env in envs:
        env.max_episode_length = 7  # time-outs: masked resets happen inside the recorded steps
    assert envs[0].sim.captured and not envs[1].sim.captured
    assert envs[0].sim.qpos.is_cuda
    g = torch.Generator(device=DEVICE).manual_seed(1)
    actions = [torch.rand(64, envs[0].num_actions, device=DEVICE, generator=g) * 2 - 1 for _ in range(20)]
    outs = []
    for env in envs:
        torch.manual_seed(2)  # same draws for the resets inside the steps
        for a in actions:
            obs, rewards, dones, _ = env.step(a)
        outs.append(
            (obs["actor"].clone(), rewards.clone(), env.sim.qpos.clone(), env.episode_length_buf.clone())
        )
    assert envs[0].step_is_graph and not envs[1].step_is_graph  # from the second step on: one CUDA graph
    for captured, plain in zip(outs[0], outs[1], strict=True):
        # GPU kernels may sum contact forces in a different order between launches: agree to float32 rounding.
        torch.testing.assert_close(captured, plain, rtol=1e-4, atol=1e-4)
    assert outs[0][2].abs().sum() > 0


@pytest.mark.parametrize("task", TASKS)
def test_collection_loop_never_synchronises_with_the_host(task):
    """Policy inference + env step + storage: no torch call in the loop waits for the GPU."""
    env, _, alg = make_training(task)
    assert_collects_without_host_syncs(alg, env)
    assert torch.isfinite(alg.storage.rewards[: alg.storage.step]).all()


def _updates_from_one_rollout(task: str, variants: list[dict]):
    """(start parameters, [(parameters, buffers, losses, learning rate)]): one rollout, then one update per
    variant ("compiled": the loss under torch.compile or as written, "tf32", "schedule"), each from the same
    parameters, optimizer state,
    learning rate and minibatch permutation."""
    import copy

    env, runner, alg = make_training(task)
    obs = collect(alg, env, env.get_observations(), runner.agent_cfg.num_steps_per_env)
    with torch.inference_mode():
        alg.compute_returns(obs)
    models = (alg.actor, alg.critic)

    def flat(tensors) -> torch.Tensor:
        return torch.cat([t.detach().flatten().float().cpu() for t in tensors] or [torch.zeros(0)])

    start = [copy.deepcopy(m.state_dict()) for m in models]
    start_params = flat(p for m in models for p in m.parameters())
    optimizer_start = copy.deepcopy(alg.optimizer.state_dict())
    lr, rng = alg.learning_rate, torch.cuda.get_rng_state()
    compiled, schedule = alg.compiled_loss, alg.schedule
    assert compiled is not None  # the default
    results = []
    for variant in variants:
        for m, state in zip(models, start, strict=True):
            m.load_state_dict(state)
        alg.optimizer.load_state_dict(copy.deepcopy(optimizer_start))
        alg.learning_rate = lr
        torch.cuda.set_rng_state(rng)  # the same minibatch permutation
        alg.compiled_loss = compiled if variant.get("compiled", True) else None
        alg.tf32 = variant.get("tf32", True)
        alg.schedule = variant.get("schedule", schedule)
        losses = alg.optimize()
        params = flat(p for m in models for p in m.parameters())
        buffers = flat(b for m in models for b in m.buffers())  # observation normalisers
        results.append((params, buffers, losses, alg.learning_rate, alg.compiled_loss is not None))
    return start_params, results


@pytest.mark.parametrize("task", TASKS)
def test_the_compiled_ppo_update_agrees_with_the_update_as_written_on_cuda(task):
    """The loss under torch.compile (fused CUDA kernels) gives the update of the loss as written, as a whole."""
    # IEEE float32 throughout (TF32 rounds differently per kernel): compiled, compiled again, as written.
    variants = [{"compiled": c, "tf32": False} for c in (True, True, False)]
    start_params, results = _updates_from_one_rollout(task, variants)
    assert [r[4] for r in results] == [True, True, False]  # which loss each variant ran, none given up
    params, _, losses, learning_rate, _ = results[0]
    step = params - start_params
    assert step.abs().max() > 1e-4  # the update changed the policy
    torch.testing.assert_close(results[1][0], params, rtol=1e-4, atol=1e-5)
    as_written = results[2]
    torch.testing.assert_close(as_written[1], results[0][1])
    assert as_written[3] == pytest.approx(learning_rate)
    for key in ("value", "surrogate", "entropy"):
        assert as_written[2][key] == pytest.approx(losses[key], rel=1e-3, abs=1e-5)
    # fused kernels round differently from op-by-op ones: close as a whole
    assert ((as_written[0] - params).norm() / step.norm()) < 1e-3


@pytest.mark.parametrize("task", TASKS)
def test_tf32_update_is_close_to_the_float32_update_and_not_equal(task):
    """--agent.ppo.tf32 (the default) reaches the compiled loss: its update differs from the IEEE float32 one by
    TF32's rounding only."""
    # A fixed learning rate: with the adaptive one a first minibatch's KL of exactly 0 (IEEE) against 1e-8 (TF32)
    # already takes the two onto different learning-rate paths.
    variants = [{"tf32": tf32, "schedule": "fixed"} for tf32 in (False, True)]
    start_params, ((ieee, *_), (tf32, _, losses, *_)) = _updates_from_one_rollout(task, variants)
    step = ieee - start_params
    assert step.abs().max() > 1e-4
    assert not torch.equal(tf32, ieee)
    # CPU emulation of TF32 (operands rounded to 10 mantissa bits), quadruped: 0.064 and 0.998
    assert ((tf32 - ieee).norm() / step.norm()) < 0.25
    assert torch.nn.functional.cosine_similarity(tf32 - start_params, step, dim=0) > 0.98
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    assert torch.backends.cuda.matmul.fp32_precision != "tf32"  # restored after the update


def test_train_on_gpu_0_end_to_end(tmp_path):
    """`train` with no device flag picks GPU 0 and writes a complete run directory."""
    result = run_cli(sys.executable, "-m", "mjfleet.cli.train", "Cartpole-Balance", "--num-envs", "1024",
                     "--max-iterations", "3", "--logs-root", str(tmp_path), timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = pathlib.Path(tmp_path).glob("*/*")
    assert (run_dir / "model_3.pt").exists()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert "cuda" in (run_dir / "params" / "run.yaml").read_text()
    assert json.loads(lines[-1])


def test_two_workers_share_gpu_0_with_identical_parameters_and_one_run_directory(tmp_path):
    """--workers-per-gpu 2: torchrunx spawns 2 workers with CUDA_VISIBLE_DEVICES, each with its own CUDA graphs,
    gradients averaged over gloo as CUDA tensors, rank 0 alone writing; a consistency check after every iteration
    stops the run if the ranks' parameters ever differ."""
    result = run_cli(sys.executable, "-m", "mjfleet.cli.train", "Cartpole-Balance", "--gpu-ids", "0",
                     "--workers-per-gpu", "2", "--num-envs", "256", "--max-iterations", "3",
                     "--agent.consistency-check-interval", "1", "--logs-root", str(tmp_path), timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 workers (gloo, 2 per GPU)" in result.stdout
    (run_dir,) = pathlib.Path(tmp_path).glob("*/*")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and lines[-1]["env_steps"] == 3 * 2 * 256 * 24
    assert (run_dir / "model_3.pt").exists()


@pytest.mark.parametrize("task", TASKS)
def test_sac_collection_loop_never_synchronises_with_the_host(task):
    """SAC's rollout step (the policy's sample, env step, the replay buffer's write) waits for nothing either."""
    env, _, alg = make_training(task, algorithm="sac")
    alg.env_steps = alg.cfg.random_steps  # past the warm-up: the policy acts
    assert_collects_without_host_syncs(alg, env)
    assert alg.buffer.size == 13 and torch.isfinite(alg.buffer.rewards[:13]).all()


@pytest.mark.parametrize("task", TASKS)
def test_graph_replayed_sac_steps_agree_with_op_by_op_steps(task):
    """Gradient steps replayed from the recorded CUDA graphs (`capture_update`, the default on CUDA) give the plain
    steps' parameters, temperature and losses: same batches and noise (one seed), same optimizer. Every other step
    updates the critics alone (a policy delay of 2), so both recorded kinds of step are checked."""
    import copy

    env, _, alg = make_training(task, algorithm="sac")
    alg.env_steps = alg.cfg.random_steps
    collect(alg, env, env.get_observations(), 8)
    modules = (alg.actor, alg.critic, alg.target)
    start = [copy.deepcopy(m.state_dict()) for m in modules]
    start_alpha, start_optimizer = alg.log_alpha.detach().clone(), copy.deepcopy(alg.optimizer.state_dict())

    def steps(capture: bool) -> tuple[torch.Tensor, list[float]]:
        for m, state in zip(modules, start, strict=True):
            m.load_state_dict(state)
        with torch.no_grad():
            alg.log_alpha.copy_(start_alpha)
        alg.optimizer.load_state_dict(copy.deepcopy(start_optimizer))
        alg.recorded.enabled = capture
        torch.manual_seed(0)
        terms = torch.stack([alg.gradient_step(alg.buffer.sample(1024, alg.cfg.n_step, alg.cfg.gamma),
                                               alg.draw_noise(1024), i % 2 == 0).clone() for i in range(6)])  # fmt: skip
        flat = torch.cat([t.detach().flatten() for m in modules for t in m.state_dict().values()])
        return torch.cat((flat, alg.log_alpha.detach())).cpu(), terms.cpu()

    plain, plain_terms = steps(capture=False)
    replayed, replayed_terms = steps(capture=True)
    recorded = alg.recorded
    assert recorded.enabled and {key[0] for key in recorded.graphs} == {True, False}  # both kinds, kept
    start_flat = torch.cat([t.flatten() for state in start for t in state.values()] + [start_alpha]).cpu()
    assert (plain - start_flat).abs().max() > 1e-4  # the steps changed the networks
    torch.testing.assert_close(replayed, plain, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(replayed_terms, plain_terms, rtol=1e-3, atol=1e-5)


def test_sac_trains_on_gpu_0_and_play_evaluates_it(tmp_path):
    """`train --algorithm sac` on GPU 0 (recorded gradient steps) writes a run that `play` evaluates there."""
    result = run_cli(sys.executable, "-m", "mjfleet.cli.train", "Cartpole-Balance", "--algorithm", "sac",
                     "--num-envs", "1024", "--max-iterations", "4", "--logs-root", str(tmp_path), timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "replayed CUDA graph" in result.stdout and "op by op" not in result.stdout + result.stderr
    (run_dir,) = pathlib.Path(tmp_path).glob("*/*")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and lines[-1]["Perf/gradient_steps"] > 0
    report = tmp_path / "eval.json"
    result = run_cli(sys.executable, "-m", "mjfleet.cli.play", "Cartpole-Balance", "--checkpoint",
                     str(run_dir / "model_4.pt"), "--episodes", "8", "--output", str(report), timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads(report.read_text())

"""The humanoid learns on this 2-core CPU: 40 PPO iterations at 256 environments (slow: ~6 min on a quiet machine,
20-40 min contended).

Issue 20's target, from the training log: the mean episode length of the last 5 iterations at least 3x that of the
first 5, and a lower velocity-tracking error. Measured 2026-11-23 (docs/tasks.md): 3.14x (61 -> 192 steps) and
`Metrics/lin_vel_error` 0.603 -> 0.598 m/s, a thin margin on both: the robot learns to stay up, not yet to walk.
"""

import os

import pytest
import torch

from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task


def _mean(records: list[dict], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


@pytest.mark.slow
def test_humanoid_flat_triples_its_episode_length_within_40_iterations():
    spec = get_task("Humanoid-Velocity-Flat")
    cfg = spec.env_config()
    cfg.num_envs = 256
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    if os.environ.get("MJFLEET_LEARNING_TEST_POLICY") == "zero":
        # the environments get zero actions (PPO still updates on what it sampled): this test must then fail
        act = runner.alg.act
        runner.alg.act = lambda obs: torch.zeros_like(act(obs))
    records: list[dict] = []
    for _ in range(40):
        records.append(dict(runner.learn(1, init_at_random_ep_len=not records)))
    first, last = records[:5], records[-5:]
    assert _mean(last, "mean_episode_length") >= 3.0 * _mean(first, "mean_episode_length")
    assert _mean(last, "Metrics/lin_vel_error") < _mean(first, "Metrics/lin_vel_error")

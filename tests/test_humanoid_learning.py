"""The humanoid learns on this 2-core CPU: 40 PPO iterations at 256 environments (slow: ~20-40 min contended).

Issue 20 asks for 3x the mean episode length and a lower tracking error after these 40 iterations; the current
configuration reaches 1.53x and 1.57x the return with an unchanged error (docs/tasks.md), so this test asserts the
learning that is there, with margin, and the issue's target stays open.
"""

import pytest
import torch

from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task


def _mean(records: list[dict], key: str) -> float:
    return sum(r[key] for r in records) / len(records)


@pytest.mark.slow
def test_humanoid_flat_episode_length_and_return_rise_within_40_iterations():
    spec = get_task("Humanoid-Velocity-Flat")
    cfg = spec.env_config()
    cfg.num_envs = 256
    agent = spec.agent_config()
    agent.logger = "none"
    torch.manual_seed(agent.seed)
    runner = FleetRunner(spec.make_env(cfg), agent, None, "cpu", log_format="compact")
    records: list[dict] = []
    for _ in range(40):
        records.append(dict(runner.learn(1, init_at_random_ep_len=not records)))
    first, last = records[:5], records[-5:]
    # Measured (2026-11-23): episode length 45.1 -> 68.9 steps, return 1.16 -> 1.83 (first vs last 5 iterations).
    assert _mean(last, "mean_episode_length") >= 1.4 * _mean(first, "mean_episode_length")
    assert _mean(last, "mean_return") >= 1.4 * _mean(first, "mean_return")

"""A fingerprint of the locomotion tasks' models and rollouts: to show a refactor changed no number.

    uv run python scripts/port_fingerprint.py [--steps 40] [--num-envs 4] [Task ...]

For each task (by default Quadruped-Velocity-Flat, Quadruped-Velocity-Rough, Humanoid-Velocity-Flat), on CPU with
a fixed seed: a SHA-256 of every array field of the compiled MjModel, then of the observations, rewards and dones
of `--steps` env steps under fixed pseudo-random actions. Run it before and after a change; equal lines mean the
model and the rollout are bit-identical.
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np
import torch

TASKS = ("Quadruped-Velocity-Flat", "Quadruped-Velocity-Rough", "Humanoid-Velocity-Flat")


def model_digest(model) -> str:
    """SHA-256 over every array field of an MjModel, by name (names included so that a moved field shows)."""
    digest = hashlib.sha256()
    for name in sorted(dir(model)):
        if name.startswith("_"):
            continue
        value = getattr(model, name)
        if isinstance(value, np.ndarray):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()[:16]


def rollout_digest(env, steps: int, seed: int = 1) -> str:
    """SHA-256 of observations, rewards and dones over `steps` steps of fixed pseudo-random actions."""
    generator = torch.Generator().manual_seed(seed)
    digest = hashlib.sha256()
    obs = env.get_observations()
    for _ in range(steps):
        actions = torch.randn(env.num_envs, env.num_actions, generator=generator)
        obs, rewards, dones, _ = env.step(actions)
        for key in sorted(obs.keys()):
            digest.update(obs[key].cpu().numpy().tobytes())
        digest.update(rewards.cpu().numpy().tobytes())
        digest.update(dones.cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--num-envs", type=int, default=4)
    args = parser.parse_args()

    from mjfleet.tasks import get_task

    for task in args.tasks:
        spec = get_task(task)
        cfg = spec.env_config()
        cfg.num_envs = args.num_envs
        torch.manual_seed(0)
        np.random.seed(0)
        env = spec.make_env(cfg, "cpu")
        print(
            f"{task}: model {model_digest(env.mj_model)} rollout {rollout_digest(env, args.steps)}",
            flush=True,
        )


if __name__ == "__main__":
    main()

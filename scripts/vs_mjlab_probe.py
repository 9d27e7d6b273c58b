"""mjlab's half of scripts/vs_mjlab.py's physics and env figures: run by the Python of mjlab's own virtual
environment (never mjfleet's), it builds an mjlab task's environment and prints one JSON line of timings.

    <mjlab venv>/bin/python scripts/vs_mjlab_probe.py Mjlab-Velocity-Flat-Unitree-G1 --num-envs 256

As `bench` does in mjfleet: env steps with actions drawn uniformly from [-1, 1], after a few warm-up steps, in
`--repeats` blocks of `--steps` env steps. The env figure is the blocks' wall time; the physics figure is the time
spent inside `sim.step()` (the `decimation` physics steps of each env step) in those same blocks, so that both are
measured on the states the task visits. mjlab steps op by op on CPU (it records CUDA graphs only on GPUs), so no
synchronisation is needed there; on a GPU each timed call is synchronised.
"""

from __future__ import annotations

import argparse
import json
import time

import mjlab.tasks  # noqa: F401  (registers mjlab's tasks)
import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.tasks.registry import load_env_cfg

WARMUP_STEPS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task")
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    cfg = load_env_cfg(args.task)
    cfg.scene.num_envs = args.num_envs
    cfg.seed = args.seed
    start = time.perf_counter()
    env = ManagerBasedRlEnv(cfg=cfg, device=args.device)
    env.reset()
    actions = torch.empty(env.num_envs, env.action_manager.total_action_dim, device=args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def step() -> None:
        actions.uniform_(-1.0, 1.0)
        env.step(actions)

    for _ in range(WARMUP_STEPS):
        step()
    build_s = time.perf_counter() - start

    sim_step = env.sim.step
    inside = [0.0]

    def timed_sim_step() -> None:  # an instance attribute: env.step calls self.sim.step()
        sync()
        t = time.perf_counter()
        sim_step()
        sync()
        inside[0] += time.perf_counter() - t

    env.sim.step = timed_sim_step
    env_s, physics_s = [], []
    for _ in range(args.repeats):
        inside[0] = 0.0
        sync()
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        env_s.append(time.perf_counter() - t)
        physics_s.append(inside[0])
    env.sim.step = sim_step
    env.close()
    print(
        json.dumps(
            {
                "task": args.task,
                "num_envs": args.num_envs,
                "decimation": cfg.decimation,
                "steps_per_block": args.steps,
                "env_s": env_s,
                "physics_s": physics_s,
                "build_s": build_s,
                "torch_threads": torch.get_num_threads(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

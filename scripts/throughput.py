"""Raw captured physics vs environment vs training throughput for one task, measured in one run.

    uv run python scripts/throughput.py                      # Cartpole-Balance, 1024 envs, CPU
    uv run python scripts/throughput.py Cartpole-Swingup --num-envs 4096 --device cuda:0

Physics steps/s counts physics substeps of all worlds; env and training steps/s count policy steps (one policy step
= `decimation` physics steps), so the env overhead over raw physics is
    physics_steps_per_s / decimation / env_steps_per_s.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import warp as wp


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task", nargs="?", default="Cartpole-Balance")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200, help="policy steps timed for physics and env")
    parser.add_argument("--iterations", type=int, default=5, help="PPO iterations timed for training")
    args = parser.parse_args()
    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING

    from mjfleet.rl import FleetRunner
    from mjfleet.tasks import get_task

    spec = get_task(args.task)
    cfg = spec.env_config()
    cfg.num_envs = args.num_envs
    torch.manual_seed(0)
    with wp.ScopedDevice(args.device):
        t0 = time.perf_counter()
        env = spec.make_env(cfg, args.device)
        build_s = time.perf_counter() - t0
        sim, n, decimation = env.sim, env.num_envs, cfg.decimation

        def timed(fn, count):
            fn()  # warm-up
            wp.synchronize_device(args.device)
            start = time.perf_counter()
            for _ in range(count):
                fn()
            wp.synchronize_device(args.device)
            return time.perf_counter() - start

        physics_s = timed(sim.step, args.steps)  # one call = `decimation` captured substeps
        actions = torch.empty(n, env.num_actions, device=env.device)

        def env_step():
            actions.uniform_(-1.0, 1.0)
            env.step(actions)

        env_s = timed(env_step, args.steps)
        agent = spec.agent_config()
        agent.logger = "none"
        runner = FleetRunner(env, agent, None, args.device, log_format="compact")
        runner.learn(1)  # warm-up iteration
        start = time.perf_counter()
        runner.learn(args.iterations)
        train_s = time.perf_counter() - start

    result = {
        "task": args.task,
        "device": args.device,
        "num_envs": n,
        "decimation": decimation,
        "build_s": round(build_s, 2),
        "physics_steps_per_s": args.steps * decimation * n / physics_s,
        "env_steps_per_s": args.steps * n / env_s,
        "train_env_steps_per_s": args.iterations * agent.num_steps_per_env * n / train_s,
    }
    result["env_over_physics"] = result["physics_steps_per_s"] / decimation / result["env_steps_per_s"]
    result["train_over_env"] = result["env_steps_per_s"] / result["train_env_steps_per_s"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""What `train --viewer viser` costs: training throughput with and without the browser view, interleaved.

    uv run python scripts/viewer_cost.py Quadruped-Velocity-Flat --num-envs 256 --pairs 9

One worker in this process (on --device) trains the task with PPO; blocks of `--iterations` iterations alternate
without and with the view's per-step hook (`RunnerHooks.on_step`, what `train --viewer viser` installs), while a
page is connected: a websocket client in another process receives every message, as a browser would (a view with
nobody watching sends nothing worth measuring). Each pair's order alternates, so a slow spell of the machine
falls on both sides; the median pair's slowdown is the figure. Prints one line per pair and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

CLIENT = """
import sys, viser, websockets.sync.client as ws
conn = ws.connect(sys.argv[1], subprotocols=["viser-v" + viser.__version__], max_size=None, open_timeout=60)
print("connected", flush=True)
while True:
    conn.recv()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--iterations", type=int, default=2, help="PPO iterations per block")
    parser.add_argument("--viewer-envs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    from mjfleet.fleet.context import WorkerContext
    from mjfleet.rl import FleetRunner
    from mjfleet.rl.runner import RunnerHooks
    from mjfleet.tasks import get_task
    from mjfleet.viewers.scene import TrainingView

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = get_task(args.task)
    cfg = spec.env_config()
    cfg.num_envs = args.num_envs
    env = spec.make_env(cfg, args.device)
    agent = spec.default_agent_config(args.device)
    agent.logger = "none"
    hooks = RunnerHooks()
    runner = FleetRunner(
        env, agent, context=WorkerContext.single(args.device), hooks=hooks, log_format="compact"
    )
    view = TrainingView(env, envs=args.viewer_envs, host="127.0.0.1", port=free_port())
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, f"ws://127.0.0.1:{view.port}"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "connected"
        steps_per_block = args.iterations * agent.num_steps_per_env * args.num_envs
        runner.learn(1)  # warm-up: first-use costs stay out of the blocks

        def block(with_view: bool) -> float:
            hooks.on_step = view.step if with_view else None
            start = time.perf_counter()
            runner.learn(args.iterations)
            return steps_per_block / (time.perf_counter() - start)

        slowdowns = []
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            rates = dict(zip(order, (block(w) for w in order), strict=True))
            slowdowns.append(1 - rates[True] / rates[False])
            print(
                f"pair {pair + 1}: without {rates[False]:,.0f} env-steps/s, with the view {rates[True]:,.0f} "
                f"({slowdowns[-1]:+.1%} slower)",
                flush=True,
            )
        summary = {
            "task": args.task,
            "num_envs": args.num_envs,
            "device": args.device,
            "pairs": args.pairs,
            "drawings": view.draws,
            "median_slowdown": statistics.median(slowdowns),
            "slowdowns": slowdowns,
        }
        print(json.dumps(summary))
    finally:
        client.kill()
        client.wait()
        view.close()
        runner.close()


if __name__ == "__main__":
    main()

"""PPO's training throughput with the loss compiled and as written, alternated back to back.

    uv run python scripts/compiled_update.py Quadruped-Velocity-Flat --num-envs 256 --workers 1
    uv run python scripts/compiled_update.py Cartpole-Balance --num-envs 1024 --workers 2

Two variants of the same update (same minibatches, same averaged step), each timed as `bench`'s training phase
(full `FleetRunner.learn` iterations after one untimed warm-up iteration, on CPU workers):

    compiled    `FleetPPO.minibatch_loss` under torch.compile, autograd for its backward (the default)
    as-written  the same loss op by op (--agent.ppo.no-compile-update)

Each round runs every variant once, in a rotated order, so that a machine's drift falls on all of them; the
script prints each round, the medians, and the compiled loss's median as a multiple of the loss as written.
torch.compile's own compile time falls in the warm-up iteration, and so in each run's wall time.

Until 5d4f32d a third variant, `engine` (hand-derived MLP gradients, mjfleet.rl.fast), ran beside these: the
compiled loss reached 95-99% of its training throughput, so the engine was deleted (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

VARIANTS = ("compiled", "as-written")


def variant_worker(job):
    """bench's worker, timing its whole run."""
    from mjfleet.bench.measure import bench_worker

    started = time.perf_counter()
    result = bench_worker(job)
    if result is not None:
        result["wall_s"] = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--num-envs", type=int, required=True, help="environments per worker")
    parser.add_argument("--workers", type=int, default=1, help="CPU workers (gloo)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations per run")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--json", help="write every round's figures here")
    args = parser.parse_args()

    from mjfleet.bench.measure import BenchJob
    from mjfleet.bench.report import summarize_run
    from mjfleet.launch.devices import GpuRequest, make_plan
    from mjfleet.launch.launcher import run_workers
    from mjfleet.tasks import get_task

    spec = get_task(args.task)
    env_cfg, agent = spec.env_config(), spec.agent_config()
    env_cfg.num_envs = args.num_envs
    plan = make_plan(GpuRequest("cpu"), cpu_workers=args.workers)
    print(f"{args.task}: {args.workers} x {args.num_envs} envs, {plan.describe()}", flush=True)
    rates: dict[str, list[float]] = {v: [] for v in args.variants}
    rows = []
    for round_ in range(args.rounds):
        order = args.variants[round_ % len(args.variants) :] + args.variants[: round_ % len(args.variants)]
        for variant in order:
            agent_v = copy.deepcopy(agent)
            agent_v.ppo.compile_update = variant == "compiled"
            job = BenchJob(
                args.task, env_cfg, agent_v, plan, (args.num_envs,), iterations=args.iterations,
                phases=("training",), quiet=True,
            )  # fmt: skip
            raw = run_workers(plan, variant_worker, job)
            training = summarize_run(raw)["points"][0]["training"]
            rate, update = training["env_steps_per_s"], training["update_share"]
            rates[variant].append(rate)
            rows.append({"round": round_, "variant": variant, "training": training, "wall_s": raw["wall_s"]})
            print(
                f"round {round_ + 1} {variant:9s} {rate:10,.0f} env-steps/s, update {update:.0%} of an iteration "
                f"(run {raw['wall_s']:.0f} s)",
                flush=True,
            )
    medians = {v: statistics.median(r) for v, r in rates.items()}
    for variant, median in medians.items():
        print(f"median {variant:9s} {median:10,.0f} env-steps/s")
    if len(medians) == 2:
        print(f"compiled / as written: {medians['compiled'] / medians['as-written']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"task": args.task, "num_envs": args.num_envs, "workers": args.workers, "rounds": rows}, f
            )


if __name__ == "__main__":
    main()

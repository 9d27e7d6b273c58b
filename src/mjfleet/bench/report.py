"""Turn the workers' raw times into rates and ratios (mjfleet.bench.table prints them).

Conventions (also in docs/benchmarks.md):

- Every rate is in env-steps/s: policy steps of all environments of all workers. One env step is
  ``decimation`` physics steps; ``physics.world_steps_per_s`` counts those physics steps.
- A block's time is the slowest worker's; a rate is the best block's (``*_mean`` keeps the average over
  all blocks). Training rates come from whole PPO iterations (collection + update), best and mean.
- Ratios divide rates of the same run and environment count: ``vs_physics`` = rate / physics bound,
  scaling efficiency = rate with N workers / (N x rate with 1 worker).
- Shares (collection/update, all-reduce) add up the timed iterations of each worker and average the workers.
- ``cpu_time_env_steps_per_s`` divides by the process CPU time instead of wall time: what the worker would reach
  with its cores to itself. On a shared machine it is the stable figure; it equals the wall-clock rate on an idle
  machine with one thread per worker and understates it with several threads (CPU time adds up over threads).
"""

from __future__ import annotations

import statistics
from typing import Any

from mjfleet.runs.trouble import combine, describe, shares

MIB = 1024 * 1024
PHASES = ("physics", "env", "rollout", "training")
"""What bench times, in the order it times them (mjfleet.bench.measure, mjfleet.bench.phases)."""


def summarize_run(run: dict[str, Any], startup_override: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rates, ratios, memory and start-up of one launch (1 or N workers), from rank 0's gathered result."""
    ranks = run["ranks"]
    workers = run["workers"]
    points = []
    for index, first in enumerate(ranks[0]["points"]):
        per_rank = [r["points"][index] for r in ranks]
        points.append(_summarize_point(first, per_rank, workers))
    return {
        "workers": workers,
        "plan": run["plan"],
        "device": run["device"],
        "device_name": run["device_name"],
        "threads_per_worker": run["threads_per_worker"],
        "startup": startup_override or summarize_startup(run),
        "points": points,
    }


def summarize_startup(run: dict[str, Any], parent_ready_s: float | None = None) -> dict[str, Any]:
    """Start-up to the first env step: in one process, from its start; with workers, from the launch."""
    starts = [r["startup"] for r in run["ranks"]]
    compiled = max(s.get("modules_compiled", 0) for s in starts)
    out: dict[str, Any] = {
        "kernel_cache": "cold" if compiled else "warm",
        "modules_compiled": compiled,
        "build_s": max(s["build_s"] for s in starts),
        "worker_process_to_first_env_step_s": max(s["first_env_step_s"] for s in starts),
        # Where a worker's start-up goes: process start -> worker function (imports, unpickling), then the build.
        "worker_process_to_function_s": max(s["process_age_at_start_s"] for s in starts),
    }
    launch = [s.get("launch_to_first_env_step_s") for s in starts]
    if all(v is not None for v in launch):
        out["launch_to_first_env_step_s"] = max(launch)
        out["launch_to_worker_function_s"] = max(s["launch_to_worker_start_s"] for s in starts)
        out["parent_ready_s"] = parent_ready_s
        # What a fresh `train` would see: its own start-up before launching, then the launch.
        out["first_env_step_s"] = max(launch) + (parent_ready_s or 0.0)
    else:
        out["first_env_step_s"] = out["worker_process_to_first_env_step_s"]
    return out


def _summarize_point(first: dict[str, Any], per_rank: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    n = first["num_envs"]
    steps = first["steps_per_block"]
    out: dict[str, Any] = {
        "num_envs": n,
        "total_envs": n * workers,
        "decimation": first["decimation"],
        "build_s": max(p["build_s"] for p in per_rank),
    }
    physics = None
    for phase in ("physics", "env", "rollout"):
        key = f"{phase}_s"
        if key not in first:
            continue
        best, mean = _block_rates([p[key] for p in per_rank], workers * n * steps)
        entry: dict[str, Any] = {"env_steps_per_s": best, "env_steps_per_s_mean": mean}
        if f"{phase}_cpu_s" in first:
            entry["cpu_time_env_steps_per_s"] = _block_rates(
                [p[f"{phase}_cpu_s"] for p in per_rank], workers * n * steps
            )[0]
        if phase == "physics":
            entry["world_steps_per_s"] = best * first["decimation"]
            physics = best
        elif physics:
            entry["vs_physics"] = best / physics
        if phase == "env" and "env_physics_share" in first:
            entry["physics_share"] = statistics.fmean(p["env_physics_share"] for p in per_rank)
        if phase == "env" and first.get("step_is_cuda_graph"):
            entry["step_is_cuda_graph"] = True
        out[phase] = entry
    if first.get("iterations"):
        out["training"] = _summarize_training(per_rank, workers, first["steps_per_iteration"], physics)
    out["memory"] = _memory(per_rank)
    out["trouble"] = _trouble(per_rank)
    return out


def _trouble(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Physics trouble per phase that counted it, over all workers: {"env_steps", "record" (counts summed,
    `Metrics/` shares averaged over workers), "shares" (mjfleet.runs.trouble's names; only kinds that occurred)}.
    Training's records are already global (the runner reduces them), so rank 0's is taken."""
    out: dict[str, Any] = {}
    for phase in ("physics", "training"):
        found = [p["trouble"][phase] for p in per_rank if phase in p.get("trouble", {})]
        if phase == "training":
            found = found[:1]
        if not found:
            continue
        record = combine([t["record"] for t in found])
        env_steps = sum(t["env_steps"] for t in found)
        out[phase] = {"env_steps": env_steps, "record": record, "shares": shares(record, env_steps)}
    return out


def trouble_text(point: dict[str, Any]) -> str:
    """`physics: nan_resets 12 (0.30%); training: solver_limit 0.10%`, the trouble of one summarized env count;
    "" if there was none."""
    parts = []
    for phase, t in point.get("trouble", {}).items():
        text = describe(t["record"], t["env_steps"])
        if text:
            parts.append(f"{phase}: {text}")
    return "; ".join(parts)


def _block_rates(times_per_rank: list[list[float]], steps: int) -> tuple[float, float]:
    """(best, mean) rate over blocks; a block lasts as long as its slowest worker."""
    blocks = [max(ts) for ts in zip(*times_per_rank, strict=True)]
    return steps / min(blocks), steps * len(blocks) / sum(blocks)


def iteration_s(it: dict[str, float]) -> float:
    """An iteration's wall time: everything between two iterations' records (JSON written before 2026-11-23 08:40
    has only collection + update)."""
    return it.get("wall_s", it["collect_s"] + it["update_s"])


def _summarize_training(
    per_rank: list[dict[str, Any]], workers: int, steps_per_iteration: int, physics: float | None
) -> dict[str, Any]:
    iterations = [p["iterations"] for p in per_rank]
    total = workers * steps_per_iteration
    its = [max(iteration_s(it) for it in group) for group in zip(*iterations, strict=True)]
    collects = [max(it["collect_s"] for it in group) for group in zip(*iterations, strict=True)]
    out: dict[str, Any] = {
        "env_steps_per_s": total / min(its),
        "env_steps_per_s_mean": total * len(its) / sum(its),
        "iteration_s": min(its),
        "iterations_timed": len(its),
        "steps_per_iteration": total,
        "collection_env_steps_per_s": total / min(collects),
        "cpu_time_env_steps_per_s": (
            total / min(max(it["cpu_s"] for it in group) for group in zip(*iterations, strict=True))
            if all("cpu_s" in it for it in iterations[0])
            else None
        ),
        "collect_share": _share(iterations, "collect_s", ("collect_s", "update_s")),
        "update_share": _share(iterations, "update_s", ("collect_s", "update_s")),
        # rank 0's update of each timed iteration: (torch threads, seconds); on CPU the thread count is measured
        "updates": [[it.get("update_threads"), it["update_s"]] for it in iterations[0]],
    }
    rank0 = iterations[0]
    if all("gradient_steps" in it for it in rank0):  # SAC: gradient steps per second of update time
        update_s = sum(it["update_s"] for it in rank0)
        out["gradient_steps_per_s"] = (
            sum(it["gradient_steps"] for it in rank0) / update_s if update_s else None
        )
    if physics:
        out["vs_physics"] = out["env_steps_per_s"] / physics
    if workers > 1:
        out["gradient_reducer"] = per_rank[0].get("gradient_reducer")
        out["grad_allreduce_share_of_update"] = _share(iterations, "grad_allreduce_s", ("update_s",))
        out["grad_allreduce_share_of_iteration"] = _share(
            iterations, "grad_allreduce_s", ("collect_s", "update_s")
        )
    else:
        out["grad_allreduce_share_of_update"] = None
        out["grad_allreduce_share_of_iteration"] = None
    return out


def _share(iterations: list[list[dict[str, float]]], part: str, whole: tuple[str, ...]) -> float:
    """sum(part) / sum(whole) over one worker's iterations, averaged over workers."""
    shares = []
    for rank_its in iterations:
        denominator = sum(it[k] for it in rank_its for k in whole)
        shares.append(sum(it[part] for it in rank_its) / denominator if denominator > 0 else 0.0)
    return statistics.fmean(shares)


def _memory(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    rss = [p["peak_rss_bytes"] / MIB for p in per_rank]
    out: dict[str, Any] = {"peak_rss_mib_per_worker": rss, "peak_rss_mib_max": max(rss)}
    if "gpu_torch_peak_bytes" in per_rank[0]:
        out["gpu_torch_peak_mib_max"] = max(p["gpu_torch_peak_bytes"] for p in per_rank) / MIB
        warp_peaks = [p.get("gpu_warp_peak_bytes") for p in per_rank]
        known = [v for v in warp_peaks if v is not None]
        out["gpu_warp_mempool_peak_mib_max"] = max(known) / MIB if len(known) == len(warp_peaks) else None
    return out


def scaling(single: dict[str, Any], multi: dict[str, Any]) -> list[dict[str, Any]]:
    """Speed-up and efficiency of a multi-worker run over the 1-worker run, per environment count."""
    return scaling_over_rounds([(single, multi)])


def scaling_over_rounds(rounds: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Speed-up of the multi-worker run over the 1-worker run of each round (the two measured back to back), per
    environment count and phase: the median over the rounds with its range and every round's value, and the
    speed-up of the best figures of all rounds. One round of best-of-3 blocks on a shared 2-core VM ranged
    1.29x-2.33x over eight runs (docs/benchmarks.md), so a single speed-up cannot tell a regression from noise."""
    workers = rounds[0][1]["workers"]
    out = []
    for point in rounds[0][1]["points"]:
        n = point["num_envs"]
        pairs = [(_point(single, n), _point(multi, n)) for single, multi in rounds]
        pairs = [(base, p) for base, p in pairs if base is not None and p is not None]
        if not pairs:
            continue
        entry: dict[str, Any] = {"num_envs": n, "workers": workers, "rounds": len(pairs)}
        for phase in ("physics", "env", "rollout", "training"):
            if all(phase in base and phase in p for base, p in pairs):
                entry[phase] = _speedups(pairs, phase, "env_steps_per_s", workers)
                if all(base[phase].get("cpu_time_env_steps_per_s") and p[phase].get("cpu_time_env_steps_per_s")
                       for base, p in pairs):  # fmt: skip
                    cpu = _speedups(pairs, phase, "cpu_time_env_steps_per_s", workers)
                    entry[phase]["cpu_time_speedup"] = cpu["speedup"]
                    entry[phase]["cpu_time_efficiency"] = cpu["efficiency"]
        out.append(entry)
    return out


def _point(run: dict[str, Any], num_envs: int) -> dict[str, Any] | None:
    return next((p for p in run["points"] if p["num_envs"] == num_envs), None)


def _speedups(pairs: list[tuple[dict, dict]], phase: str, rate: str, workers: int) -> dict[str, Any]:
    each = [p[phase][rate] / base[phase][rate] for base, p in pairs]
    median = statistics.median(each)
    best = max(p[phase][rate] for _, p in pairs) / max(base[phase][rate] for base, _ in pairs)
    return {"speedup": median, "efficiency": median / workers, "speedups": each, "range": [min(each), max(each)],
            "best_speedup": best}  # fmt: skip


def progress_line(task: str, steps: int, point: dict[str, Any], workers: int) -> str:
    """One env count's rates as rank 0 measured them, printed while bench runs (the table comes at the end)."""
    n = point["num_envs"]
    parts = [f"{task}: {workers} x {n} envs"]
    for phase in ("physics", "env", "rollout"):
        times = point.get(f"{phase}_s")
        if times:
            parts.append(f"{phase} {workers * n * steps / min(times):,.0f}/s")
    iterations = point.get("iterations")
    if iterations:
        best = min(iteration_s(it) for it in iterations)
        parts.append(f"training {workers * point['steps_per_iteration'] / best:,.0f}/s")
    line = "  ".join(parts) + " (rank 0's view; env-steps/s)"
    trouble = trouble_text(point)  # a worker's point has the same "trouble" layout
    return f"{line}  trouble: {trouble}" if trouble else line

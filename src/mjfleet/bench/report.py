"""Turn the workers' raw times into rates and ratios, and print them as a table.

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

MIB = 1024 * 1024


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
    return out


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
    by_envs = {p["num_envs"]: p for p in single["points"]}
    out = []
    for point in multi["points"]:
        base = by_envs.get(point["num_envs"])
        if base is None:
            continue
        entry: dict[str, Any] = {"num_envs": point["num_envs"], "workers": multi["workers"]}
        for phase in ("physics", "env", "rollout", "training"):
            if phase in point and phase in base:
                speedup = point[phase]["env_steps_per_s"] / base[phase]["env_steps_per_s"]
                entry[phase] = {"speedup": speedup, "efficiency": speedup / multi["workers"]}
                cpu, cpu_base = (p[phase].get("cpu_time_env_steps_per_s") for p in (point, base))
                if cpu and cpu_base:
                    entry[phase]["cpu_time_speedup"] = cpu / cpu_base
                    entry[phase]["cpu_time_efficiency"] = cpu / cpu_base / multi["workers"]
        out.append(entry)
    return out


# ---------------------------------------------------------------------------------------------- table
def format_report(result: dict[str, Any]) -> str:
    """The human-readable report: header (machine, versions), one row per run and env count, scaling."""
    v = result["versions"]
    m = result["machine"]
    lines = [
        f"bench {result['task']}  {result['date']}",
        f"host: {m['cpu']}, {m['cores']} cores ({m['os']})",
        "versions: "
        + ", ".join(
            f"{k} {v[k]}" for k in ("mjfleet", "torch", "warp-lang", "mujoco-warp", "rsl-rl-lib", "python")
        ),
        f"settings: {result['settings']['steps']} steps x {result['settings']['repeats']} blocks per phase, "
        f"{result['settings']['iterations']} {result['settings'].get('algorithm', 'ppo').upper()} iterations "
        "(+1 warm-up); best block shown; "
        f"rates in env-steps/s of all workers; % = share of the physics bound",
    ]
    for run in result["runs"]:
        lines.append("")
        lines.append(f"{run['plan']} -- {run['device_name']}")
        lines.extend(_run_table(run))
        if run["device"] == "cpu":
            lines.extend(_cpu_time_lines(run))
        lines.extend(_gradient_step_lines(run))
        lines.append(_startup_line(run))
    for entry in result.get("scaling", []):
        if entry is result["scaling"][0]:
            lines.append("")
            lines.append(f"scaling, {entry['workers']} workers vs 1 (same envs per worker, same invocation):")
        parts = []
        for phase in ("physics", "env", "rollout", "training"):
            if phase in entry:
                s = entry[phase]
                parts.append(f"{phase} {s['speedup']:.2f}x ({s['efficiency']:.0%})")
        lines.append(f"  {entry['num_envs']} envs/worker: " + ", ".join(parts))
        cpu_parts = [
            f"{phase} {entry[phase]['cpu_time_speedup']:.2f}x ({entry[phase]['cpu_time_efficiency']:.0%})"
            for phase in ("physics", "env", "rollout", "training")
            if "cpu_time_speedup" in entry.get(phase, {})
        ]
        if cpu_parts:
            lines.append(f"  {entry['num_envs']} envs/worker, per CPU-second: " + ", ".join(cpu_parts))
    if result.get("auto"):
        a = result["auto"]
        sweep = ", ".join(f"{k}: {r:,.0f}" for k, r in sorted(a["sweep"].items(), key=lambda kv: int(kv[0])))
        source = "cached" if a.get("cached") else "measured now"
        lines.append("")
        lines.append(
            f"auto num-envs: {a['num_envs']} per worker ({source}; rollout env-steps/s by envs: {sweep})"
        )
    return "\n".join(lines)


def _sim_share(env: dict[str, Any]) -> str:
    return "1 graph" if env.get("step_is_cuda_graph") else _pct(env.get("physics_share"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _shares(t: dict[str, Any], first: str, second: str) -> str:
    if not t or t.get(first) is None:
        return "-"
    return f"{t[first]:.0%}/{t[second]:.0%}"


# (header, unit, width, cell)
_COLUMNS: tuple[tuple[str, str, int, Any], ...] = (
    ("envs/worker", "", 11, lambda p: f"{p['num_envs']:,}"),
    ("physics bound", "env-steps/s", 13, lambda p: _rate(p.get("physics"))),
    ("env random", "/s (% bound)", 16, lambda p: _rate_pct(p.get("env"))),
    ("sim share", "of env step", 11, lambda p: _sim_share(p.get("env", {}))),
    ("rollout", "/s (% bound)", 16, lambda p: _rate_pct(p.get("rollout"))),
    ("training", "/s (% bound)", 16, lambda p: _rate_pct(p.get("training"))),
    (
        "collect/update",
        "% of iter",
        14,
        lambda p: _shares(p.get("training", {}), "collect_share", "update_share"),
    ),
    (
        "all-reduce",
        "% upd/% iter",
        12,
        lambda p: _shares(
            p.get("training", {}), "grad_allreduce_share_of_update", "grad_allreduce_share_of_iteration"
        ),
    ),
    ("peak RSS", "MiB/worker", 10, lambda p: f"{p['memory']['peak_rss_mib_max']:,.0f}"),
)


def _run_table(run: dict[str, Any]) -> list[str]:
    rows = [
        "  ".join(f"{name:>{width}}" for name, _, width, _ in _COLUMNS),
        "  ".join(f"{unit:>{width}}" for _, unit, width, _ in _COLUMNS),
    ]
    for p in run["points"]:
        rows.append("  ".join(f"{cell(p):>{width}}" for _, _, width, cell in _COLUMNS))
        mem = p["memory"]
        if "gpu_torch_peak_mib_max" in mem:
            warp_mib = mem.get("gpu_warp_mempool_peak_mib_max")
            rows.append(
                f"{'':>11}  GPU memory per worker: torch peak {mem['gpu_torch_peak_mib_max']:,.0f} MiB"
                + (f", warp mempool peak {warp_mib:,.0f} MiB" if warp_mib is not None else "")
            )
    return rows


def _cpu_time_lines(run: dict[str, Any]) -> list[str]:
    """Rates over process CPU time: robust to other processes on a shared machine (see the module docstring)."""
    lines = []
    for p in run["points"]:
        parts = [
            f"{phase} {p[phase]['cpu_time_env_steps_per_s']:,.0f}"
            for phase in ("physics", "env", "rollout", "training")
            if p.get(phase, {}).get("cpu_time_env_steps_per_s")
        ]
        if parts:
            lines.append(f"{p['num_envs']:>11,}  per CPU-second: " + ", ".join(parts))
    return lines


def _gradient_step_lines(run: dict[str, Any]) -> list[str]:
    """SAC: gradient steps per second of update time, and the update's share of an iteration."""
    lines = []
    for p in run["points"]:
        training = p.get("training") or {}
        rate = training.get("gradient_steps_per_s")
        if rate is not None:
            lines.append(
                f"{p['num_envs']:>11,}  SAC: {rate:,.1f} gradient steps/s per worker; the update is "
                f"{training['update_share']:.0%} of an iteration"
            )
    return lines


def _rate(entry: dict[str, Any] | None) -> str:
    return "-" if not entry else f"{entry['env_steps_per_s']:,.0f}"


def _rate_pct(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "-"
    pct = entry.get("vs_physics")
    return f"{entry['env_steps_per_s']:,.0f}" + (f" ({pct:.0%})" if pct is not None else "")


def _startup_line(run: dict[str, Any]) -> str:
    s = run["startup"]
    cache = (
        "warm kernel cache"
        if s["kernel_cache"] == "warm"
        else f"cold kernel cache: {s['modules_compiled']} modules compiled"
    )
    if "launch_to_first_env_step_s" in s:
        imports = s["worker_process_to_function_s"]
        spawn = max(s["launch_to_worker_function_s"] - imports, 0.0)
        build = max(s["launch_to_first_env_step_s"] - s["launch_to_worker_function_s"], 0.0)
        parent = s.get("parent_ready_s")
        parts = [f"launcher start-up {parent:.1f} s"] if parent is not None else []
        parts += [
            f"agent + worker spawn {spawn:.1f} s",
            f"worker imports {imports:.1f} s",
            f"worker set-up (process group, task, warp) + build + first step {build:.1f} s",
        ]
        return f"start-up: {s['first_env_step_s']:.1f} s to the first env step ({' + '.join(parts)}; {cache})"
    return (
        f"start-up: {s['first_env_step_s']:.1f} s from process start to the first env step "
        f"(of which env + runner build {s['build_s']:.1f} s; {cache})"
    )

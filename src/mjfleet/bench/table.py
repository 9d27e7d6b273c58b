"""`bench`'s printed report: the rates and ratios of mjfleet.bench.report as one table per run, and scaling."""

from __future__ import annotations

from typing import Any

from mjfleet.bench.report import trouble_text


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
        rounds = result["settings"].get("rounds", 1)
        of_round = f", round {run['round']} of {rounds}" if rounds > 1 else ""
        lines.append(f"{run['plan']} -- {run['device_name']}{of_round}")
        lines.extend(_run_table(run))
        if run["device"] == "cpu":
            lines.extend(_cpu_time_lines(run))
        lines.extend(_gradient_step_lines(run))
        lines.extend(_trouble_lines(run))
        lines.append(_startup_line(run))
    for entry in result.get("scaling", []):
        if entry is result["scaling"][0]:
            lines.append("")
            rounds = entry.get("rounds", 1)
            how = (
                f"median of {rounds} alternated rounds [range], best figures' ratio"
                if rounds > 1
                else "one round"
            )
            lines.append(f"scaling, {entry['workers']} workers vs 1 (same envs per worker; {how}):")
        parts = []
        for phase in ("physics", "env", "rollout", "training"):
            if phase in entry:
                s = entry[phase]
                spread = ""
                if entry.get("rounds", 1) > 1:
                    spread = f" [{s['range'][0]:.2f}-{s['range'][1]:.2f}], best {s['best_speedup']:.2f}x"
                parts.append(f"{phase} {s['speedup']:.2f}x ({s['efficiency']:.0%}){spread}")
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


def _trouble_lines(run: dict[str, Any]) -> list[str]:
    """Physics trouble met while measuring (NaN resets, solver limits): rates over such steps mislead."""
    return [f"{p['num_envs']:>11,}  trouble: {text}" for p in run["points"] if (text := trouble_text(p))]


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

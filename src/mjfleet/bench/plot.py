"""`bench`'s picture: throughput per env count and phase, and with several workers the scaling and its spread.

Left: env-steps/s of every phase against the env count per worker (log-log), one line per phase and worker
count (1 worker dashed); with several rounds the line is the median and the error bar the range over rounds.
A `--num-envs auto` sweep measured in this run adds its rollout curve (dotted). Right, for a run over several
workers: the speed-up of N workers over 1 per env count and phase (grouped bars at the median over rounds,
error bars from the smallest to the largest round's), against the ideal N (dashed) and no gain (1).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from mjfleet import atomic
from mjfleet.bench.report import PHASES

COLORS = {"physics": "tab:blue", "env": "tab:orange", "rollout": "tab:green", "training": "tab:red"}


def plot_path(json_path: str | None, plot: str | None) -> Path | None:
    """Where the PNG goes: `--plot` if given, else beside a --json file (`out.json` -> `out.png`); none when the
    JSON goes to stdout (`--json -`) or is not written."""
    if plot:
        return Path(plot)
    if not json_path or json_path == "-":
        return None
    path = Path(json_path)
    png = path.with_suffix(".png")
    return png if png != path else path.with_name(path.name + ".png")


def draw(result: dict[str, Any], path: Path) -> Path:
    """Write the figure of a bench result (what --json holds) to `path` as PNG, atomically."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display needed, and none is opened
    import matplotlib.pyplot as plt

    scaling = result.get("scaling") or []
    fig, axes = plt.subplots(1, 2 if scaling else 1, figsize=(13 if scaling else 8, 5), squeeze=False)
    try:
        _throughput(axes[0][0], result)
        if scaling:
            _scaling(axes[0][1], scaling)
        device = result["runs"][0]["device_name"] if result["runs"] else "?"
        version = result.get("versions", {}).get("mjfleet", "?")
        fig.suptitle(f"bench {result['task']}: {device}, {result['date']}, mjfleet {version}", fontsize=11)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.staged(path) as tmp:  # the temporary name ends in .tmp: the format is said
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return path


def _throughput(ax, result: dict[str, Any]) -> None:
    by_workers: dict[int, list[dict[str, Any]]] = {}
    for run in result["runs"]:
        by_workers.setdefault(run["workers"], []).append(run)
    for workers, runs in sorted(by_workers.items()):
        sizes = sorted({p["num_envs"] for run in runs for p in run["points"]})
        for phase in PHASES:
            xs, mid, low, high = [], [], [], []
            for n in sizes:
                rates = [
                    p[phase]["env_steps_per_s"]
                    for run in runs
                    for p in run["points"]
                    if p["num_envs"] == n and phase in p
                ]
                if rates:
                    xs.append(n)
                    mid.append(statistics.median(rates))
                    low.append(mid[-1] - min(rates))
                    high.append(max(rates) - mid[-1])
            if not xs:
                continue
            label = f"{phase}, {workers} worker{'s' if workers > 1 else ''}"
            style = "--" if workers == 1 and len(by_workers) > 1 else "-"
            ax.errorbar(
                xs, mid, yerr=[low, high], fmt="o" + style, color=COLORS[phase], label=label, capsize=3
            )
    auto = result.get("auto") or {}
    if _auto_counts(auto):
        curve = sorted((int(n), rate) for n, rate in auto["sweep"].items())
        ax.plot(*zip(*curve, strict=True), ":", color="gray", marker=".", label="auto sweep (rollout)")
        ax.axvline(auto["num_envs"], color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    counts = sorted(
        {p["num_envs"] for run in result["runs"] for p in run["points"]} | set(_auto_counts(auto))
    )
    ax.set_xticks(counts, [f"{n:,}" for n in counts])  # the counts measured, not powers of two
    ax.minorticks_off()
    ax.set_xlabel("environments per worker")
    ax.set_ylabel("env-steps/s (all workers; best block)")
    ax.set_title("throughput per env count and phase")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _auto_counts(auto: dict[str, Any]) -> list[int]:
    """The env counts of a `--num-envs auto` sweep measured in this run (a cached one is not drawn)."""
    return [] if auto.get("cached") else [int(n) for n in auto.get("sweep", {})]


def _scaling(ax, scaling: list[dict[str, Any]]) -> None:
    workers = scaling[0]["workers"]
    rounds = max(entry.get("rounds", 1) for entry in scaling)
    phases = [phase for phase in PHASES if any(phase in entry for entry in scaling)]
    width = 0.8 / max(len(phases), 1)
    for i, phase in enumerate(phases):
        xs, mid, low, high = [], [], [], []
        for j, entry in enumerate(scaling):
            if phase in entry:
                s = entry[phase]
                xs.append(j + (i - (len(phases) - 1) / 2) * width)
                mid.append(s["speedup"])
                lo, hi = s.get("range", [s["speedup"], s["speedup"]])
                low.append(s["speedup"] - lo)
                high.append(hi - s["speedup"])
        ax.bar(xs, mid, width, yerr=[low, high], capsize=3, color=COLORS[phase], label=phase)
    ax.axhline(workers, color="black", linestyle="--", linewidth=1, label=f"ideal ({workers}x)")
    ax.axhline(1, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(scaling)), [f"{entry['num_envs']:,}" for entry in scaling])
    ax.set_xlabel("environments per worker")
    ax.set_ylabel(f"speed-up of {workers} workers over 1")
    spread = f"median of {rounds} rounds, bars: range" if rounds > 1 else "one round"
    ax.set_title(f"scaling ({spread})")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)

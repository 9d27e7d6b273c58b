"""What `play` prints at the end: the evaluation's summary and, with --baselines, one table of policies."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

from mjfleet.play.console import trouble_line, trouble_warnings


def print_summary(summary: dict[str, Any], label: str, output: pathlib.Path) -> None:
    """The summary of eval.json, for a reader: return, episode length, terms, metrics, outputs."""
    mode = (
        "deterministic"
        if summary["deterministic"]
        else "stochastic"
        if summary["policy"] == "checkpoint"
        else ""
    )
    if summary["viewer"] and summary["viewer"]["closed_early"]:
        print(f"viewer closed: the evaluation stopped after {summary['steps']} steps")
    if summary["episodes"] == 0:
        print(f"{summary['task']}, {label}: no episode finished")
    else:
        print(
            f"{summary['task']}, {label}{', ' + mode if mode else ''}: mean return {summary['mean_return']:.2f} "
            f"± {summary['std_return']:.2f} over {summary['episodes']} episodes, mean episode length "
            f"{summary['mean_episode_length']:.1f} / {summary['max_episode_length']}"
        )
    episode_terms = summary["episode_metrics"]
    if episode_terms:
        terms = [f"{k.split('/', 1)[-1]} {v:.4g}" for k, v in episode_terms.items()]
        for i in range(0, len(terms), 4):
            print("    " + "  ".join(terms[i : i + 4]))
    if summary["command"] is not None:
        print("command (vx, vy, wz): " + ", ".join(f"{v:g}" for v in summary["command"]))
    if summary["metrics"]:
        terms = [f"{k} {v:.4g}" for k, v in summary["metrics"].items()]
        print("metrics (mean over steps): " + "  ".join(terms))
    ended = ", ".join(f"{cause} {n}" for cause, n in summary["terminations"].items())
    print(f"episodes ended: {summary['episodes_ended']} ({ended})")
    trouble = trouble_line(summary)
    if trouble:
        print(f"physics trouble: {trouble}")
    for line in trouble_warnings(summary):
        print(line, file=sys.stderr, flush=True)
    if summary["baselines"]:
        print(comparison_table({"trained": summary, **summary["baselines"]}))
    if summary["action_percentiles"]:
        from mjfleet.play.action_range import format_report

        print(format_report(summary["action_percentiles"], mode or summary["policy"]))
    if summary["video"]:
        print(f"video: {summary['video']} ({summary['video_frames']} frames)")
    exported = summary["exported"]
    if exported and "onnx" in exported:  # else the export failed: play's one error line says why
        names = ", ".join(
            pathlib.Path(exported[k]).name
            for k in ("onnx", "torchscript", "metadata", "mjcf")
            if k in exported
        )
        print(
            f"exported: {pathlib.Path(exported['onnx']).parent} ({names}; ONNX matches torch to "
            f"{exported['max_abs_diff_vs_torch']:.1e})"
        )
    if summary["dumped"]:
        dumped = summary["dumped"]
        start = f"from {summary['initial_state']}" if summary["initial_state"] else "from the task's reset"
        print(f"dumped environment 0's first {dumped['steps']} steps ({start}) to {dumped['path']}")
    print(f"eval written to {output}")


def comparison_table(results: dict[str, dict[str, Any]]) -> str:
    """One row per policy: return, episode length, the task's metrics (simulator health left out), the episodes
    ended per cause (falls, for a legged robot) and in all, each as evaluated with the same seed and settings; and
    the physics trouble each met, when any did (a policy can drive the physics where another does not)."""
    first = next(iter(results.values()))
    metrics = [k for k in first["metrics"] if not k.startswith("sim_")]
    causes = sorted({c for r in results.values() for c in r["terminations"] if c != "time_out"})
    # an eval.json's baselines from before trouble was recorded have no counts: nothing to say of them
    trouble = {name: trouble_line(r) if "counts" in r else "" for name, r in results.items()}
    header = ["policy", "return", "ep. length", *metrics, *causes, "episodes ended"]
    text = {0}  # left-aligned: the names, and the trouble (words) where it is shown
    if any(trouble.values()):
        header.append("physics trouble")
        text.add(len(header) - 1)
    rows = [header]
    for name, r in results.items():
        row = [name, _number(r["mean_return"]), _number(r["mean_episode_length"])]
        row += [_number(r["metrics"].get(k)) for k in metrics]
        row += [str(r["terminations"].get(c, 0)) for c in causes]
        row.append(str(r["episodes_ended"]))
        rows.append(row + [trouble[name] or "-"] if len(text) > 1 else row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i in text else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"

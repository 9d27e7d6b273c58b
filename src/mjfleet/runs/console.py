"""Human-readable progress on rank 0's console."""

from __future__ import annotations

import datetime
from typing import Any


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def format_iteration(
    record: dict[str, Any], total_iterations: int, eta_s: float, style: str = "block"
) -> str:
    """One line (`compact`) or a short block (`block`) describing an iteration."""
    it = record["iteration"]
    eta = datetime.timedelta(seconds=int(max(eta_s, 0)))
    head = (
        f"it {it + 1}/{total_iterations}  steps {record['env_steps']:,}  "
        f"{record['env_steps_per_s']:,.0f} steps/s  return {_fmt(record['mean_return'])}  "
        f"ep_len {_fmt(record['mean_episode_length'])}  ETA {eta}"
    )
    if style == "compact":
        return head
    lines = [head]
    timing = f"collect {record['collect_time']:.2f}s  learn {record['learn_time']:.2f}s"
    losses = "  ".join(f"{k.split('/')[-1]} {_fmt(v)}" for k, v in record.items() if k.startswith("Loss/"))
    lines.append(f"    {timing}  {losses}  action_std {_fmt(record['Policy/action_std'])}")
    terms = [f"{k.split('/', 1)[-1]} {_fmt(v)}" for k, v in record.items() if k.startswith("Episode_")]
    for i in range(0, len(terms), 4):
        lines.append("    " + "  ".join(terms[i : i + 4]))
    return "\n".join(lines)

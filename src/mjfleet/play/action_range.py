"""`play --action-percentiles LOW HIGH`: the range of actions a policy uses, per action, and the SAC bounds from it.

A PPO policy's Gaussian is unbounded and uses a small, often lopsided part of the action space; SAC squashes its
actions into fixed bounds. Bounding each of SAC's actions by percentiles of a trained PPO policy's actions
(Raffin's recipe for SAC on massively parallel locomotion tasks, docs/sac.md) needs those percentiles: `play`
records the actions the evaluated policy takes and prints them as `--agent.sac.action-low/high` flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_ROWS = 1_000_000
"""Action vectors kept (the first ones): enough for tight percentiles, and a bounded memory at thousands of
environments."""


class ActionRecorder:
    """A policy that is `policy` and keeps a copy of the first `limit` action vectors it returns."""

    def __init__(self, policy: Callable[[Any], Any], limit: int = MAX_ROWS) -> None:
        self.policy = policy
        self.limit = limit
        self.rows = 0
        self._chunks: list[Any] = []

    def __call__(self, obs: Any) -> Any:
        actions = self.policy(obs)
        if self.rows < self.limit:
            # A copy: a policy may return the same tensor every step (zero actions) or one it overwrites.
            kept = actions[: self.limit - self.rows].detach().clone()
            self._chunks.append(kept)
            self.rows += kept.shape[0]
        return actions

    def reset(self, dones: Any = None) -> None:
        """The recorded policy's state (a recurrent actor's), reset as the evaluation resets environments."""
        reset = getattr(self.policy, "reset", None)
        if reset is not None:
            reset(dones)

    def percentiles(self, low: float, high: float) -> dict[str, Any]:
        """The `low` and `high` percentiles of every action over the recorded steps (JSON-ready)."""
        import numpy as np
        import torch

        if not self._chunks:
            raise ValueError("no actions were recorded")
        actions = torch.cat(self._chunks).double().cpu().numpy()
        lows, highs = np.percentile(actions, [low, high], axis=0)
        return {
            "percentiles": [low, high],
            "actions": self.rows,
            "low": [float(v) for v in lows],
            "high": [float(v) for v in highs],
        }


def sac_bound_flags(report: dict[str, Any]) -> str | None:
    """The `train --algorithm sac` flags that bound each action by the report's percentiles; None when some action
    did not vary (low == high, as printed), which SAC cannot use as a bound."""
    lows, highs = [_short(v) for v in report["low"]], [_short(v) for v in report["high"]]
    if any(float(lo) >= float(hi) for lo, hi in zip(lows, highs, strict=True)):
        return None
    return f"--agent.sac.action-low {' '.join(lows)} --agent.sac.action-high {' '.join(highs)}"


def format_report(report: dict[str, Any], mode: str) -> str:
    """What `play` prints: the percentiles per action and the flags, or why there are none."""
    low, high = report["percentiles"]
    lines = [
        f"actions of the {mode} policy, {_short(low)}th and {_short(high)}th percentiles over "
        f"{report['actions']:,} action vectors:",
        "    low  " + " ".join(_short(v) for v in report["low"]),
        "    high " + " ".join(_short(v) for v in report["high"]),
    ]
    flags = sac_bound_flags(report)
    if flags is None:
        lines.append("    no SAC bounds from them: some action took one value only")
    else:
        lines.append(f"SAC bounds from them: {flags}")
    return "\n".join(lines)


def _short(value: float) -> str:
    # Three significant digits: finer than the percentiles' own spread over a few thousand steps.
    return f"{value:.3g}"

"""What `play` shows while it evaluates (episodes done of N and their mean return so far) and the physics trouble
its evaluation met (`mjfleet.runs.trouble`), in its report and as a warning."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mjfleet.runs.trouble import TroubleWatch, describe, shares

READ_EVERY = 0.25
"""Seconds between two reads of the evaluation's device tensors for the bar: each read waits for the device, and a
bar redraws only 4 times a second anyway."""


class EpisodeBar:
    """`evaluate`'s `progress` hook: the episodes recorded so far (at most `episodes`) and their mean return, on a
    `mjfleet.progress.Progress`, read at most every `READ_EVERY` seconds."""

    def __init__(self, bar: Any, episodes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.bar, self.episodes, self.clock = bar, episodes, clock
        self._last_read = float("-inf")

    def __call__(self, count: Any, returns: Any) -> None:
        now = self.clock()
        if now - self._last_read < READ_EVERY:
            return
        self._last_read = now
        import torch

        recorded = torch.arange(returns.shape[1], device=returns.device)[None, :] < count[:, None]
        done = int(count.sum())
        if done:
            mean = float((returns * recorded).sum()) / done
            self.bar.update(done=min(done, self.episodes), status=f"mean return {mean:.2f}")

    def finish(self, result: dict[str, Any]) -> None:
        """The evaluation's own numbers, with its trouble, as the bar's last state (and a log's last line)."""
        parts = [f"mean return {result['mean_return']:.2f}" if result["episodes"] else "no episode finished"]
        parts.append(trouble_line(result))
        self.bar.update(done=result["episodes"], status="  ".join(p for p in parts if p))


def trouble_record(result: dict[str, Any]) -> dict[str, float]:
    """An `evaluate` result's trouble as a training record holds it: `Sim/nan_resets` summed over its steps and the
    `Metrics/sim_*` shares (means over its steps)."""
    record = {key: value for key, value in result["counts"].items() if key.startswith("Sim/")}
    record.update({f"Metrics/{k}": v for k, v in result["metrics"].items() if k.startswith("sim_")})
    return record


def trouble_shares(result: dict[str, Any]) -> dict[str, float]:
    """Each kind of trouble the evaluation met, as a share of its env steps (eval.json's `trouble`)."""
    return shares(trouble_record(result), result["env_steps"])


def trouble_line(result: dict[str, Any]) -> str:
    """`nan_resets 16 (25.00%)`: the evaluation's trouble for a console line; "" when it met none."""
    return describe(trouble_record(result), result["env_steps"])


def trouble_warnings(result: dict[str, Any], who: str = "play") -> list[str]:
    """A warning line for each kind of trouble above its share of the evaluation's env steps."""
    where = f"over {result['episodes']} episodes"
    return TroubleWatch(who).warnings(trouble_record(result), result["env_steps"], where=where)

"""What a sweep optimises: one number of the trial's independent evaluation (`play`'s eval.json), with a direction.

Names: a top-level number of eval.json (`mean_return`, `mean_episode_length`, `min_return`, ...), `metrics.<name>`
(the task's metrics, e.g. `metrics.lin_vel_error`, the velocity tracking error), `terminations.<cause>` (episodes
ended by that cause, e.g. `terminations.fell`) or `early_terminations` (every cause but the time limit: falls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mjfleet.errors import UsageError
from mjfleet.ranking import Direction, ended_early

TOP_LEVEL: dict[str, Direction] = {
    "mean_return": "maximize",
    "min_return": "maximize",
    "max_return": "maximize",
    "std_return": "minimize",
    "mean_episode_length": "maximize",
    "std_episode_length": "minimize",
    "early_terminations": "minimize",
}
"""eval.json's numbers that every task's evaluation reports, each with the direction that means better."""


@dataclass(frozen=True)
class Objective:
    """One number of eval.json and whether larger or smaller is better."""

    name: str
    direction: Direction

    @property
    def needs_preflight(self) -> bool:
        """Whether only an evaluation of the task can tell if it reports this name (its metrics and causes)."""
        return self.name not in TOP_LEVEL

    def value(self, summary: dict[str, Any]) -> float | None:
        """The objective in an eval.json summary; None when it does not report it (no episode ended, ...)."""
        if self.name == "early_terminations":
            return float(ended_early(summary.get("terminations"))[0])
        group, _, key = self.name.partition(".")
        if key and group in ("metrics", "terminations"):
            found = summary.get(group, {}).get(key)
            if found is None and group == "terminations" and "time_out" in summary.get(group, {}):
                return None
            return None if found is None else float(found)
        found = summary.get(self.name)
        return None if found is None or isinstance(found, bool) else float(found)

    def periodic_key(self) -> str | None:
        """The metrics.jsonl key of `train --eval-interval`'s evaluation that measures the same (for pruning)."""
        if self.name in ("mean_return", "mean_episode_length"):
            return f"Eval/{self.name}"
        if self.name.startswith("metrics."):
            return "Eval/" + self.name.split(".", 1)[1]
        return None

    def better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "maximize" else a < b


def parse_objective(name: str, direction: str) -> Objective:
    """The --objective and --direction flags, checked as far as is possible without an evaluation."""
    name = name.strip()
    group, dot, key = name.partition(".")
    if dot and group in ("metrics", "terminations") and key:
        default: Direction | None = "minimize" if group == "terminations" or "error" in key else None
    elif name in TOP_LEVEL:
        default = TOP_LEVEL[name]
    else:
        raise UsageError(
            f"--objective {name!r}: the evaluation does not report it; use one of {', '.join(TOP_LEVEL)}, "
            "metrics.<name> or terminations.<cause>"
        )
    if direction == "auto":
        if default is None:
            raise UsageError(
                f"--objective {name}: say whether larger is better with --direction maximize|minimize"
            )
        direction = default
    return Objective(name, direction)  # type: ignore[arg-type]


def check_reported(objective: Objective, summary: dict[str, Any], task: str) -> None:
    """A UsageError when an evaluation of `task` (`summary`, eval.json) does not report the objective's name."""
    group, _, key = objective.name.partition(".")
    reported = summary.get(group, {})
    if key in reported or (group == "terminations" and key == "time_out"):
        return
    names = [f"{group}.{k}" for k in reported] or ["none"]
    raise UsageError(
        f"--objective {objective.name}: {task}'s evaluation does not report it; its {group}: {', '.join(names)}"
    )


def usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value)

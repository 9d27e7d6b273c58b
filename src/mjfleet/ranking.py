"""Which evaluated policy is best, wherever mjfleet keeps or ranks one (train's model_best.pt, the sweep's report,
scripts/time_to_threshold.py --save-best): passing first, then falling least, then the objective.

A legged robot that falls forward moves, so an error measured over its short episodes can be lower than that of a
robot that never falls (a G1 that fell in 64 of 64 episodes within 28 steps had the lowest velocity error of its
run). Comparing the error first would keep the falling policy. `rank_key` compares, in this order:

1. passing (the caller's test: every judge within its fall limit and its threshold met) before not passing;
2. the share of episodes that ended before the time limit (falls), in steps of `FALLS_STEP_PERCENT` points:
   0-5 % is one step, 5-10 % the next, and so on. A policy whose falls are unknown comes after every known one;
3. the objective, in its direction (a return: higher is better; an error: lower is better).

Why steps and not "differs by more than 5 points": that pairwise test is not transitive, so neither a sort nor a
keep-the-best-so-far loop can use it (a chain 0 % -> 4 % -> 8 %, each within 5 points of the last with a better
error, would hand the best to a policy that falls 8 points more than one already seen). With fixed steps, two
shares more than 5 points apart always fall in different steps, so the one that falls clearly more never ranks
first; shares closer than that can still straddle a step's edge, and then the one that falls less wins.

Why 5 points: it is the fall limit a passing policy gets in the GPU stage (`--max-early-share 0.05`), so the first
step is "falls no more than a passing policy may". And it is about the binomial noise of an evaluation at the low
fall rates where the choice matters: one fall moves the share of a 32-episode evaluation by 3.1 points, of a
64-episode one by 1.6; at a true rate of 2 % a 64-episode share has a standard deviation of 1.75 points. Smaller
steps would let one or two falls of noise decide over a clear difference in error; larger ones would let a policy
that falls a tenth of the time more win on its error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, NamedTuple

Direction = Literal["maximize", "minimize"]

FALLS_STEP_PERCENT = 5
"""The width of a step of the early-ended share, in percentage points: shares further apart than this always
rank the one that falls less first, whatever the objective says."""

RULE = (
    "passing first (every judge within its fall limit and its threshold met), then the share of episodes that "
    f"ended early (falls) in steps of {FALLS_STEP_PERCENT} percentage points, then the objective "
    "(mjfleet.ranking.rank_key)"
)
"""The rule in words, for what records a choice (pretrained.json, model_best.pt, the sweep's report)."""


def ended_early(terminations: dict[str, int] | None) -> tuple[int, int]:
    """(episodes ended before the time limit, episodes ended) from an evaluation's `terminations` (cause -> count,
    `mjfleet.evaluation.evaluate`'s and eval.json's): every cause but `time_out` is an early end (a fall)."""
    causes = terminations or {}
    return sum(n for cause, n in causes.items() if cause != "time_out"), sum(causes.values())


class RankKey(NamedTuple):
    """`rank_key`'s answer; compared as a tuple, smaller is better."""

    failing: bool
    """Not passing."""
    falls_step: float
    """The worst judge's early-ended share in steps of FALLS_STEP_PERCENT points (inf: unknown)."""
    cost: float
    """The objective turned so that smaller is better (inf: none)."""


def rank_key(
    value: float | None,
    direction: Direction,
    falls: Iterable[tuple[int, int]] | None,
    passing: bool = False,
) -> RankKey:
    """The sort key of an evaluated policy, smaller is better: not `passing`, then the falls' step, then `value`
    in `direction`.

    `falls` holds (ended early, ended) of each evaluation the policy was judged by (one judge, or several: the
    worst share counts); None, an empty one or one where no episode ended is unknown and ranks after every known
    share. A `value` that is None or not finite ranks last within its step."""
    steps = [_falls_step(early, ended) for early, ended in falls or ()]
    step = max(steps) if steps else math.inf
    if value is None or not math.isfinite(value):
        cost = math.inf
    else:
        cost = -value if direction == "maximize" else value
    return RankKey(not passing, step, cost)


def _falls_step(early: int, ended: int) -> float:
    """The step of early / ended, counted exactly in integers (0.15 / 0.05 is 2.999... in floats)."""
    if ended <= 0:
        return math.inf
    return float((100 * early) // (FALLS_STEP_PERCENT * ended))

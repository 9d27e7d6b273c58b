"""Physics trouble, said where people look: on the console line of `train`, `play`, `bench` and the sweep's trials.

Environments log it per iteration (or per evaluation): `Sim/nan_resets` counts the worlds whose state went NaN and
were reset (every task, envs/base.py), and locomotion tasks log the share of steps whose contact buffers
overflowed (`Metrics/sim_overflow`) or whose constraint solver or line search stopped at its iteration limit
(`Metrics/sim_solver_limit`, `Metrics/sim_linesearch_limit`). Each is turned into a share of env steps; any
nonzero share is named on the line, and a share above `WARN_SHARE` gets one warning line naming its likely cause,
once per run and kind, so a log is not flooded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

WARN_SHARE = 0.001
"""A share of env steps above which trouble gets a warning: 0.1 %, well above the rare NaN a healthy run meets
(none in the quadruped's and G1's training runs), well below where it changes what a policy learns."""

COUNTED = {"Sim/nan_resets": "nan_resets"}
"""Keys that count events per iteration (summed over workers): divided by the iteration's env steps."""
SHARED = {
    "Metrics/sim_overflow": "contact_overflow",
    "Metrics/sim_solver_limit": "solver_limit",
    "Metrics/sim_linesearch_limit": "linesearch_limit",
}
"""Keys that are already a share of steps (a mean over steps and workers)."""

CAUSES = {
    "nan_resets": "the physics diverged and those worlds were reset (too large a timestep, stiff gains or "
    "armature 0 on a fast joint, interpenetrating geoms at the start)",
    "contact_overflow": "contacts did not fit the buffers (raise the task's nconmax/njmax)",
    "solver_limit": "the constraint solver stopped at its iteration limit (raise the model's <option iterations>)",
    "linesearch_limit": "the line search stopped at its limit (raise <option ls_iterations>)",
}


def shares(record: Mapping[str, float], env_steps: float) -> dict[str, float]:
    """Each kind of trouble in `record` as a share of `env_steps` (the steps the record covers); only kinds that
    occurred. A count with no steps to divide by is its count."""
    out: dict[str, float] = {}
    for key, name in COUNTED.items():
        count = record.get(key)
        if count and math.isfinite(count) and count > 0:
            out[name] = count / env_steps if env_steps > 0 else float(count)
    for key, name in SHARED.items():
        share = record.get(key)
        if share and math.isfinite(share) and share > 0:
            out[name] = share
    return out


def combine(records: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Records of equal numbers of env steps (a run's iterations, a phase's workers) as one record: counts summed,
    shares averaged, a record without a kind counting as none of its steps; only the kinds some record has."""
    out: dict[str, float] = {}
    for key in (*COUNTED, *SHARED):
        values = [float(r[key]) for r in records if key in r]
        if values:
            out[key] = sum(values) / (len(records) if key in SHARED else 1)
    return out


def describe(record: Mapping[str, float], env_steps: float) -> str:
    """`nan_resets 612 (0.62%)  solver_limit 0.10%`: the trouble in `record`, for a console line; "" if none."""
    parts = []
    for name, share in shares(record, env_steps).items():
        key = next((k for k, n in COUNTED.items() if n == name), None)
        count = f" {record[key]:.0f}" if key is not None else ""
        parts.append(f"{name}{count} ({share:.2%})" if count else f"{name} {share:.2%}")
    return "  ".join(parts)


@dataclass
class TroubleWatch:
    """Warns once per kind of trouble, the first time its share passes `WARN_SHARE`."""

    who: str = "train"
    threshold: float = WARN_SHARE
    warned: set[str] = field(default_factory=set)

    def warnings(self, record: Mapping[str, float], env_steps: float, where: str = "") -> list[str]:
        """The warning lines `record` calls for that were not given yet (`where`: e.g. "at iteration 12")."""
        lines = []
        for name, share in shares(record, env_steps).items():
            if share > self.threshold and name not in self.warned:
                self.warned.add(name)
                at = f" {where}" if where else ""
                lines.append(f"{self.who}: warning: {name} in {share:.2%} of env steps{at}: {CAUSES[name]}")
        return lines

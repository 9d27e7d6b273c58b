"""The swept parameters: `--param PATH=DIST`, each a `train` flag (PATH, e.g. `agent.ppo.learning-rate`)
with a distribution Optuna samples it from.

Distributions (written after the `=`):
  uniform:LOW:HIGH      a float in [LOW, HIGH]
  loguniform:LOW:HIGH   a float whose logarithm is uniform (learning rates); LOW > 0
  int:LOW:HIGH          an integer in [LOW, HIGH] (both included)
  intlog:LOW:HIGH       an integer on a log scale (batch sizes, layer widths); LOW > 0
  choice:A,B,C          one of the values, passed to the flag as written
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.errors import UsageError

Kind = Literal["uniform", "loguniform", "int", "intlog", "choice"]
KINDS: tuple[str, ...] = ("uniform", "loguniform", "int", "intlog", "choice")

RESERVED = {
    "seed", "agent.seed", "max-iterations", "agent.max-iterations", "max-env-steps", "run-name", "agent.run-name",
    "logs-root", "gpu-ids", "cpu-workers", "hosts", "resume", "load-run", "checkpoint",
}  # fmt: skip
"""Flags the sweep sets for every trial itself (seed, budget, placement, where the run goes)."""


@dataclass(frozen=True)
class Param:
    """One swept `train` flag and the distribution its values come from."""

    path: str
    """The flag without its dashes, as `train <Task> --help` spells it: `agent.ppo.learning-rate`."""
    kind: Kind
    low: float = 0.0
    high: float = 0.0
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.path

    def suggest(self, trial: Any) -> Any:
        """This parameter's value for an Optuna trial (a fixed one when the trial was enqueued with it)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.path, list(self.choices))
        if self.kind in ("int", "intlog"):
            return trial.suggest_int(self.path, int(self.low), int(self.high), log=self.kind == "intlog")
        return trial.suggest_float(self.path, self.low, self.high, log=self.kind == "loguniform")

    def distribution(self) -> Any:
        """The Optuna distribution (for a grid's search space and for reading a study back)."""
        import optuna.distributions as d

        if self.kind == "choice":
            return d.CategoricalDistribution(list(self.choices))
        if self.kind in ("int", "intlog"):
            return d.IntDistribution(int(self.low), int(self.high), log=self.kind == "intlog")
        return d.FloatDistribution(self.low, self.high, log=self.kind == "loguniform")

    def grid_values(self) -> list[Any]:
        """Every value a grid search tries: the choices, or each integer of an int range."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind in ("int", "intlog"):
            return list(range(int(self.low), int(self.high) + 1))
        raise UsageError(
            f"--param {self.path}: --sampler grid needs choice: or int: values, not a continuous {self.kind} range"
        )

    def probe_values(self) -> list[str]:
        """Values that together exercise the flag's type: both bounds, or every choice (checked before a trial)."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind in ("int", "intlog"):
            return [str(int(self.low)), str(int(self.high))]
        return [format_value(self.low), format_value(self.high)]

    def flags(self, value: Any) -> list[str]:
        """The `train` arguments that set this parameter to `value`."""
        return [self.flag, format_value(value)]


def format_value(value: Any) -> str:
    """A value as a command-line argument (floats in full precision, so the run's command line reproduces it)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_param(text: str) -> Param:
    """`PATH=KIND:...` -> a Param; anything malformed is a UsageError naming the parameter."""
    path, sep, spec = text.partition("=")
    path = path.strip().lstrip("-")
    if not sep or not path or not spec:
        raise UsageError(
            f"--param {text!r}: write PATH=DISTRIBUTION, e.g. agent.ppo.learning-rate=loguniform:1e-4:1e-2"
        )
    if path.replace("_", "-") in RESERVED:
        raise UsageError(
            f"--param {path}: the sweep sets this flag itself (seeds: --seeds/--seed; budget: --iterations)"
        )
    kind, _, rest = spec.partition(":")
    if kind not in KINDS:
        raise UsageError(f"--param {path}: unknown distribution {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "choice":
        choices = tuple(c.strip() for c in rest.split(","))
        if not rest or any(c == "" for c in choices):
            raise UsageError(f"--param {path}: write choice:A,B,C (no empty values), got {spec!r}")
        if len(set(choices)) != len(choices):
            raise UsageError(f"--param {path}: a value is listed twice in {spec!r}")
        return Param(path, "choice", choices=choices)
    bounds = rest.split(":")
    if len(bounds) != 2:
        raise UsageError(f"--param {path}: write {kind}:LOW:HIGH, got {spec!r}")
    try:
        low, high = (int(b) for b in bounds) if kind in ("int", "intlog") else (float(b) for b in bounds)
    except ValueError:
        number = "integers" if kind in ("int", "intlog") else "numbers"
        raise UsageError(f"--param {path}: {kind} bounds must be {number}, got {spec!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise UsageError(f"--param {path}: needs LOW < HIGH (finite), got {spec!r}")
    if kind in ("loguniform", "intlog") and low <= 0:
        raise UsageError(f"--param {path}: {kind} needs LOW > 0, got {spec!r}")
    return Param(path, kind, float(low), float(high))  # type: ignore[arg-type]


def parse_params(texts: tuple[str, ...] | list[str]) -> list[Param]:
    params = [parse_param(t) for t in texts]
    paths = [p.path.replace("_", "-") for p in params]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        raise UsageError(f"--param {twice[0]} is given twice")
    return params

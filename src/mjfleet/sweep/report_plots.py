"""The report's plots: learning curves per configuration (IQM over seeds with a 95% bootstrap band) and the
parameters' importances (Optuna's PED-ANOVA evaluator: no extra dependency, works from a handful of trials)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mjfleet.sweep.stats import iqm_over_steps
from mjfleet.sweep.trial import read_metrics

CURVES_SHOWN = 6
"""Configurations drawn: the best ranked ones and the worst, so that the figure stays readable."""


def run_curve(chain: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(env steps, mean return) of a seed's run, continuations appended after the iterations they resumed from."""
    records: dict[int, dict[str, Any]] = {}
    for run_dir in chain:
        for r in read_metrics(Path(run_dir)):
            records[int(r["iteration"])] = r
    rows = [records[i] for i in sorted(records) if records[i].get("mean_return") is not None]
    return np.array([r["env_steps"] for r in rows], dtype=float), np.array(
        [r["mean_return"] for r in rows], dtype=float
    )


def plot_learning_curves(results: list[Any], path: Path) -> str | None:
    """Training mean return against environment steps, per configuration: IQM over its seeds and a 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.values]
    if len(shown) > CURVES_SHOWN:
        shown = shown[: CURVES_SHOWN - 1] + shown[-1:]
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = 0
    for r in shown:
        curves = [run_curve(r.runs[s]) for s in r.values if s in r.runs]
        curves = [c for c in curves if len(c[0])]
        if not curves:
            continue
        n = min(len(c[0]) for c in curves)
        steps = np.mean([c[0][:n] for c in curves], axis=0)
        mid, low, high = iqm_over_steps(np.array([c[1][:n] for c in curves]))
        values = ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in r.params.items())
        label = f"#{r.rank} config {r.config}" + (f": {values}" if values else f" ({len(curves)} seeds)")
        ax.plot(steps, mid, label=label)
        ax.fill_between(steps, low, high, alpha=0.2)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("environment steps")
    ax.set_ylabel("training mean return (IQM over seeds, 95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def plot_importances(study: Any, path: Path) -> str | None:
    """A bar per parameter: its share of the objective's variation among the completed trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    try:
        # "Parameter importances will be equal": the figure shows that; the sweep's log need not.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            importances = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
            )
    except (RuntimeError, ValueError):  # fewer completed trials or distinct values than it needs
        return None
    if not importances:
        return None
    fig, ax = plt.subplots(figsize=(6, 1 + 0.5 * len(importances)))
    names = list(importances)
    ax.barh(names[::-1], [importances[n] for n in names][::-1])
    ax.set_xlabel("importance (PED-ANOVA)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)

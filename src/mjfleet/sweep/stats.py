"""Results over seeds, as rliable reports them (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice",
2021): the interquartile mean (IQM) and a 95% percentile confidence interval from a stratified bootstrap.

Written here with numpy rather than imported: rliable 1.2.0 resolves with this project's pins, but brings 14 more
packages (arch, statsmodels, scipy, pandas, seaborn, formulaic, patsy, absl-py, ...; `uv pip compile` on
2026-11-28) into every install for the two functions a sweep needs of it. The definitions are rliable's: IQM = scipy's trim_mean(x, 0.25) (the mean of the middle half; with fewer than four runs
nothing is trimmed, so it is the mean), and the bootstrap resamples runs with replacement within each task
(stratum) independently, then takes the 2.5th and 97.5th percentiles of the statistic over the resamples.
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
"""rliable's default number of bootstrap resamples."""
ONE_SEED = "1 seed: no interval"
"""What a configuration with one completed seed shows instead of an interval: a bootstrap of one value can only
return that value, and [x, x] would read as certainty."""


def iqm(scores: np.ndarray) -> float:
    """The interquartile mean of every score (runs x tasks, or a flat list of runs)."""
    flat = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    cut = int(0.25 * len(flat))
    return float(flat[cut : len(flat) - cut].mean())


def _iqm_rows(rows: np.ndarray) -> np.ndarray:
    """`iqm` of every row at once (the bootstrap's resamples)."""
    ordered = np.sort(rows, axis=1)
    cut = int(0.25 * rows.shape[1])
    return ordered[:, cut : rows.shape[1] - cut].mean(axis=1)


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic=iqm,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The `confidence` percentile interval of `statistic` over bootstrap resamples of `scores` (runs x tasks;
    a 1-D array is one task): each resample draws as many runs as there are, with replacement, per task."""
    data = np.asarray(scores, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    runs, tasks = data.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, runs, size=(resamples, runs, tasks))
    resampled = np.take_along_axis(data[None, :, :].repeat(resamples, axis=0), picks, axis=1)
    values = (
        _iqm_rows(resampled.reshape(resamples, -1))
        if statistic is iqm
        else np.array([statistic(r) for r in resampled])
    )
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def seeds_interval(scores: np.ndarray) -> tuple[float, float] | None:
    """The 95% bootstrap interval of the IQM over the seeds' `scores`; None with fewer than two (no spread to
    resample)."""
    data = np.asarray(scores, dtype=np.float64)
    return stratified_bootstrap_ci(data) if data.shape[0] > 1 else None


def interval_text(ci: tuple[float, float] | None, seeds: int) -> str:
    """`[low, high]`, ONE_SEED for a single completed seed, `-` for none."""
    if ci is not None:
        return f"[{ci[0]:.4g}, {ci[1]:.4g}]"
    return ONE_SEED if seeds == 1 else "-"


def iqm_over_steps(
    curves: np.ndarray, seed: int = 0, resamples: int = 500
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step of `curves` (runs x steps): the IQM over runs and its 95% bootstrap interval (low, high)."""
    mid = np.array([iqm(curves[:, i]) for i in range(curves.shape[1])])
    bands = np.array(
        [
            stratified_bootstrap_ci(curves[:, i], seed=seed, resamples=resamples)
            for i in range(curves.shape[1])
        ]
    )
    return mid, bands[:, 0], bands[:, 1]

"""Rank 0's outputs: the run directory, params, metrics, checkpoints."""

from mjfleet.runs.metrics import MetricsWriter
from mjfleet.runs.run_dir import RunDir

__all__ = ["MetricsWriter", "RunDir"]

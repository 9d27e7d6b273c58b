"""Rank 0's outputs: the run directory, params, metrics, checkpoints, plots, videos."""

from mjfleet.runs.checkpoints import Retention, find_checkpoint, read_checkpoint
from mjfleet.runs.metrics import MetricsWriter
from mjfleet.runs.run_dir import RunDir

__all__ = ["MetricsWriter", "Retention", "RunDir", "find_checkpoint", "read_checkpoint"]

"""Shared test setup: one warp kernel cache for the whole run (and every subprocess it starts)."""

import os
import pathlib

# Warp compiles kernels on first use (25-60 s per model on 2 cores): every test, and every worker or CLI process a
# test starts, shares one cache. Set before warp is imported anywhere.
os.environ.setdefault("WARP_CACHE_PATH", str(pathlib.Path(__file__).resolve().parents[1] / ".warp_cache"))
os.environ.setdefault("MJFLEET_WARP_VERBOSE", "")

import warp as wp  # noqa: E402

wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING

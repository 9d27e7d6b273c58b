"""Warp's console output: keep its start-up lines off the console of every command and worker."""

from __future__ import annotations

import os
import sys
import tempfile

NO_DRIVER_WARNING = b"Could not find or load the NVIDIA CUDA driver"
"""The line warp's native start-up prints on every machine without a CUDA driver (the commands say "no CUDA GPU
found" themselves where the device matters)."""


def quiet_warp() -> None:
    """Keep warp's start-up banner, its no-CUDA-driver warning and per-module compile lines off the console unless
    asked for (MJFLEET_WARP_VERBOSE)."""
    import warp as wp

    if os.environ.get("MJFLEET_WARP_VERBOSE"):
        return
    wp.config.log_level = wp.LOG_WARNING
    if _cuda_driver_loadable():
        # A driver is there: warp has no such line to print, and it initialises when first used (early, it
        # would hold a CUDA context on every GPU in the launching process too). Without one, wp.init() below is
        # a no-op when warp is initialised already.
        return
    # The native library writes to file descriptor 2 directly: catch that in a file, pass on all but the line.
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            wp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().splitlines(keepends=True):
                if NO_DRIVER_WARNING not in line:
                    os.write(2, line)


def _cuda_driver_loadable() -> bool:
    """Whether the NVIDIA driver library loads here (loading it creates no CUDA context)."""
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False

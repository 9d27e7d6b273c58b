"""What a benchmark ran on and what it cost: device names, versions, process age, memory, kernel cache."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from pathlib import Path

from mjfleet.launch.devices import usable_cores
from mjfleet.runs.provenance import versions  # noqa: F401 - the libraries a result depends on, as a run records them


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (e.g. "AMD EPYC 7B13"), else the platform's guess."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: str) -> str:
    """Human name of a torch device string: the GPU's name for cuda:<i>, the CPU model for cpu."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()


def machine() -> dict[str, object]:
    """The host the benchmark was launched from."""
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "os": f"{platform.system()} {platform.release()}",
    }


def seconds_since_process_start() -> float:
    """How long this process has existed (Linux: from /proc; elsewhere: since this module was imported)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
        start_ticks = int(raw[raw.rfind(")") + 2 :].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError, IndexError):
        return time.perf_counter() - _IMPORTED_AT


_IMPORTED_AT = time.perf_counter()


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window: Linux (4.0+) resets the high-water mark VmHWM to the current RSS when "5" is
    written to /proc/self/clear_refs. False where that is not possible (the peak then counts from process start)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident memory of this process since `reset_peak_rss` (VmHWM), else since it started (ru_maxrss:
    KiB on Linux, bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def kernel_cache_dir() -> Path | None:
    """Warp's kernel cache directory for this warp version (initialises warp)."""
    import warp as wp

    wp.init()
    path = wp.config.kernel_cache_dir
    return Path(path) if path else None


def cached_modules() -> set[str]:
    """Names of the compiled modules in warp's kernel cache; new names after a build mean it compiled."""
    path = kernel_cache_dir()
    if path is None or not path.is_dir():
        return set()
    return {entry.name for entry in path.iterdir() if entry.name.startswith("wp_")}


def warp_mempool_high(device: str) -> int | None:
    """Warp's memory pool high-water mark on `device` in bytes; None where warp keeps none (CPU)."""
    import warp as wp

    try:
        return int(wp.get_mempool_used_mem_high(device))
    except (RuntimeError, ValueError):
        return None

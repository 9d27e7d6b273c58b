"""`--num-envs auto`: the per-worker environment count where throughput stops growing, measured once and cached.

The sweep doubles the environment count from a start value and measures rollout throughput (policy inference
+ env step, the part of training that grows with the environment count) on one worker with the thread count
the real run gives each worker. It stops after `FLAT_DOUBLINGS` doublings in a row that each gain less than
`MIN_GAIN` (one flat step may be noise on a shared machine), at the cap, or when a size no longer fits in
memory, and picks the smallest count within `WITHIN_BEST` of the best rate seen.
Results are cached per task, device, threads per worker, library versions and task settings in a small JSON
file, shared by every bench on the machine: each update holds a lock file beside it while it reads, adds its
entry and writes (atomically), so two benches finishing together both keep their entries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock

from mjfleet import atomic
from mjfleet.environ import cache_dir

MIN_GAIN = 1.10
"""A doubling that gains less than 10% means throughput has stopped growing."""
FLAT_DOUBLINGS = 2
WITHIN_BEST = 0.90
"""Pick the smallest count that reaches 90% of the best rate: more environments cost memory and
make each PPO iteration longer for almost no throughput."""
START = {"cpu": 64, "cuda": 1024}
CAP = {"cpu": 16384, "cuda": 131072}


def cache_path() -> Path:
    """bench_num_envs.json in mjfleet's user cache (`mjfleet.environ.cache_dir`)."""
    return cache_dir() / "bench_num_envs.json"


def cache_key(task: str, device_name: str, threads: int, versions: dict[str, str], config: str = "") -> str:
    """The cache entry's name; `config` a digest of the task's settings (`config_digest`)."""
    # the labels of the keys cached before versions were named by distribution: those entries stay valid
    labels = {"mjfleet": "mjfleet", "warp": "warp-lang", "mujoco_warp": "mujoco-warp", "torch": "torch"}
    libs = ",".join(f"{label}={versions[dist]}" for label, dist in labels.items())
    return f"{task}|{device_name}|threads={threads}|{libs}" + (f"|config={config}" if config else "")


def config_digest(*configs: Any) -> str:
    """A short digest of dataclass configs (the env and agent settings the sweep ran with, `num_envs` aside):
    another decimation, rollout length or network measures, and is cached, separately."""
    fields = []
    for cfg in configs:
        values = dataclasses.asdict(cfg)
        values.pop("num_envs", None)
        fields.append(values)
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def load(key: str) -> dict[str, Any] | None:
    try:
        return json.loads(cache_path().read_text()).get(key)
    except (OSError, ValueError):
        return None


def store(key: str, entry: dict[str, Any]) -> None:
    """Add (or replace) one entry of the cache, keeping every other bench's entries."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Readers need no lock (the file is replaced whole); writers do, or one's read-modify-write loses another's.
    with filelock.FileLock(path.with_name(path.name + ".lock")):
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            entries = {}
        entries[key] = entry
        atomic.write_text(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")


def sweep(measure: Callable[[int], float], device_type: str) -> dict[str, Any]:
    """Measure `measure(num_envs) -> env-steps/s` at doubling counts; returns the pick and the curve."""
    rates: dict[int, float] = {}
    n = START.get(device_type, START["cpu"])
    cap = CAP.get(device_type, CAP["cpu"])
    previous = None
    flat = 0
    while n <= cap:
        try:
            rate = measure(n)
        except (MemoryError, RuntimeError) as exc:
            text = str(exc).lower()
            if rates and (isinstance(exc, MemoryError) or "memory" in text or "allocate" in text):
                break  # this size no longer fits: the curve ends at the previous one
            raise
        rates[n] = rate
        flat = flat + 1 if previous is not None and rate < MIN_GAIN * previous else 0
        if flat >= FLAT_DOUBLINGS:
            break
        previous = max(rate, previous or 0.0)
        n *= 2
    return {
        "num_envs": pick(rates),
        "sweep": {str(k): v for k, v in rates.items()},
        "date": time.strftime("%F"),
    }


def pick(rates: dict[int, float]) -> int:
    """The smallest count whose rate is within WITHIN_BEST of the best."""
    best = max(rates.values())
    return min(n for n, r in rates.items() if r >= WITHIN_BEST * best)

"""A cold start says what it is doing: one line while warp compiles a model's kernels, nothing on a warm cache."""

import os
import subprocess
import sys

BUILD_CARTPOLE = """
from mjfleet.cli.common import quiet_warp
quiet_warp()  # as the commands do: no warp banner, no per-module lines
from mjfleet.assets import asset_path
import mujoco
from mjfleet.sim import Simulation
Simulation(mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml"))), 2)
print("built")
"""
NOTICE = "compiling simulation kernels for cartpole: first run on this machine, cached afterwards"


def build(cache, **env: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", BUILD_CARTPOLE],
        env={**os.environ, "WARP_CACHE_PATH": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_a_cold_kernel_cache_announces_the_compile_once_and_a_warm_one_is_silent(tmp_path):
    cache = tmp_path / "warp_cache"  # fresh: every kernel of the model compiles (~30-60 s on 2 cores)
    cold = build(cache)
    assert cold[0] == NOTICE and len(cold) == 3, cold
    assert cold[1].startswith("simulation kernels for cartpole compiled in ") and cold[1].endswith(" s")
    assert cold[2] == "built"
    assert build(cache) == ["built"]  # the same cache, now warm

"""A cold start says what it is doing: one line while warp compiles a model's kernels, nothing on a warm cache."""

import sys

import pytest
from helpers import run_cli

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
    result = run_cli(sys.executable, "-c", BUILD_CARTPOLE, env={"WARP_CACHE_PATH": str(cache), **env}, timeout=600,
                     check=True)  # fmt: skip
    return result.stdout.splitlines()


# slow: every kernel of a model compiled from nothing, and two fresh processes; .ci/run's second step runs it.
@pytest.mark.slow
def test_a_cold_kernel_cache_announces_the_compile_once_and_a_warm_one_is_silent(tmp_path):
    cache = tmp_path / "warp_cache"  # fresh: every kernel of the model compiles (~30-60 s on 2 cores)
    cold = build(cache)
    assert cold[0] == NOTICE and len(cold) == 3, cold
    assert cold[1].startswith("simulation kernels for cartpole compiled in ") and cold[1].endswith(" s")
    assert cold[2] == "built"
    assert build(cache) == ["built"]  # the same cache, now warm

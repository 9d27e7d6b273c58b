"""The whole environment step — warp physics and the task's torch code — recorded once and replayed as one CUDA graph.

On a GPU an environment step is a few physics kernels and a few hundred tiny torch kernels (observations,
rewards, terminations, masked resets, episode logs). Launched one by one from Python, the torch side costs more
than the physics at thousands of environments: the GPU waits for the CPU. Recorded into one CUDA graph, a step is
one launch.

How: torch records the graph (`torch.cuda.graph`, so its random numbers advance on every replay and its memory
stays reserved for the graph), warp launches into the same capturing stream, and `wp.capture_begin(external=True)`
tells warp that a capture is under way, so mujoco_warp's solver loop becomes a conditional graph node instead of
a loop on the host. `Simulation` launches its kernels directly (not its own captured graphs) while a capture is
under way.

Memory: torch gives a graph's allocations its private pool only while the stream's capture sequence is the one
torch began. Recording the solver loop's body, warp pauses that capture and resumes it into the same graph,
which is a new capture sequence: without more, every tensor the step allocates after the physics (observations,
rewards, their temporaries) would come from the general pool, and be handed out again after the capture while
replays keep writing there. So the capture also routes this thread's allocations into a pool kept with the graph
(`torch.cuda.use_mem_pool`), whatever the capture sequence, and warp is told torch's capture mode ("global").
Torch refuses that pool being the graph's own private one (it would be routed twice), so there are two: the
graph's, for what the first capture sequence allocates, and the kept one, for the rest.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import torch
import warp as wp

log = logging.getLogger(__name__)


class CapturedFunction:
    """`fn(x)` recorded into one CUDA graph; calling it copies `x` into the graph's input and replays.

    The outputs are the graph's own tensors: every replay overwrites them in place (callers copy what they keep).
    """

    def __init__(self, fn: Callable[[torch.Tensor], Any], example: torch.Tensor) -> None:
        device = example.device
        self.input = example.clone()
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device=device)
        wp_device = wp.get_device(str(device))
        # Kept with the graph: its replays write into this pool's memory (what is allocated after warp resumes
        # the capture).
        self.pool = torch.cuda.MemPool() if hasattr(torch.cuda, "use_mem_pool") else None
        with (
            torch.cuda.device(device),
            wp.ScopedDevice(wp_device),
            wp.ScopedStream(wp.stream_from_torch(stream)),
        ):
            # The graph keeps its own private pool for what the capture sequence torch began allocates; `pool` is
            # a second one, for the rest (torch refuses to route one pool twice: "already recording to mempool").
            with torch.cuda.graph(self.graph, stream=stream, capture_error_mode="global"):
                routed = (
                    torch.cuda.use_mem_pool(self.pool, device)
                    if self.pool is not None
                    else contextlib.nullcontext()
                )
                with routed:
                    wp.capture_begin(
                        device=wp_device,
                        force_module_load=False,
                        external=True,
                        capture_mode=wp.CaptureMode.GLOBAL,  # the mode torch began the capture in
                    )
                    try:
                        self.output = fn(self.input)
                    finally:
                        wp.capture_end(device=wp_device)

    def __call__(self, x: torch.Tensor) -> Any:
        self.input.copy_(x)
        self.graph.replay()
        return self.output


def try_capture(
    fn: Callable[[torch.Tensor], Any], example: torch.Tensor, what: str
) -> CapturedFunction | None:
    """Capture `fn`, or return None (and say why, once) when some operation in it cannot be recorded."""
    try:
        return CapturedFunction(fn, example)
    except Exception as exc:  # an optimisation: run eagerly instead, loudly
        torch.cuda.synchronize(example.device)
        log.warning("%s could not be captured as a CUDA graph (%s); launching it op by op", what, exc)
        return None

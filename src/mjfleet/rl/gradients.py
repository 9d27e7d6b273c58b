"""The averaged-gradient step every algorithm shares: where mjfleet averages gradients across workers.

An algorithm computes its losses' gradients on its own worker's data; `AveragedGradients` turns them into the
step every rank takes alike:

- every trained parameter's `.grad` is a view of ONE flat buffer (named slices per network, plus optional extra
  slots for numbers that must be averaged with the gradients, e.g. PPO's minibatch KL): backward writes into it in
  place, zeroing is one operation, and the reducer sends it as it is;
- after every minibatch / gradient step the reducer (`mjfleet.fleet.reduce`: all-reduce, all-gather, shared memory
  or none) averages that buffer in ONE collective, so every rank holds the same gradients;
- optionally accumulated first over `sync_period` minibatches (one collective per group);
- each network is clipped to its own norm (rsl_rl's `clip_grad_norm_` per network, on its slice);
- one fused optimiser step (torch's fused Adam/AdamW kernel), over every network or only the named ones;
- the start of training broadcasts rank 0's parameters, and observation normalisers learn through the same
  reducer's sums (`mjfleet.rl.normalizer`);
- on CUDA, a gradient computation can be recorded once as a CUDA graph and replayed (`record`,
  `RecordedGradients`), falling back to the plain computation, loudly and once, if recording fails.

Every exchange between workers goes through `reducer`, so the runner's statistics and stop signal use
`sum_across_workers` too. tests/test_gradients.py checks this step against one process holding every rank's data,
for every reducer, with 2 real worker processes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

import torch

from mjfleet.errors import first_line
from mjfleet.fleet.reduce import Reducer, choose_reducer
from mjfleet.rl.normalizer import update_normalizer

log = logging.getLogger(__name__)

T = TypeVar("T")
G = TypeVar("G")

WARMUP_RUNS = 3
"""Runs on a side stream before recording (PyTorch's recipe: lazy initialisation happens outside the capture)."""


class AveragedGradients:
    """The flat gradient buffer of named networks, averaged across workers, clipped per network, stepped by one
    fused optimiser. `optimizer` must hold exactly the parameters in `networks`."""

    def __init__(
        self,
        networks: Mapping[str, Iterable[torch.nn.Parameter]],
        optimizer: torch.optim.Optimizer,
        extra_slots: int = 0,
        sync_period: int = 1,
    ) -> None:
        self.params = {name: [p for p in params if p.requires_grad] for name, params in networks.items()}
        sizes = {name: sum(p.numel() for p in params) for name, params in self.params.items()}
        device = next(p for params in self.params.values() for p in params).device
        self.flat = torch.zeros(sum(sizes.values()) + extra_slots, device=device)
        """Every gradient, then the extra slots: what the reducer averages."""
        self.views: dict[str, torch.Tensor] = {}
        """Each network's slice of `flat`."""
        start = 0
        for name, params in self.params.items():
            self.views[name] = self.flat[start : start + sizes[name]]
            start += sizes[name]
            for p, g in zip(params, self.views[name].split([p.numel() for p in params]), strict=True):
                p.grad = g.view_as(p)
        self.extra = self.flat[start:]
        """The extra slots: averaged with the gradients, e.g. PPO's minibatch KL."""
        self.optimizer = fused(optimizer)
        self.sync_period = sync_period
        self._sum = torch.zeros_like(self.flat) if sync_period > 1 else None
        self._grouped = 0
        self.reducer: Reducer | None = None
        """Averages the buffer (and sums statistics) across workers; None: one worker (`connect`)."""

    @property
    def num_parameters(self) -> int:
        return self.flat.numel() - self.extra.numel()

    @property
    def reducer_name(self) -> str | None:
        """How gradients are averaged across workers (None: one worker)."""
        return self.reducer.name if self.reducer is not None else None

    def connect(self, strategy: str, ctx) -> None:
        """Choose the reducer for `ctx`'s workers (`mjfleet.fleet.reduce.choose_reducer`: collective, every rank
        calls it); one worker keeps none."""
        if ctx.is_distributed:
            self.reducer = choose_reducer(strategy, self.flat, ctx.group)

    # ------------------------------------------------------------------ the step
    def zero_(self) -> None:
        self.flat.zero_()

    def accumulate(self, end_of_group: bool = False) -> bool:
        """With `sync_period` K > 1: add the buffer to its group's running sum; at the K-th call (or at
        `end_of_group`, e.g. an epoch's end) put the group's mean into the buffer and return True. K = 1: True."""
        if self._sum is None:
            return True
        self._sum += self.flat
        self._grouped += 1
        if self._grouped < self.sync_period and not end_of_group:
            return False
        torch.div(self._sum, self._grouped, out=self.flat)
        self._sum.zero_()
        self._grouped = 0
        return True

    def average(self) -> None:
        """The buffer <- its mean over all workers (one collective; nothing with one worker)."""
        if self.reducer is not None:
            self.reducer.average(self.flat)

    def clip(self, max_norm: float, names: Iterable[str] | None = None) -> None:
        """Scale each named network's gradients (every network's by default) to norm <= `max_norm`, as
        `torch.nn.utils.clip_grad_norm_` does per network: a sixth of its operations on the flat buffer."""
        views = [self.views[n] for n in (names if names is not None else self.views)]
        norms = torch.stack([torch.linalg.vector_norm(g) for g in views])
        scales = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
        for grads, scale in zip(views, scales.unbind(), strict=True):
            grads.mul_(scale)

    def step(self, names: Iterable[str] | None = None) -> None:
        """One optimiser step of every network, or of the named ones only: the others' gradient views are taken
        away for the step (Adam skips parameters without a gradient; their weights, moments and decay stay as
        they are) and given back after it."""
        if names is None:
            self.optimizer.step()
            return
        keep = set(names)
        hidden = [p for name, params in self.params.items() if name not in keep for p in params]
        views = [p.grad for p in hidden]
        for p in hidden:
            p.grad = None
        try:
            self.optimizer.step()
        finally:
            for p, view in zip(hidden, views, strict=True):
                p.grad = view

    # -------------------------------------------------------- other exchanges
    def sum_across_workers(self, values: torch.Tensor) -> None:
        """`values` <- its sum over all workers, in place (episode statistics, the stop signal)."""
        if self.reducer is not None:
            self.reducer.sum(values)

    def broadcast(self, *items: torch.nn.Module | torch.Tensor) -> None:
        """Every rank takes rank 0's modules' state (parameters and buffers: normalisers) and tensors."""
        if self.reducer is None:
            return
        for item in items:
            tensors = item.state_dict().values() if isinstance(item, torch.nn.Module) else (item,)
            for tensor in tensors:
                self.reducer.broadcast(tensor)

    def update_normalizer(self, normalizer, x: torch.Tensor) -> None:
        """`normalizer` learns the batch `x`, its statistics those of every worker's batches together."""
        update_normalizer(normalizer, x, self.reducer.sum if self.reducer is not None else None)

    def describe(self, every: str, normalised: bool = False) -> list[str]:
        """Start-up line parts: how gradients are averaged (after every `every`) and normalisers synced."""
        if self.reducer is None:
            return ["one worker, nothing averaged"]
        if self.reducer.name == "none":
            parts = ["gradients not averaged (reducer none)"]
        else:
            parts = [f"gradients averaged after every {every} by {self.reducer.name}"]
        if normalised:
            sync = "all-reduce" if self.reducer.name == "none" else self.reducer.name
            parts.append(f"observation normaliser synced by {sync}")
        return parts


def fused(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """`optimizer` as torch's fused kernel where it is a plain Adam (one kernel per step for all parameters instead
    of several per tensor; float32 on CPU and CUDA, what mjfleet trains in), its groups kept. Others stay as they
    are (SAC builds its AdamW fused itself)."""
    if type(optimizer) is not torch.optim.Adam or optimizer.defaults.get("fused"):
        return optimizer
    # A group's own implementation flags would win over the defaults' (fused: None is the for-each path).
    groups = [
        {k: v for k, v in group.items() if k not in ("fused", "foreach")} for group in optimizer.param_groups
    ]
    return torch.optim.Adam(groups, **{**optimizer.defaults, "fused": True})


# --------------------------------------------------------------------------------------- CUDA graphs
def record(body: Callable[[], T], device: torch.device) -> tuple[torch.cuda.CUDAGraph, T]:
    """`body` recorded as one CUDA graph after WARMUP_RUNS runs on a side stream: (the graph, what the recorded
    run returned: tensors every replay rewrites)."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_RUNS):
            body()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        result = body()
    return graph, result


class RecordedGradients(Generic[G]):
    """Gradient computations recorded as CUDA graphs (at most `keep`, by key) and replayed; when recording or
    replaying fails, the plain computation from then on, with one warning. Only gradients are recorded: what
    the averaged step does with them runs outside, exactly as on the plain path, so the two are equal given the
    same inputs."""

    def __init__(self, what: str, device: str | torch.device, enabled: bool, keep: int = 1) -> None:
        self.what, self.device, self.keep = what, torch.device(device), keep
        self.enabled = enabled and self.device.type == "cuda"
        self.graphs: dict[object, G] = {}

    def __call__(
        self, key: object, build: Callable[[], G], replay: Callable[[G], T], plain: Callable[[], T]
    ) -> T:
        """`replay(graph)` of the graph recorded for `key` (`build` records it on first use), else `plain()`."""
        if self.enabled:
            try:
                graph = self.graphs.get(key)
                if graph is None:
                    while len(self.graphs) >= self.keep:  # the oldest goes first: its memory is freed
                        self.graphs.pop(next(iter(self.graphs)))
                    graph = self.graphs[key] = build()
                return replay(graph)
            except Exception as exc:  # an optimisation: go on op by op, loudly, once
                torch.cuda.synchronize(self.device)
                self.enabled, self.graphs = False, {}
                log.warning(
                    "the %s could not be recorded as a CUDA graph (%s); op by op", self.what, first_line(exc)
                )
        return plain()


@contextlib.contextmanager
def cuda_matmul_precision(precision: str):
    """torch's float32 matrix-product precision on CUDA set to `precision` ("tf32", "ieee") inside."""
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous

"""One batched MuJoCo-Warp simulation on one device, with zero-copy torch views and captured graphs."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

log = logging.getLogger(__name__)

# Data fields that almost every environment reads; views for other fields are made on first use and cached.
_COMMON_DATA_FIELDS = ("qpos", "qvel", "ctrl", "qacc", "xpos", "xquat", "sensordata")

INERTIAL_FIELDS = ("body_mass", "body_inertia", "body_ipos", "body_iquat")
"""Model fields MuJoCo derives constants from: after changing one, call `Simulation.set_constants()`."""
DERIVED_INERTIAL_FIELDS = ("body_subtreemass", "body_invweight0", "dof_invweight0")
"""The derived constants a step reads (subtree masses for the centre of mass, inverse weights for constraint
softness): per-world whenever an inertial field is, so that `set_constants()` can give each world its own."""


@wp.kernel
def _record_sensor_columns(
    sensordata: wp.array2d(dtype=float),
    columns: wp.array(dtype=int),
    substep: int,
    history: wp.array3d(dtype=float),
):
    world, k = wp.tid()
    history[world, substep, k] = sensordata[world, columns[k]]


def expand_per_world_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """`fields`, plus the constants derived from any inertial field among them."""
    fields = tuple(dict.fromkeys(fields))
    if any(name in INERTIAL_FIELDS for name in fields):
        fields += tuple(name for name in DERIVED_INERTIAL_FIELDS if name not in fields)
    return fields


def needs_no_constraint_buffers(mj_model: mujoco.MjModel) -> bool:
    """Whether the model can be simulated without contact and constraint buffers (nconmax = njmax = 0).

    With `njmax == 0` mujoco_warp skips its constraint solver and takes qacc = qacc_smooth: on CPU the solver's
    set-up kernels were two thirds of Cartpole's step even though no constraint ever exists. That is exact only when
    no contact or constraint can arise (both disabled) and the integrator does not read the solver's output:
    mujoco_warp 4.0's Euler with implicit damping and its implicit integrators take M qacc from `efc.Ma`, which only
    the solver writes (measured: Euler with implicit damping and njmax = 0 was off by 0.18 in qvel after one step).
    So Euler qualifies with implicit damping disabled (`eulerdamp` or `damper` flag), RK4 always.
    """
    flags = mj_model.opt.disableflags
    disable = mujoco.mjtDisableBit
    if not (flags & disable.mjDSBL_CONSTRAINT and flags & disable.mjDSBL_CONTACT):
        return False
    integrator = mj_model.opt.integrator
    if integrator == mujoco.mjtIntegrator.mjINT_RK4:
        return True
    explicit_damping = flags & (disable.mjDSBL_EULERDAMP | disable.mjDSBL_DAMPER)
    return integrator == mujoco.mjtIntegrator.mjINT_EULER and bool(explicit_damping)


def model_name(mj_model: mujoco.MjModel) -> str:
    """The model's name (MJCF `<mujoco model="...">`), or "model" when it has none."""
    names = bytes(mj_model.names)
    return names[: names.index(b"\0")].decode() or "model"


_announce_compiles = True


@contextlib.contextmanager
def compile_notices(enabled: bool) -> Iterator[None]:
    """Simulations built inside announce their kernel compiles (`compile_notice`) only if `enabled`."""
    global _announce_compiles
    previous, _announce_compiles = _announce_compiles, enabled
    try:
        yield
    finally:
        _announce_compiles = previous


@contextlib.contextmanager
def compile_notice(name: str, poll_s: float = 0.1) -> Iterator[None]:
    """Say so while warp compiles kernels inside this block (a cold kernel cache: up to minutes); silent when
    every kernel comes from the cache.

    warp builds each module it compiles in a directory of its kernel cache named after the building process
    (`<module>_p<pid>_t<thread>`) and renames it when done; a thread watches the cache directory for such a
    directory of this process, so the line appears as soon as the first compile starts. Silent inside
    `compile_notices(False)` (the workers other than rank 0: every worker compiles the same kernels).
    """
    if not _announce_compiles:
        yield
        return
    wp.init()  # the kernel cache directory is set up here
    cache = str(wp.config.kernel_cache_dir)
    marker = f"_p{os.getpid()}_"
    started, done = threading.Event(), threading.Event()
    start = time.perf_counter()

    def watch() -> None:
        while not done.wait(poll_s):
            try:
                building = any(marker in entry for entry in os.listdir(cache))
            except OSError:
                continue
            if building:
                print(
                    f"compiling simulation kernels for {name}: first run on this machine, cached afterwards",
                    flush=True,
                )
                started.set()
                return

    watcher = threading.Thread(target=watch, name="compile-notice", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        if started.is_set():
            print(
                f"simulation kernels for {name} compiled in {time.perf_counter() - start:.0f} s", flush=True
            )


class Simulation:
    """`num_worlds` copies of one MuJoCo model stepped together on one warp device.

    The state lives in warp arrays; `data_view(name)` returns a torch tensor that shares their memory, so writing
    into `sim.ctrl` (in place) is what the next `step()` uses. `step()`, `forward()` and `reset(mask)` replay
    graphs captured once at construction: on CUDA a CUDA graph, on CPU warp's recorded launch stream, which
    removes most of the per-kernel Python overhead. Where capture is unavailable they fall back to plain launches.
    Called while a larger CUDA graph is being captured (see mjfleet.envs.cuda_graph) they launch their kernels
    into that capture.
    """

    def __init__(
        self,
        mj_model: mujoco.MjModel,
        num_worlds: int,
        device: str = "cpu",
        *,
        substeps: int = 1,
        capture: bool = True,
        per_world_model_fields: Iterable[str] = (),
        nconmax: int | None = None,
        njmax: int | None = None,
        silenced_overflow_warnings: int = 0,
        sensor_history: Iterable[int] = (),
    ) -> None:
        if num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        if substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps}")
        self.mj_model = mj_model
        self.num_worlds = num_worlds
        self.substeps = substeps
        self.wp_device = wp.get_device(device)
        self.device = torch.device(str(self.wp_device))

        if nconmax is None and njmax is None and needs_no_constraint_buffers(mj_model):
            nconmax = njmax = 0  # mujoco_warp then skips its constraint solver
        self.per_world_model_fields = expand_per_world_fields(per_world_model_fields)
        batch_sizes = dict.fromkeys(self.per_world_model_fields, num_worlds)
        # Kernels compile on first use, below: a cold cache says so (one line), a warm one says nothing.
        with compile_notice(model_name(mj_model)):
            with wp.ScopedDevice(self.wp_device):
                self.model = mjw.put_model(mj_model, batch_sizes=batch_sizes)
                # mujoco_warp prints a line from inside its kernels for every overflow bit in opt.warn_overflow;
                # the bits in `silenced_overflow_warnings` are still recorded in `data.overflow`, not printed.
                self.model.opt.warn_overflow = int(self.model.opt.warn_overflow) & ~int(
                    silenced_overflow_warnings
                )
                self.data = mjw.make_data(mj_model, nworld=num_worlds, nconmax=nconmax, njmax=njmax)
                self._reset_mask_wp = wp.zeros(num_worlds, dtype=bool)
                columns = [int(c) for c in sensor_history]
                self._history_columns = wp.array(columns, dtype=int) if columns else None
                self._history_wp = wp.zeros((num_worlds, substeps, max(len(columns), 1)), dtype=float)
            self.reset_mask = wp.to_torch(self._reset_mask_wp)
            self.sensor_history = wp.to_torch(self._history_wp)[:, :, : len(columns)]
            """(worlds, substeps, columns): the sensordata columns `sensor_history` named, after each physics
            substep of the last `step()` (what a sensor read only after the last substep would miss: a contact
            within the step)."""

            self._data_views: dict[str, torch.Tensor] = {}
            self._model_views: dict[str, torch.Tensor] = {}
            for name in _COMMON_DATA_FIELDS:
                self.data_view(name)

            self._operations = self._make_operations()
            self._graphs: dict[str, wp.Graph] = {}
            self.captured = False
            with wp.ScopedDevice(self.wp_device):
                # Run each operation once: kernels compile and load now (under the compile notice, and before
                # any capture starts), not at the first step of training.
                for fn in self._operations.values():
                    fn()
                if any(name in INERTIAL_FIELDS for name in self.per_world_model_fields):
                    mjw.set_const(self.model, self.data)  # what set_constants() runs: its kernels too
            if capture:
                self._capture_graphs()
            # Start every world from the model's default state, whatever warm-up or capture did to it.
            self.reset_mask.fill_(True)
            self._launch("reset")
            self._launch("forward")

    # ------------------------------------------------------------------ views
    @property
    def qpos(self) -> torch.Tensor:
        return self._data_views["qpos"]

    @property
    def qvel(self) -> torch.Tensor:
        return self._data_views["qvel"]

    @property
    def ctrl(self) -> torch.Tensor:
        return self._data_views["ctrl"]

    @property
    def qacc(self) -> torch.Tensor:
        return self._data_views["qacc"]

    @property
    def xpos(self) -> torch.Tensor:
        return self._data_views["xpos"]

    @property
    def xquat(self) -> torch.Tensor:
        return self._data_views["xquat"]

    @property
    def sensordata(self) -> torch.Tensor:
        return self._data_views["sensordata"]

    def data_view(self, name: str) -> torch.Tensor:
        """Zero-copy torch view of a `mujoco_warp.Data` field (made once, then cached)."""
        view = self._data_views.get(name)
        if view is None:
            view = wp.to_torch(getattr(self.data, name))
            self._data_views[name] = view
        return view

    def model_view(self, name: str) -> torch.Tensor:
        """Zero-copy torch view of a `mujoco_warp.Model` field; per-world only if listed in per_world_model_fields.
        After changing an inertial field (INERTIAL_FIELDS) in place, call `set_constants()`."""
        view = self._model_views.get(name)
        if view is None:
            view = wp.to_torch(getattr(self.model, name))
            self._model_views[name] = view
        return view

    def set_constants(self) -> None:
        """Recompute the model constants derived from fields changed in place (a world's `body_mass`: its subtree
        masses and inverse weights), with mujoco_warp's `set_const`, as MuJoCo's `mj_setConst`. Not captured: call
        it after randomising, not in the step loop. The state is left as it was."""
        with wp.ScopedDevice(self.wp_device):
            mjw.set_const(self.model, self.data)

    # ------------------------------------------------------------ operations
    def step(self) -> None:
        """Advance every world by `substeps` physics steps."""
        self._launch("step")

    def forward(self) -> None:
        """Recompute derived quantities (kinematics, sensors, ...) from qpos/qvel without advancing time."""
        self._launch("forward")

    def reset(self, mask: torch.Tensor) -> None:
        """Reset the worlds where `mask` is True to the model's default state; other worlds are untouched."""
        self.reset_mask.copy_(mask)
        self._launch("reset")

    # -------------------------------------------------------------- internals
    def _make_operations(self):
        m, d = self.model, self.data

        columns, history = self._history_columns, self._history_wp

        def step():
            for substep in range(self.substeps):
                mjw.step(m, d)
                if columns is not None:
                    wp.launch(
                        _record_sensor_columns,
                        dim=(d.nworld, columns.shape[0]),
                        inputs=[d.sensordata, columns, substep],
                        outputs=[history],
                    )

        return {
            "step": step,
            "forward": lambda: mjw.forward(m, d),
            "reset": lambda: mjw.reset_data(m, d, self._reset_mask_wp),
        }

    def _launch(self, name: str) -> None:
        graph = self._graphs.get(name)
        with wp.ScopedDevice(self.wp_device):
            # Inside a capture of a larger graph (a CUDA-graph env step) the kernels are launched, and so recorded,
            # directly: that capture holds them.
            if graph is not None and not self.wp_device.is_capturing:
                wp.capture_launch(graph)
            else:
                self._operations[name]()

    def _capture_graphs(self) -> None:
        operations = self._operations
        try:
            with wp.ScopedDevice(self.wp_device):
                for name, fn in operations.items():
                    with wp.ScopedCapture(device=self.wp_device) as capture:
                        fn()
                    if capture.graph is None:
                        raise RuntimeError(f"capturing {name} produced no graph")
                    self._graphs[name] = capture.graph
            self.captured = True
        except Exception as exc:  # capture is an optimisation: fall back to plain launches, loudly, once
            self._graphs.clear()
            log.warning("graph capture unavailable on %s (%s); using plain launches", self.wp_device, exc)

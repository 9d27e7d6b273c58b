"""The first environments of a batch, drawn in a web browser with viser: the part every browser view shares.

`BatchScene` starts a viser server (one port: the page and its websocket) and draws the chosen worlds from the
simulation's batched body poses through mjviser's MuJoCo scene (geoms, meshes, height fields built once from the
model, then moved as batched instances). `TrainingView` is `train --viewer viser`: rank 0's first environments,
read-only, redrawn at most a few times a second so that training barely notices.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from typing import Any

import numpy as np

from mjfleet import address
from mjfleet.address import LOOPBACK, check_address
from mjfleet.address import address_line as viewer_address_line
from mjfleet.errors import UsageError

SPACING_MARGIN = 2.0
"""Worlds that share one origin are laid out this many model extents apart, so that they do not overlap."""


class BatchScene:
    """A viser server showing worlds 0..envs-1 of `env` (the `follow`ed one among them, the camera on it)."""

    def __init__(
        self,
        env: Any,
        *,
        envs: int = 4,
        follow: int = 0,
        host: str = LOOPBACK,
        port: int = 8080,
        title: str = "mjfleet",
    ) -> None:
        import viser
        from mjviser import ViserMujocoScene

        self.env = env
        self.shown = min(max(envs, follow + 1), env.num_envs)
        with contextlib.redirect_stdout(io.StringIO()):  # viser's own address box: the caller prints one line
            self.server = viser.ViserServer(host=host, port=port, label=title, verbose=False)
        self.port = self.server.get_port()  # the next free one when `port` was busy
        self.scene = ViserMujocoScene(self.server, env.mj_model, num_envs=self.shown)
        # No environment map: its lighting costs a software-rendered page (no GPU) many seconds per frame.
        self.server.scene.configure_environment_map(hdri=None)
        self.server.scene.configure_default_lights(enabled=True, cast_shadow=False)
        self.scene.env_idx = follow
        self._offsets = self._grid_offsets()
        # The scene is drawn around the followed robot (mjviser moves it to the origin): look at the middle of
        # the shown worlds from the front right, far enough to see them all.
        centre = self._offsets.mean(axis=0) - self._offsets[follow]
        span = float(np.ptp(self._offsets[:, :2], axis=0).max()) + 2.0 * float(env.mj_model.stat.extent)
        self.server.initial_camera.look_at = tuple(centre)
        self.server.initial_camera.position = tuple(centre + span * np.array([0.9, -1.3, 0.8]))
        self.status = self.server.gui.add_markdown("starting")

    @property
    def follow(self) -> int:
        return self.scene.env_idx

    def draw(self) -> None:
        """Send the shown worlds' current body poses to the page (one copy from the simulation's device)."""
        sim, n = self.env.sim, self.shown
        xpos = sim.xpos[:n].detach().cpu().numpy() + self._offsets[:, None, :]
        xmat = sim.data_view("xmat")[:n].detach().cpu().numpy()
        self.scene.update_from_arrays(xpos, xmat)

    def _grid_offsets(self) -> np.ndarray:
        """Display offsets (n, 3): a square grid when the shown worlds share one origin (the task's
        `env_origins`, if it has them: rough terrain spreads its robots over tiles), else zeros."""
        n = self.shown
        origins = getattr(self.env, "env_origins", None)
        if n == 1 or (origins is not None and bool((origins[:n] != origins[0]).any())):
            return np.zeros((n, 3))
        spacing = SPACING_MARGIN * float(self.env.mj_model.stat.extent)
        side = math.ceil(math.sqrt(n))
        rows, cols = np.divmod(np.arange(n), side)
        return np.stack([cols * spacing, -rows * spacing, np.zeros(n)], axis=1)

    def close(self) -> None:
        self.server.stop()


class TrainingView:
    """`train --viewer viser`: rank 0's first environments while training, read-only.

    `step()` is called after every rollout step; it draws only when `1 / fps` seconds passed since the last
    drawing, so the cost (one device-to-host copy of the shown worlds' poses and one message) is bounded per second
    of training, not per step."""

    def __init__(self, env: Any, *, fps: float = 5.0, **scene: Any) -> None:
        self.view = BatchScene(env, **scene)
        self.port = self.view.port
        self.shown = self.view.shown
        self._period = 1.0 / fps
        self._next = 0.0
        self.steps = self.draws = 0

    def step(self) -> None:
        self.steps += 1
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + self._period
        self.view.draw()
        self.draws += 1
        self.view.status.content = f"**training** · rollout step {self.steps} · read-only"

    def close(self) -> None:
        self.view.close()


def training_viewer_settings(flags: Any) -> tuple[int, str, int] | None:
    """`train --viewer viser`'s (environments shown, host, port), checked; None without it."""
    if flags.viewer == "none":
        return None
    if flags.viewer_envs < 1:
        raise UsageError(f"--viewer-envs must be >= 1, got {flags.viewer_envs}")
    check_viewer_address(flags.viewer_host, flags.viewer_port)
    return (flags.viewer_envs, flags.viewer_host, flags.viewer_port)


def open_training_viewer(settings: tuple[int, str, int] | None, env: Any, task: str) -> Any:
    """Rank 0's read-only browser view of its first environments while training (None without --viewer)."""
    if settings is None:
        return None
    envs, host, port = settings
    warning = exposure_warning(host)
    if warning:
        print(warning)
    view = TrainingView(env, envs=envs, host=host, port=port, title=f"mjfleet {task} (training)")
    print(
        f"viewer: rank 0's environments 0..{view.shown - 1} of {task} while training, read-only; "
        f"{viewer_address_line(host, view.port)}",
        flush=True,
    )
    return view


def check_viewer_address(host: str, port: int) -> None:
    """--viewer-host and --viewer-port, checked (mjfleet.address, as the dashboard checks its own)."""
    check_address(host, port, "--viewer-")


def exposure_warning(host: str) -> str | None:
    """The warning line for a viewer that other machines can reach (None on a loopback address)."""
    return address.exposure_warning(host, "the viewer", "watch and steer the simulation")

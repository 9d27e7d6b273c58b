"""Watch one world of a running environment in MuJoCo's native viewer window (`play --viewer native`).

The viewer (mujoco.viewer.launch_passive) draws a CPU MjData on a thread of its own; after every policy step the
chosen world's state is copied into that MjData from the simulation and the window synced, paced so that
simulated time runs at `speed` x real time. It is a local window (GLFW): no network port is opened.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any

from mjfleet.errors import UsageError

CLOSE_TIMEOUT_S = 10.0
NO_DISPLAY_HINT = (
    "without a display, watch in a web browser (--viewer viser) or record a video instead: --video"
)


def check_display() -> None:
    """UsageError (one line, suggesting --video) unless a window can be opened here."""
    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if not display:
        raise UsageError(f"--viewer native needs a display and DISPLAY is not set; {NO_DISPLAY_HINT}")
    import glfw

    # GLFW reports a failed start-up through its error callback, which the glfw package turns into a warning:
    # the one line below says it better.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok = glfw.init()
        if ok:
            glfw.terminate()  # the viewer's own thread initialises GLFW again for its window
    if not ok:
        raise UsageError(f"--viewer native cannot open a window on display {display!r}; {NO_DISPLAY_HINT}")


class EnvViewer:
    """A passive MuJoCo viewer showing world `index` of a MujocoVecEnv at `speed` x real time."""

    def __init__(self, env: Any, index: int = 0, speed: float = 1.0) -> None:
        import mujoco
        import mujoco.viewer

        if not 0 <= index < env.num_envs:
            raise UsageError(f"--viewer-env {index}: the environment has worlds 0..{env.num_envs - 1}")
        if not speed > 0:
            raise UsageError(f"--speed must be > 0, got {speed}")
        self.env = env
        self.index = index
        self.model = env.mj_model
        self.data = mujoco.MjData(self.model)
        self._period = float(env.step_dt) / speed
        self._copy_state()
        # The scene only: the side panels' simulation controls (pause, reset, reload) do not drive this
        # simulation. Tab and Shift+Tab bring the panels back.
        before = set(threading.enumerate())
        self.handle = mujoco.viewer.launch_passive(
            self.model, self.data, show_left_ui=False, show_right_ui=False
        )
        # The thread that draws the window: close() waits for it, since a process that exits while that thread
        # still swaps buffers of a window GLFW has destroyed dies of an X error (seen under Xvfb).
        self._threads = [t for t in threading.enumerate() if t not in before]
        if _floating_base(self.model):  # a walking robot leaves a fixed camera's view: follow it
            with self.handle.lock():
                self.handle.cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
                self.handle.cam.trackbodyid = 1
        self._next = time.perf_counter()

    @property
    def is_running(self) -> bool:
        """False once the user closed the window."""
        return self.handle.is_running()

    def show(self) -> None:
        """Draw the world's current state, then wait until one policy step of simulated time has passed."""
        with self.handle.lock():
            self._copy_state()
        self.handle.sync()
        self._next += self._period
        delay = self._next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:  # slower than the requested speed: run as fast as possible, without trying to catch up later
            self._next = time.perf_counter()

    def close(self) -> None:
        self.handle.close()
        for thread in self._threads:
            thread.join(timeout=CLOSE_TIMEOUT_S)

    def _copy_state(self) -> None:
        import mujoco

        sim, i = self.env.sim, self.index
        self.data.qpos[:] = sim.qpos[i].detach().cpu().numpy()
        self.data.qvel[:] = sim.qvel[i].detach().cpu().numpy()
        self.data.ctrl[:] = sim.ctrl[i].detach().cpu().numpy()
        self.data.time = float(sim.data_view("time")[i])
        if self.model.nmocap:
            self.data.mocap_pos[:] = sim.data_view("mocap_pos")[i].detach().cpu().numpy()
            self.data.mocap_quat[:] = sim.data_view("mocap_quat")[i].detach().cpu().numpy()
        # Body poses, contacts and sensors for the drawing (the viewer's own thread does not step the physics).
        mujoco.mj_forward(self.model, self.data)


def _floating_base(model: Any) -> bool:
    """Whether the model's first body hangs on a free joint (a legged robot's base)."""
    import mujoco

    return (
        model.nbody > 1
        and model.body_jntnum[1] > 0
        and model.jnt_type[model.body_jntadr[1]] == mujoco.mjtJoint.mjJNT_FREE
    )

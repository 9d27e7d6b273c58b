"""Headless videos of one environment: mujoco.Renderer frames (EGL, else OSMesa) written as H.264 mp4.

MuJoCo picks its OpenGL backend when `mujoco` is first imported (from MUJOCO_GL), so a process that records
calls :func:`choose_gl_backend` before anything imports mujoco.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np

from mjfleet import atomic
from mjfleet.errors import UsageError, first_line

GL_PACKAGES_HINT = (
    "headless rendering needs EGL (Debian/Ubuntu: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) "
    "or OSMesa (apt-get install libosmesa6); or set MUJOCO_GL to a backend that works here"
)
_PROBE = "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"


def video_requested(argv: list[str]) -> bool:
    """Whether a command line asks for --video (checked before parsing: parsing imports mujoco)."""
    return any(a == "--video" or (a.startswith("--video=") and a[8:].lower() in ("true", "1")) for a in argv)


def working_gl_backend(candidates: tuple[str, ...] = ("egl", "osmesa")) -> str | None:
    """The first MUJOCO_GL backend that can create an offscreen context here, tried in short subprocesses
    (a backend cannot be changed once mujoco is imported); None when none can."""
    for backend in candidates:
        env = dict(os.environ, MUJOCO_GL=backend)
        env.pop("PYOPENGL_PLATFORM", None)
        try:
            probe = subprocess.run(
                [sys.executable, "-c", _PROBE], env=env, capture_output=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return backend
    return None


def choose_gl_backend() -> str:
    """Set MUJOCO_GL, when unset, to the first headless backend that works: egl, then osmesa.

    Call before anything imports mujoco. When none works, MUJOCO_GL becomes "egl" and rendering fails with a
    clear error naming the system packages to install.
    """
    chosen = os.environ.get("MUJOCO_GL")
    if not chosen:
        chosen = working_gl_backend() or "egl"
        os.environ["MUJOCO_GL"] = chosen
        # The probe ran without PYOPENGL_PLATFORM; this process must match it (mujoco's osmesa backend refuses
        # PYOPENGL_PLATFORM=egl, for one).
        os.environ["PYOPENGL_PLATFORM"] = chosen
    return chosen


class EnvRecorder:
    """Renders world `index` of a MujocoVecEnv: copies its qpos/qvel into a CPU MjData, runs mj_forward, draws.

    Camera: a model camera by name or number, else the model's first camera, else a free camera that tracks
    the first body when it floats (locomotion) or looks at the whole model when it does not.
    """

    def __init__(
        self, env: Any, width: int = 640, height: int = 480, camera: str | None = None, index: int = 0
    ) -> None:
        import mujoco

        self.env = env
        self.index = index
        self.model = env.mj_model
        vis = self.model.vis.global_
        vis.offwidth, vis.offheight = max(vis.offwidth, width), max(vis.offheight, height)
        self.data = mujoco.MjData(self.model)
        self.camera = self._camera(camera)  # a bad camera is reported before any GL set-up
        try:
            self.renderer = mujoco.Renderer(self.model, height=height, width=width)
        except Exception as exc:  # noqa: BLE001 - no GL context: missing system libraries
            first = first_line(exc)
            raise UsageError(
                f"cannot render with MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r} ({first}): {GL_PACKAGES_HINT}"
            ) from None

    def _camera(self, camera: str | None) -> Any:
        import mujoco

        m = self.model
        if camera is not None:
            named = not camera.lstrip("-").isdigit()
            cam_id = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, camera) if named else int(camera)
            if not -1 <= cam_id < m.ncam or (named and cam_id == -1):  # an unknown name is -1 too
                names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(m.ncam)]
                raise UsageError(
                    f"--video-camera {camera!r}: the model's cameras are {names or 'none'} (or -1: free)"
                )
            return cam_id
        if m.ncam > 0:
            return 0
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(m, cam)
        floating = (
            m.nbody > 1
            and m.body_jntnum[1] > 0
            and m.jnt_type[m.body_jntadr[1]] == mujoco.mjtJoint.mjJNT_FREE
        )
        if floating:
            cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            cam.trackbodyid = 1
            cam.distance = max(2.0, 3.0 * float(m.stat.extent) / 4)
            cam.elevation = -20.0
        return cam

    def frame(self) -> np.ndarray:
        """The current state of the recorded world as an (height, width, 3) uint8 image."""
        import mujoco

        sim = self.env.sim
        self.data.qpos[:] = sim.qpos[self.index].detach().cpu().numpy()
        self.data.qvel[:] = sim.qvel[self.index].detach().cpu().numpy()
        if self.model.nmocap:
            self.data.mocap_pos[:] = sim.data_view("mocap_pos")[self.index].detach().cpu().numpy()
            self.data.mocap_quat[:] = sim.data_view("mocap_quat")[self.index].detach().cpu().numpy()
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera=self.camera)
        return self.renderer.render()

    def close(self) -> None:
        self.renderer.close()


class Mp4Writer:
    """Frames -> H.264 mp4 (yuv420p, so width and height must be even) through imageio-ffmpeg's bundled ffmpeg.

    Written to a temporary name and renamed on close (`mjfleet.atomic.staged`), so a video file is either complete
    or absent.
    """

    def __init__(self, path: str | os.PathLike, width: int, height: int, fps: float) -> None:
        import imageio_ffmpeg

        if width % 2 or height % 2:
            raise UsageError(f"video width and height must be even (H.264), got {width}x{height}")
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = atomic.staged(self.path)
        self.size = (width, height)
        try:
            self._writer = imageio_ffmpeg.write_frames(
                str(self._file.path),
                self.size,
                fps=fps,  # pyright: ignore[reportArgumentType] - ffmpeg takes fractional rates (50.0)
                codec="libx264",
                pix_fmt_out="yuv420p",
                quality=7,
                macro_block_size=1,
                ffmpeg_log_level="error",
                output_params=["-f", "mp4"],  # the temporary name ends in .tmp: say the container
            )
            self._writer.send(None)  # start ffmpeg
        except BaseException:
            self._file.discard()
            raise

    def write(self, frame: np.ndarray) -> None:
        if frame.shape[:2] != (self.size[1], self.size[0]):
            raise ValueError(f"frame of shape {frame.shape} does not match the video size {self.size}")
        self._writer.send(np.ascontiguousarray(frame, dtype=np.uint8))

    def close(self) -> pathlib.Path:
        """Finish the file and put it in place (an earlier video of the same name is replaced only now)."""
        try:
            self._writer.close()
        except BaseException:
            self._file.discard()
            raise
        return self._file.commit()

    def abort(self) -> None:
        """Stop ffmpeg and delete the unfinished file (the recording failed)."""
        try:
            self._writer.close()
        finally:
            self._file.discard()


class TrainingVideo:
    """`train --video`: every `interval` iterations, the next `length` policy steps of environment 0 of the
    training rollout itself, as <videos_dir>/train_<iteration>.mp4 (rank 0).

    Frames are drawn from the environments that collect the data (`EnvRecorder` copies world 0's state after
    each step), so training runs no extra steps: what recording costs is the rendering and the copy of one
    world's state per recorded step, and nothing between recordings. A recording longer than an iteration's
    rollout continues into the next iterations; a new one starts only after the previous one has ended.
    """

    def __init__(
        self,
        env: Any,
        videos_dir: pathlib.Path,
        interval: int,
        length: int,
        width: int = 640,
        height: int = 480,
        camera: str | None = None,
    ) -> None:
        self.env = env
        self.videos_dir = pathlib.Path(videos_dir)
        self.interval = interval
        self.length = length
        self.size = (width, height)
        self.camera = camera
        self.fps = 1.0 / float(env.step_dt)
        self._recorder: EnvRecorder | None = None
        self._writer: Mp4Writer | None = None
        self._frames = 0
        self._iteration = 0
        self.finished: list[tuple[pathlib.Path, int]] = []
        """(video, iteration during which it ended) of the recordings not yet handed on (`take_finished`)."""

    @property
    def recording(self) -> bool:
        return self._writer is not None

    def begin_iteration(self, iteration: int) -> None:
        """Start a recording when `iteration` (0-based, as in metrics.jsonl) is a multiple of the interval."""
        self._iteration = iteration
        if self._writer is None and iteration % self.interval == 0:
            if self._recorder is None:  # the GL context once, at the first recording
                self._recorder = EnvRecorder(self.env, *self.size, camera=self.camera)
            path = self.videos_dir / f"train_{iteration}.mp4"
            self._writer = Mp4Writer(path, *self.size, fps=self.fps)
            self._frames = 0

    def step(self) -> None:
        """After an environment step: one frame while recording."""
        writer, recorder = self._writer, self._recorder
        if writer is None or recorder is None:
            return
        writer.write(recorder.frame())
        self._frames += 1
        if self._frames == self.length:
            self.finished.append((writer.close(), self._iteration))
            self._writer = None

    def take_finished(self) -> list[tuple[pathlib.Path, int]]:
        done, self.finished = self.finished, []
        return done

    def close(self) -> None:
        """End of training: an unfinished recording is kept with the frames it has (none: no file)."""
        if self._writer is not None:
            if self._frames:
                self.finished.append((self._writer.close(), self._iteration))
            else:
                self._writer.abort()
            self._writer = None
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None

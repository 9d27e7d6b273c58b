"""`play --video`: an mp4 of one environment, a frame per policy step, written next to eval.json."""

from __future__ import annotations

import pathlib
from typing import Any


class PlayVideo:
    """Renders environment 0 after each policy step into videos/play_<tag>.mp4."""

    def __init__(self, env: Any, flags: Any, out_dir: pathlib.Path, tag: object) -> None:
        from mjfleet.runs.video import EnvRecorder, Mp4Writer

        self.recorder = EnvRecorder(env, flags.video_width, flags.video_height, flags.video_camera)
        self.path = out_dir / "videos" / f"play_{tag}.mp4"
        self.writer = Mp4Writer(self.path, flags.video_width, flags.video_height, fps=1.0 / env.step_dt)

    def write_frame(self) -> None:
        self.writer.write(self.recorder.frame())

    def abort(self) -> None:
        """The evaluation failed: remove the partial file."""
        self.writer.abort()

    def close_renderer(self) -> None:
        self.recorder.close()

    def finish(self) -> None:
        """The evaluation ended: complete the mp4."""
        self.writer.close()

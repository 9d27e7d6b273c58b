"""`play --viewer`: watch one environment live while the evaluation runs.

`check_viewer` and `open_viewer` are the two places that know which viewer `play` uses (MuJoCo's native window).
"""

from __future__ import annotations

from typing import Any

from mjfleet.errors import UsageError


def check_viewer(flags: Any, num_envs: int) -> None:
    """Usage errors of --viewer that need the env count, and a missing display, before anything is built."""
    from mjfleet.runs.viewer import check_display

    if flags.viewer_env >= num_envs:
        raise UsageError(f"--viewer-env {flags.viewer_env}: there are {num_envs} environments (--num-envs)")
    check_display()


class PlayViewer:
    """Shows environment `env_index` after each policy step, paced at `speed` x real time."""

    def __init__(self, env: Any, env_index: int, speed: float, task: str) -> None:
        from mjfleet.runs.viewer import EnvViewer

        self.viewer = EnvViewer(env, env_index, speed)
        self.closed_early = False
        print(
            f"viewer: environment {env_index} of {task} at {speed:g}x real time; close the window to stop",
            flush=True,
        )

    def on_step(self) -> bool:
        """Show the step; False once the user has closed the window (the evaluation then stops)."""
        if not self.viewer.is_running:
            self.closed_early = True
            return False
        self.viewer.show()
        return True

    def close(self) -> None:
        self.viewer.close()


def open_viewer(env: Any, flags: Any, task: str) -> PlayViewer:
    """The viewer of --viewer for `env`."""
    return PlayViewer(env, flags.viewer_env, flags.speed, task)

"""`play --viewer auto|native|viser`: choose the live viewer and wire it in.

native is MuJoCo's window (mjfleet.viewers.native, needs a display); viser serves the scene and its controls to a web
browser (mjfleet.viewers.browser), for headless machines; auto takes the window where one can be opened, else
the browser. A bare `--viewer` means auto, as mjlab's play defaults to it.
(`train --viewer viser`: mjfleet.viewers.scene.TrainingView.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mjfleet.errors import UsageError
from mjfleet.viewers.scene import check_viewer_address, exposure_warning, viewer_address_line

Viewer = Literal["none", "auto", "native", "viser"]


def bare_viewer_means_auto(argv: list[str]) -> list[str]:
    """`--viewer` with no value -> `--viewer auto` (tyro wants a value; mjfleet's and mjlab's users omit it)."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--viewer" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.append("auto")
    return out


def check_viewer_flags(flags: Any, num_envs: int) -> None:
    """Usage errors of the viewer flags, before any environment is built."""
    if flags.viewer == "none":
        return
    if not flags.speed > 0:
        raise UsageError(f"--speed must be > 0, got {flags.speed}")
    if flags.viewer_env < 0:
        raise UsageError(f"--viewer-env must be >= 0, got {flags.viewer_env}")
    if flags.viewer_env >= num_envs:
        raise UsageError(f"--viewer-env {flags.viewer_env}: there are {num_envs} environments (--num-envs)")
    if flags.viewer_envs < 1:
        raise UsageError(f"--viewer-envs must be >= 1, got {flags.viewer_envs}")
    check_viewer_address(flags.viewer_host, flags.viewer_port)


def choose_viewer(flags: Any, num_envs: int) -> Literal["native", "viser"] | None:
    """The viewer to open (None: no viewer); auto picks native only where a window really opens."""
    from mjfleet.viewers.native import check_display

    check_viewer_flags(flags, num_envs)
    if flags.viewer == "none":
        return None
    if flags.viewer == "native":
        check_display()
        return "native"
    if flags.viewer == "auto":
        try:
            check_display()
            return "native"
        except UsageError as exc:
            reason = str(exc).split(";")[0].removeprefix("--viewer native ")
            print(f"viewer: no window ({reason}): showing it in a web browser instead (viser)")
    return "viser"


@dataclass
class LiveView:
    """What the evaluation needs from a viewer: the policy to call, the per-step hook and the cleanup."""

    policy: Any
    on_step: Any
    close: Any
    summary: dict[str, Any] = field(default_factory=dict)


def open_viewer(
    kind: Literal["native", "viser"] | None,
    env: Any,
    act: Any,
    flags: Any,
    task: str,
    checkpoint: Path | None = None,
    device: str = "cpu",
) -> LiveView:
    """Open the chosen viewer on `env`; with None, a LiveView that changes nothing."""
    summary: dict[str, Any] = {
        "kind": kind,
        "env": flags.viewer_env,
        "speed": flags.speed,
        "closed_early": False,
    }
    if kind is None:
        return LiveView(act, None, lambda: None, {})
    if kind == "native":
        from mjfleet.viewers.native import EnvViewer

        window = EnvViewer(env, flags.viewer_env, flags.speed)
        print(
            f"viewer: environment {flags.viewer_env} of {task} at {flags.speed:g}x real time; close the window to stop",
            flush=True,
        )

        def on_step() -> bool:
            if not window.is_running:  # the user closed the window: stop with the episodes finished so far
                summary["closed_early"] = True
                return False
            window.show()
            return True

        return LiveView(act, on_step, window.close, summary)

    from mjfleet.viewers.browser import BrowserViewer

    checkpoints, load = _checkpoint_choices(checkpoint, env, flags, device)
    warning = exposure_warning(flags.viewer_host)
    if warning:
        print(warning)
    browser = BrowserViewer(
        env,
        act,
        envs=flags.viewer_envs,
        follow=flags.viewer_env,
        speed=flags.speed,
        host=flags.viewer_host,
        port=flags.viewer_port,
        checkpoints=checkpoints,
        current=checkpoint.name if checkpoint is not None else None,
        load_policy=load,
        title=f"mjfleet {task}",
    )
    port = browser.port
    where = viewer_address_line(flags.viewer_host, port)
    print(
        f"viewer: environments 0..{browser.shown - 1} of {task} at {flags.speed:g}x real time in a web browser; "
        f"{where}; press Stop on the page to end early",
        flush=True,
    )

    def stop_early() -> bool:
        going = browser.show()
        summary["closed_early"] = summary["closed_early"] or not going
        return going

    summary.update(envs=browser.shown, port=port)
    return LiveView(browser, stop_early, browser.close, summary)


def _checkpoint_choices(checkpoint: Path | None, env: Any, flags: Any, device: str):
    """The run's checkpoints by file name, and a loader that turns one into a policy for this environment."""
    if checkpoint is None:
        return {}, None
    from mjfleet.deploy.export import build_actor
    from mjfleet.runs.checkpoints import checkpoint_run_dir, checkpoints_in, read_checkpoint

    found = {path.name: path for _, path in checkpoints_in(checkpoint_run_dir(checkpoint))}
    found.setdefault(checkpoint.name, checkpoint)
    stochastic = flags.stochastic
    obs = env.get_observations()

    def load(path: Path):
        from mjfleet.evaluation import ActorPolicy

        return ActorPolicy(
            build_actor(read_checkpoint(path, map_location="cpu"), obs, env.num_actions, device), stochastic
        )

    return found, load

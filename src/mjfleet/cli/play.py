"""`uv run play <Task> [flags]`: evaluate a trained policy, record a video, export it to ONNX."""

from __future__ import annotations

import sys
import typing
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.cli.common import command_argv, parse_task_command, user_errors
from mjfleet.errors import UsageError
from mjfleet.play.live_viewer import Viewer, bare_viewer_means_auto

PROG = "play"
Policy = Literal["checkpoint", "random", "zero"]
POLICIES: tuple[str, ...] = typing.get_args(Policy)
USAGE = """usage: play <Task> [flags]

Evaluate a policy: the latest checkpoint of the task's experiment unless told otherwise.
  play Cartpole-Balance                              latest run, latest checkpoint, 32 episodes
  play Cartpole-Balance --checkpoint 100 --load-run 2026-01-31   a given run and iteration (or a file path)
  play Cartpole-Balance --video --export             also an mp4 of env 0 and exported/policy.onnx
  play Cartpole-Balance --viewer                     watch live: MuJoCo's window with a display, else a browser
  play Quadruped-Velocity-Flat --viewer viser        in a web browser (prints the URL; 127.0.0.1 only)
  play Quadruped-Velocity-Flat --pretrained --viewer   watch the policy that ships with mjfleet
  play Cartpole-Balance --agent random               a baseline without a checkpoint (random or zero)
  play Quadruped-Velocity-Flat --baselines --command 0.5 0 0   trained vs zero vs random, one fixed command
  play Quadruped-Velocity-Flat --action-percentiles 2.5 97.5   the actions' range, as SAC bounds
  play <Task> --help                                 every flag of that task"""


@dataclass
class PlayFlags:
    """Evaluate a policy (deterministic actions by default), write eval.json; optionally a video and an ONNX export."""

    robot: str | None = None
    """A Python file that defines a RobotDescription: the robot of a task that takes one (Velocity-Flat), as
    trained with --robot. docs/bring-your-robot.md."""
    checkpoint: str | None = None
    """An iteration number of the chosen run, or a checkpoint file path. Default: the run's latest checkpoint."""
    load_run: str | None = None
    """A run directory path, or a regex over run directory names (newest match). Default: the newest run with
    a checkpoint in <logs-root>/<experiment>."""
    logs_root: str = "logs"
    pretrained: bool = False
    """Play the policy that ships with mjfleet for this task instead of a run's checkpoint:
    src/mjfleet/pretrained/<Task>/, with its training command, device, date and commit in
    pretrained.json (docs/tasks.md). Outputs go to <logs-root>/<experiment>/pretrained/."""
    wandb_run_path: str | None = None
    """Play a checkpoint that a wandb run stored locally: `entity/project/run_id` (found under
    <logs-root>/*/*/wandb/*run-*-<run_id>/files/) or a wandb run directory; --checkpoint N picks model_N.pt.
    Outputs go to the mjfleet run directory that holds the wandb run."""
    policy: Policy = "checkpoint"
    """What acts: the checkpoint's policy, uniform random actions, or zeros (`--agent random|zero` works too)."""
    gpu_ids: tuple[str, ...] = ("auto",)
    """One GPU id, or None/cpu for CPU. auto: GPU 0 if CUDA is available, else CPU."""
    num_envs: int | None = None
    """Environments run in parallel (alias of --env.num-envs). Default: 16."""
    episodes: int = 32
    """Episodes to evaluate: the first ceil(episodes / num_envs) of every environment, so short episodes are
    not over-represented."""
    stochastic: bool = False
    """Sample actions from the policy distribution instead of taking its mean."""
    seed: int | None = None
    """Seed of the evaluation (alias of --agent.seed). Default: the task's --agent.seed."""
    output: str | None = None
    """Where to write eval.json. Default: the checkpoint's run directory (baselines:
    <logs-root>/<experiment>/baseline_<policy>/). Videos go to videos/ next to it."""
    video: bool = False
    """Record an mp4 of environment 0 (headless: MUJOCO_GL=egl, else osmesa)."""
    video_length: int = 200
    """Video length in policy steps (one frame per step, played at the policy rate)."""
    video_width: int = 640
    video_height: int = 480
    video_camera: str | None = None
    """A model camera name or number (-1: free camera). Default: the model's first camera, else a free one."""
    viewer: Viewer = "none"
    """Watch the evaluation live until the episodes end. native: MuJoCo's window (needs a display; no network
    port); viser: a web browser (prints the URL); auto (also a bare --viewer): native where a window opens, else
    viser."""
    viewer_env: int = 0
    """The environment the viewer follows."""
    viewer_envs: int = 4
    """viser: how many environments (the first ones) the browser shows."""
    viewer_host: str = "127.0.0.1"
    """viser: the address its server binds. 0.0.0.0 lets other machines connect (no password: a warning says
    so)."""
    viewer_port: int = 8080
    """viser: the port it serves the page on; the next free one when that is busy."""
    speed: float = 1.0
    """Viewer pace: simulated time runs at this multiple of real time (as fast as possible when it cannot)."""
    export: bool = False
    """Export the policy to <run_dir>/exported/policy.onnx (+ policy.pt, policy.json, model.xml), checked against torch."""
    baselines: bool = False
    """Also evaluate zero and random actions with the same seed, env settings and commands; print one table
    (trained / zero / random) and add them to eval.json under "baselines"."""
    command: tuple[float, float, float] | None = None
    """Velocity tasks: command VX VY WZ (m/s, m/s, rad/s; base frame) in every episode instead of random draws."""
    action_percentiles: tuple[float, float] | None = None
    """LOW HIGH (e.g. 2.5 97.5): report these percentiles of every action the evaluated policy takes, in eval.json
    and as the `--agent.sac.action-low/high` flags that bound SAC's actions to them (docs/sac.md). With
    --stochastic, of the sampled actions."""
    initial_state: str | None = None
    """A file with the state every environment starts its first episode from (later episodes start from the task's
    reset): .npz arrays or a .json object, `qpos` (nq values), `qvel` (nv) and optionally `command` (the task's
    command, held until it is redrawn). Format: docs/deploy.md."""
    dump_actions: str | None = None
    """Write environment 0's first --dump-steps steps: the policy's input (policy.onnx's `obs`), its actions, qpos,
    qvel and the step of the episode, as .npz arrays or .jsonl lines (docs/deploy.md). Needs a trained policy."""
    dump_steps: int = 50
    """Steps --dump-actions records (fewer when the evaluation ends first)."""
    quiet: bool = False
    """No progress (the episodes done of N, on a terminal a bar, in a log a line every 30 s); the report at the end
    is printed all the same."""
    train_env: bool = False
    """Evaluate with the training env settings. Default: the task's play settings where it has them (locomotion:
    no pushes, no observation noise, nominal friction and mass), so that play measures the policy, not the
    domain randomisation. --env.* flags change whichever is chosen."""


def parse_args(argv: list[str]) -> tuple[str, Any]:
    # The --env.* flags change the task's play settings, or with --train-env its training config.
    train_env = _flag_given(argv, "--train-env")
    return parse_task_command(
        _agent_alias(bare_viewer_means_auto(argv)),
        PROG,
        USAGE,
        PlayFlags,
        description=PlayFlags.__doc__,
        env_defaults=lambda spec: spec.env_config() if train_env else spec.play_env_config(),
    )


def _flag_given(argv: list[str], flag: str) -> bool:
    """Whether the boolean `flag` is on in `argv` (`--flag`, `--flag=true`), before tyro parses it."""
    prefix = flag + "="
    return any(
        a == flag or (a.startswith(prefix) and a[len(prefix) :].lower() in ("true", "1")) for a in argv
    )


def _agent_alias(args: list[str]) -> list[str]:
    """`--agent random` / `--agent=zero` -> `--policy ...` (the bare --agent would clash with --agent.*)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        value = None
        if arg == "--agent" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            value, i = args[i + 1], i + 1
        elif arg.startswith("--agent="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if value not in POLICIES:
                raise UsageError(f"--agent {value!r}: use one of {', '.join(POLICIES)}")
            arg = f"--policy={value}"
        out.append(arg)
        i += 1
    return out


def check_flags(flags: Any) -> None:
    """Usage errors that need no checkpoint and no environment."""
    if flags.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {flags.episodes}")
    if flags.video:
        if flags.video_length < 1:
            raise UsageError(f"--video-length must be >= 1, got {flags.video_length}")
        w, h = flags.video_width, flags.video_height
        if w < 2 or h < 2 or w % 2 or h % 2:
            raise UsageError(f"--video-width/--video-height must be even numbers >= 2 (H.264), got {w}x{h}")
    if flags.action_percentiles is not None:
        low, high = flags.action_percentiles
        if not 0.0 <= low < high <= 100.0:
            raise UsageError(f"--action-percentiles needs 0 <= LOW < HIGH <= 100, got {low:g} {high:g}")
    if flags.dump_steps < 1:
        raise UsageError(f"--dump-steps must be >= 1, got {flags.dump_steps}")
    # The flags that choose a run's checkpoint; --pretrained and --agent each choose the policy instead.
    chooses_run = (
        flags.checkpoint is not None or flags.load_run is not None or flags.wandb_run_path is not None
    )
    if flags.policy != "checkpoint":
        if flags.baselines:
            raise UsageError(
                f"--baselines compares a checkpoint's policy with zero and random actions: drop --agent {flags.policy}"
            )
        if flags.export:
            raise UsageError(f"--export needs a trained policy, not --agent {flags.policy}")
        if flags.dump_actions:
            raise UsageError(
                f"--dump-actions records a trained policy's input and actions, not --agent {flags.policy}"
            )
        if chooses_run or flags.pretrained:
            raise UsageError(
                f"--agent {flags.policy} takes no --checkpoint/--load-run/--wandb-run-path/--pretrained"
            )
    if flags.pretrained and chooses_run:
        raise UsageError(
            "--pretrained plays the policy that ships with mjfleet: drop --checkpoint/--load-run/--wandb-run-path"
        )
    if flags.wandb_run_path is not None and flags.load_run is not None:
        raise UsageError("--wandb-run-path and --load-run both choose the run: pass one of them")


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    argv = command_argv(argv)
    task_name, flags = parse_args(argv)
    check_flags(flags)
    from mjfleet.deploy.check import ExportError
    from mjfleet.play import play

    try:
        play(task_name, flags)
    except ExportError as exc:  # what is already written (eval.json, a video) stays
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()

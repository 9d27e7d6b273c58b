"""`uv run play <Task> [flags]`: evaluate a trained policy, record a video, export it to ONNX."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import time
import typing
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.cli.common import parse_task_command, quiet_warp, user_errors
from mjfleet.cli.live_viewer import Viewer, bare_viewer_means_auto, choose_viewer, open_viewer
from mjfleet.errors import UsageError, first_line
from mjfleet.runs.run_dir import atomic_write_text

PROG = "play"
Policy = Literal["checkpoint", "random", "zero"]
POLICIES: tuple[str, ...] = typing.get_args(Policy)
DEFAULT_NUM_ENVS = 16
"""Environments evaluated in parallel when neither --num-envs nor --env.num-envs is given."""
USAGE = """usage: play <Task> [flags]

Evaluate a policy: the latest checkpoint of the task's experiment unless told otherwise.
  play Cartpole-Balance                              latest run, latest checkpoint, 32 episodes
  play Cartpole-Balance --checkpoint 100 --load-run 2026-01-31   a given run and iteration (or a file path)
  play Cartpole-Balance --video --export             also an mp4 of env 0 and exported/policy.onnx
  play Cartpole-Balance --viewer                     watch live: MuJoCo's window with a display, else a browser
  play Quadruped-Velocity-Flat --viewer viser        in a web browser (prints the URL; 127.0.0.1 only)
  play Cartpole-Balance --agent random               a baseline without a checkpoint (random or zero)
  play Quadruped-Velocity-Flat --baselines --command 0.5 0 0   trained vs zero vs random, one fixed command
  play <Task> --help                                 every flag of that task"""


@dataclass
class PlayFlags:
    """Evaluate a policy (deterministic actions by default), write eval.json; optionally a video and an ONNX export."""

    checkpoint: str | None = None
    """An iteration number of the chosen run, or a checkpoint file path. Default: the run's latest checkpoint."""
    load_run: str | None = None
    """A run directory path, or a regex over run directory names (newest match). Default: the newest run with
    a checkpoint in <logs-root>/<experiment>."""
    logs_root: str = "logs"
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
    # --- live viewer (wired by mjfleet.cli.live_viewer) ---
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
    """Export the policy to <run_dir>/exported/policy.onnx (+ policy.pt, policy.json), checked against torch."""
    baselines: bool = False
    """Also evaluate zero and random actions with the same seed, env settings and commands; print one table
    (trained / zero / random) and add them to eval.json under "baselines"."""
    command: tuple[float, float, float] | None = None
    """Velocity tasks: command VX VY WZ (m/s, m/s, rad/s; base frame) in every episode instead of random draws."""
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
    if flags.policy != "checkpoint":
        if flags.baselines:
            raise UsageError(
                f"--baselines compares a checkpoint's policy with zero and random actions: drop --agent {flags.policy}"
            )
        if flags.export:
            raise UsageError(f"--export needs a trained policy, not --agent {flags.policy}")
        if flags.checkpoint is not None or flags.load_run is not None or flags.wandb_run_path is not None:
            raise UsageError(f"--agent {flags.policy} takes no --checkpoint/--load-run/--wandb-run-path")
    if flags.wandb_run_path is not None and flags.load_run is not None:
        raise UsageError("--wandb-run-path and --load-run both choose the run: pass one of them")


def _device(flags: Any) -> str:
    from mjfleet.launch.devices import make_plan, parse_gpu_ids

    tokens = None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids)
    plan = make_plan(parse_gpu_ids(tokens))
    if plan.world_size > 1:
        raise UsageError("play runs on one device: pass one GPU id, or None for CPU")
    if plan.notice:
        print(plan.notice)
    return plan.devices[0]


def play(task_name: str, flags: Any) -> dict[str, Any]:
    import torch
    import warp as wp

    from mjfleet.evaluation import BASELINES, evaluate
    from mjfleet.runs.checkpoints import (
        checkpoint_run_dir,
        find_checkpoint,
        find_wandb_checkpoint,
        read_checkpoint,
    )
    from mjfleet.tasks import get_task

    check_flags(flags)
    spec = get_task(task_name)
    env_cfg, agent_cfg = flags.env, flags.agent
    if env_cfg.num_envs is None:
        env_cfg.num_envs = DEFAULT_NUM_ENVS
    if env_cfg.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {env_cfg.num_envs}")
    viewer_kind = choose_viewer(flags, env_cfg.num_envs)  # live viewer: the flags' checks and auto's choice
    if flags.command is not None:
        commands = getattr(env_cfg, "commands", None)
        if not callable(getattr(commands, "fix", None)):
            raise UsageError(f"--command: {spec.name} takes no velocity command")
        commands.fix(*flags.command)
    device = _device(flags)

    play_keys = _play_setting_keys(spec) if not flags.train_env else set()
    if play_keys:
        print(
            f"play settings of {spec.name}: "
            + ", ".join(
                f"{k}={v!r}"
                for k, v in _flatten(_plain(dataclasses.asdict(env_cfg))).items()
                if k in play_keys
            )
            + " (--train-env: as in training)"
        )
    state = checkpoint = None
    if flags.policy == "checkpoint":
        experiment = pathlib.Path(flags.logs_root) / agent_cfg.experiment_name
        if flags.wandb_run_path is not None:
            checkpoint = find_wandb_checkpoint(flags.wandb_run_path, flags.logs_root, flags.checkpoint)
        else:
            checkpoint = find_checkpoint(experiment, flags.load_run, flags.checkpoint)
        state = read_checkpoint(checkpoint, map_location="cpu")
        _notice_differences(
            spec.name, env_cfg, state, fixed_command=flags.command is not None, on_purpose=play_keys
        )
        out_dir = checkpoint_run_dir(checkpoint)
        label = f"{checkpoint.name} (iteration {state['iter']})"
    else:
        out_dir = pathlib.Path(flags.logs_root) / agent_cfg.experiment_name / f"baseline_{flags.policy}"
        label = f"{flags.policy} actions"
    output = pathlib.Path(flags.output) if flags.output else out_dir / "eval.json"
    try:  # before the evaluation, not after it: a path that cannot be written is the user's to fix
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if not os.access(output.parent, os.W_OK):
        raise UsageError(f"cannot write {output}: {output.parent} is not writable")

    torch.manual_seed(agent_cfg.seed)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    start = time.perf_counter()
    with wp.ScopedDevice(device):
        env = spec.make_env(env_cfg, device)
        obs = env.get_observations()
        actor = None
        if state is not None:
            from mjfleet.rl.export import build_actor

            try:
                actor = build_actor(state, obs, env.num_actions, device)
            except (RuntimeError, KeyError, ValueError) as exc:
                first = first_line(exc)
                raise UsageError(f"{checkpoint} does not fit {spec.name}'s environment: {first}") from None
        act = _actor_fn(actor, flags, env)

        recorder = writer = None
        video_path = None
        if flags.video:
            from mjfleet.runs.video import EnvRecorder, Mp4Writer

            recorder = EnvRecorder(env, flags.video_width, flags.video_height, flags.video_camera)
            tag = state["iter"] if state is not None else flags.policy
            video_path = output.parent / "videos" / f"play_{tag}.mp4"
            writer = Mp4Writer(video_path, flags.video_width, flags.video_height, fps=1.0 / env.step_dt)
        frame_sink = None
        if writer is not None and recorder is not None:
            video_writer, video_recorder = writer, recorder
            frame_sink = lambda: video_writer.write(video_recorder.frame())  # noqa: E731
        live = open_viewer(viewer_kind, env, act, flags, spec.name, checkpoint, device)  # live viewer
        try:
            torch.manual_seed(agent_cfg.seed)  # the baselines start from the same states and commands
            result = evaluate(
                env,
                live.policy,
                flags.episodes,
                frame_sink=frame_sink,
                video_length=flags.video_length,
                on_step=live.on_step,
            )
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        finally:
            if recorder is not None:
                recorder.close()
            live.close()
        if writer is not None:
            writer.close()

        baselines = None
        if flags.baselines:
            baselines = {}
            for name in BASELINES:
                # A fresh environment seeded as the first: the same per-environment physics draws, pushes,
                # initial states and commands (the random policy draws from a generator of its own).
                torch.manual_seed(agent_cfg.seed)
                baseline_env = spec.make_env(env_cfg, device)
                policy = _baseline_policy(name, baseline_env, agent_cfg.seed)
                torch.manual_seed(agent_cfg.seed)
                baselines[name] = evaluate(baseline_env, policy, flags.episodes)

        exported = None
        if flags.export:
            from mjfleet.rl.export import export_policy, policy_metadata

            assert state is not None and checkpoint is not None  # check_flags: --export needs a checkpoint

            meta = policy_metadata(
                env, actor, obs, spec.name, iteration=state["iter"], checkpoint=str(checkpoint)
            )
            out = checkpoint_run_dir(checkpoint) / "exported"
            _note_replaced_export(out / "policy.json", int(state["iter"]))
            files = export_policy(actor, obs, out, meta)
            exported = {kind: str(path) for kind, path in files.items()}
            exported["max_abs_diff_vs_torch"] = json.loads(files["metadata"].read_text())["onnx"][
                "max_abs_diff_vs_torch"
            ]

    summary = {
        "task": spec.name,
        "policy": flags.policy,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "iteration": state["iter"] if state is not None else None,
        "deterministic": flags.policy == "checkpoint" and not flags.stochastic,
        "num_envs": env_cfg.num_envs,
        "device": device,
        "seed": agent_cfg.seed,
        "command": list(flags.command) if flags.command is not None else None,
        "env_settings": "play" if play_keys else "train",
        **result,
        "baselines": baselines,
        "wall_s": time.perf_counter() - start,
        "video": str(video_path) if video_path else None,
        "viewer": live.summary or None,
        "exported": exported,
        "env_cfg": _plain(dataclasses.asdict(env_cfg)),
    }
    atomic_write_text(output, json.dumps(summary, indent=2) + "\n")
    _print_summary(summary, label, output)
    return summary


def _actor_fn(actor, flags: Any, env):
    if actor is not None:
        stochastic = flags.stochastic
        return lambda obs: actor(obs, stochastic_output=stochastic)
    return _baseline_policy(flags.policy, env, flags.agent.seed)


def _baseline_policy(name: str, env, seed: int):
    from mjfleet.evaluation import random_policy, zero_policy

    return zero_policy(env) if name == "zero" else random_policy(env, seed)


def _play_setting_keys(spec: Any) -> set[str]:
    """The dotted env settings the task's play settings change (empty when it has none)."""
    trained = _flatten(_plain(dataclasses.asdict(spec.env_config())))
    played = _flatten(_plain(dataclasses.asdict(spec.play_env_config())))
    return {k for k in played if trained.get(k) != played[k]}


def _notice_differences(
    task: str,
    env_cfg: Any,
    state: dict[str, Any],
    fixed_command: bool = False,
    on_purpose: set[str] | frozenset[str] = frozenset(),
) -> None:
    infos = state.get("infos") or {}
    if infos.get("task") and infos["task"] != task:
        print(f"note: the checkpoint was trained on {infos['task']}; playing it on {task}")
    # Both sides plain and flattened to dotted names: the checkpoint keeps tuples where the flags give lists,
    # and a note should name the one nested setting that differs, not its whole group.
    trained = _flatten(_plain(infos.get("env_cfg") or {}))
    now = _flatten(_plain(dataclasses.asdict(env_cfg)))
    ignore = {"num_envs", "capture_graphs", "capture_step", *on_purpose}  # on purpose: the play settings
    differ = [k for k in now if k in trained and k not in ignore and trained[k] != now[k]]
    if fixed_command:  # --command changes these on purpose
        differ = [k for k in differ if not k.startswith("commands.")]
    if differ:
        pairs = ", ".join(f"{k}={now[k]!r} (trained: {trained[k]!r})" for k in differ[:4])
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        print(f"note: env settings differ from training: {pairs}{more}; pass --env.* flags to match")


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"commands": {"lin_vel_x": v}} -> {"commands.lin_vel_x": v}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _note_replaced_export(metadata: pathlib.Path, iteration: int) -> None:
    """A note when --export replaces the export of a later iteration (e.g. train --export-on-save's latest)."""
    try:
        previous = json.loads(metadata.read_text()).get("iteration")
    except (OSError, ValueError):
        return
    if isinstance(previous, int) and previous > iteration:
        print(
            f"note: replacing {metadata.parent}'s export of iteration {previous} with iteration {iteration}"
        )


def _print_summary(summary: dict[str, Any], label: str, output: pathlib.Path) -> None:
    mode = (
        "deterministic"
        if summary["deterministic"]
        else "stochastic"
        if summary["policy"] == "checkpoint"
        else ""
    )
    if summary["viewer"] and summary["viewer"]["closed_early"]:
        print(f"viewer closed: the evaluation stopped after {summary['steps']} steps")
    if summary["episodes"] == 0:
        print(f"{summary['task']}, {label}: no episode finished")
    else:
        print(
            f"{summary['task']}, {label}{', ' + mode if mode else ''}: mean return {summary['mean_return']:.2f} "
            f"± {summary['std_return']:.2f} over {summary['episodes']} episodes, mean episode length "
            f"{summary['mean_episode_length']:.1f} / {summary['max_episode_length']}"
        )
    episode_terms = summary["episode_metrics"]
    if episode_terms:
        terms = [f"{k.split('/', 1)[-1]} {v:.4g}" for k, v in episode_terms.items()]
        for i in range(0, len(terms), 4):
            print("    " + "  ".join(terms[i : i + 4]))
    if summary["command"] is not None:
        print("command (vx, vy, wz): " + ", ".join(f"{v:g}" for v in summary["command"]))
    if summary["metrics"]:
        terms = [f"{k} {v:.4g}" for k, v in summary["metrics"].items()]
        print("metrics (mean over steps): " + "  ".join(terms))
    ended = ", ".join(f"{cause} {n}" for cause, n in summary["terminations"].items())
    print(f"episodes ended: {summary['episodes_ended']} ({ended})")
    if summary["baselines"]:
        print(_comparison_table({"trained": summary, **summary["baselines"]}))
    if summary["video"]:
        print(f"video: {summary['video']} ({summary['video_frames']} frames)")
    exported = summary["exported"]
    if exported:
        names = ", ".join(
            pathlib.Path(exported[k]).name for k in ("onnx", "torchscript", "metadata") if k in exported
        )
        print(
            f"exported: {pathlib.Path(exported['onnx']).parent} ({names}; ONNX matches torch to "
            f"{exported['max_abs_diff_vs_torch']:.1e})"
        )
    print(f"eval written to {output}")


def _comparison_table(results: dict[str, dict[str, Any]]) -> str:
    """One row per policy: return, episode length, the task's metrics (simulator health left out), the episodes
    ended per cause (falls, for a legged robot) and in all, each as evaluated with the same seed and settings."""
    first = next(iter(results.values()))
    metrics = [k for k in first["metrics"] if not k.startswith("sim_")]
    causes = sorted({c for r in results.values() for c in r["terminations"] if c != "time_out"})
    header = ["policy", "return", "ep. length", *metrics, *causes, "episodes ended"]
    rows = [header]
    for name, r in results.items():
        row = [name, _number(r["mean_return"]), _number(r["mean_episode_length"])]
        row += [_number(r["metrics"].get(k)) for k in metrics]
        row += [str(r["terminations"].get(c, 0)) for c in causes]
        row.append(str(r["episodes_ended"]))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _plain(value: Any) -> Any:
    from mjfleet.runs.run_dir import to_plain

    return to_plain(value)


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    from mjfleet.runs.video import choose_gl_backend, video_requested

    if video_requested(argv):
        choose_gl_backend()  # before anything imports mujoco
    quiet_warp()
    task_name, flags = parse_args(argv)
    from mjfleet.rl.export import ExportError

    try:
        play(task_name, flags)
    except ExportError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

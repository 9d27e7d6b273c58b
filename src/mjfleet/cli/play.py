"""`uv run play <Task> [flags]`: evaluate a trained policy, record a video, export it to ONNX."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import sys
import time
import typing
from dataclasses import dataclass
from typing import Any, Literal

from mjfleet.cli.common import parse_task_command, quiet_warp, user_errors
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
  play Cartpole-Balance --agent random               a baseline without a checkpoint (random or zero)
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
    export: bool = False
    """Export the policy to <run_dir>/exported/policy.onnx (+ policy.pt, policy.json), checked against torch."""


def parse_args(argv: list[str]) -> tuple[str, Any]:
    return parse_task_command(_agent_alias(argv), PROG, USAGE, PlayFlags, description=PlayFlags.__doc__)


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


def _wants_video(argv: list[str]) -> bool:
    return any(a == "--video" or (a.startswith("--video=") and a[8:].lower() in ("true", "1")) for a in argv)


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
        if flags.export:
            raise UsageError(f"--export needs a trained policy, not --agent {flags.policy}")
        if flags.checkpoint is not None or flags.load_run is not None:
            raise UsageError(f"--agent {flags.policy} takes no --checkpoint/--load-run")


def _device(flags: Any) -> str:
    from mjfleet.launch.devices import make_plan, parse_gpu_ids

    tokens = None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids)
    plan = make_plan(parse_gpu_ids(tokens))
    if plan.world_size > 1:
        raise UsageError("play runs on one device: pass one GPU id, or None for CPU")
    if plan.notice:
        print(plan.notice)
    return plan.devices[0]


def evaluate(env, act, episodes: int, frame_sink=None, video_length: int = 0) -> dict[str, Any]:
    """Run `act(obs) -> actions` until every env finished ceil(episodes / num_envs) episodes (and the video,
    if any, has `video_length` frames). Returns returns/lengths of the first `episodes` of them (taken round
    by round over the environments) and the env's Episode_* log averaged over every episode that ended."""
    import torch

    n = env.num_envs
    quota = math.ceil(episodes / n)
    device = env.device
    returns = torch.zeros(n, quota, device=device)
    lengths = torch.zeros(n, quota, device=device)
    count = torch.zeros(n, dtype=torch.long, device=device)
    current_return = torch.zeros(n, device=device)
    current_length = torch.zeros(n, device=device)
    rows = torch.arange(n, device=device)
    log_sums: dict[str, torch.Tensor] = {}
    ended = torch.zeros((), device=device)
    obs = env.get_observations()
    max_steps = quota * int(env.max_episode_length) + 1
    steps = frames = 0
    with torch.inference_mode():
        while True:
            evaluated = steps >= max_steps or bool((count >= quota).all())
            if evaluated and (frame_sink is None or frames >= video_length):
                break
            if frame_sink is not None and frames < video_length:
                frame_sink()
                frames += 1
            obs, rewards, dones, extras = env.step(act(obs))
            current_return += rewards
            current_length += 1
            record = dones & (count < quota)
            slot = count.clamp(max=quota - 1)
            returns[rows, slot] = torch.where(record, current_return, returns[rows, slot])
            lengths[rows, slot] = torch.where(record, current_length, lengths[rows, slot])
            count += record.long()
            current_return *= ~dones
            current_length *= ~dones
            finished = extras.get("episodes_finished", dones.sum())
            ended += finished
            for key, value in extras.get("log", {}).items():
                if key.startswith("Episode"):
                    log_sums[key] = log_sums.get(key, 0.0) + value * finished
            steps += 1
    valid = (torch.arange(quota, device=device)[None, :] < count[:, None]).T.reshape(-1)
    chosen_returns = returns.T.reshape(-1)[valid][:episodes].double().cpu()
    chosen_lengths = lengths.T.reshape(-1)[valid][:episodes].double().cpu()
    k = len(chosen_returns)
    total_ended = float(ended)
    result: dict[str, Any] = {
        "episodes": k,
        "mean_return": float(chosen_returns.mean()) if k else None,
        "std_return": float(chosen_returns.std(correction=0)) if k else None,
        "min_return": float(chosen_returns.min()) if k else None,
        "max_return": float(chosen_returns.max()) if k else None,
        "mean_episode_length": float(chosen_lengths.mean()) if k else None,
        "std_episode_length": float(chosen_lengths.std(correction=0)) if k else None,
        "max_episode_length": int(env.max_episode_length),
        "episode_metrics": {
            key: float(total) / total_ended for key, total in sorted(log_sums.items()) if total_ended > 0
        },
        "episodes_ended": int(total_ended),
        "steps": steps,
        "env_steps": steps * n,
        "video_frames": frames,
    }
    return result


def play(task_name: str, flags: Any) -> dict[str, Any]:
    import torch
    import warp as wp

    from mjfleet.runs.checkpoints import find_checkpoint, read_checkpoint
    from mjfleet.tasks import get_task

    check_flags(flags)
    spec = get_task(task_name)
    env_cfg, agent_cfg = flags.env, flags.agent
    if env_cfg.num_envs is None:
        env_cfg.num_envs = DEFAULT_NUM_ENVS
    if env_cfg.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {env_cfg.num_envs}")
    device = _device(flags)

    state = checkpoint = None
    if flags.policy == "checkpoint":
        experiment = pathlib.Path(flags.logs_root) / agent_cfg.experiment_name
        checkpoint = find_checkpoint(experiment, flags.load_run, flags.checkpoint)
        state = read_checkpoint(checkpoint, map_location="cpu")
        _notice_differences(spec.name, env_cfg, state)
        out_dir = checkpoint.parent
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
        try:
            result = evaluate(
                env,
                act,
                flags.episodes,
                frame_sink=frame_sink,
                video_length=flags.video_length,
            )
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        finally:
            if recorder is not None:
                recorder.close()
        if writer is not None:
            writer.close()

        exported = None
        if flags.export:
            from mjfleet.rl.export import export_policy, policy_metadata

            assert state is not None and checkpoint is not None  # check_flags: --export needs a checkpoint

            meta = policy_metadata(
                env, actor, obs, spec.name, iteration=state["iter"], checkpoint=str(checkpoint)
            )
            out = checkpoint.parent / "exported"
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
        **result,
        "wall_s": time.perf_counter() - start,
        "video": str(video_path) if video_path else None,
        "exported": exported,
        "env_cfg": _plain(dataclasses.asdict(env_cfg)),
    }
    atomic_write_text(output, json.dumps(summary, indent=2) + "\n")
    _print_summary(summary, label, output)
    return summary


def _actor_fn(actor, flags: Any, env):
    import torch

    if actor is not None:
        stochastic = flags.stochastic
        return lambda obs: actor(obs, stochastic_output=stochastic)
    clip = float(getattr(env.cfg, "clip_actions", 1.0))
    shape = (env.num_envs, env.num_actions)
    if flags.policy == "zero":
        zeros = torch.zeros(shape, device=env.device)
        return lambda obs: zeros
    return lambda obs: (torch.rand(shape, device=env.device) * 2.0 - 1.0) * clip


def _notice_differences(task: str, env_cfg: Any, state: dict[str, Any]) -> None:
    infos = state.get("infos") or {}
    if infos.get("task") and infos["task"] != task:
        print(f"note: the checkpoint was trained on {infos['task']}; playing it on {task}")
    # Both sides plain and flattened to dotted names: the checkpoint keeps tuples where the flags give lists,
    # and a note should name the one nested setting that differs, not its whole group.
    trained = _flatten(_plain(infos.get("env_cfg") or {}))
    now = _flatten(_plain(dataclasses.asdict(env_cfg)))
    ignore = {"num_envs", "capture_graphs", "capture_step"}
    differ = [k for k in now if k in trained and k not in ignore and trained[k] != now[k]]
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
    if summary["episodes"] == 0:
        print(f"{summary['task']}, {label}: no episode finished")
    else:
        print(
            f"{summary['task']}, {label}{', ' + mode if mode else ''}: mean return {summary['mean_return']:.2f} "
            f"± {summary['std_return']:.2f} over {summary['episodes']} episodes, mean episode length "
            f"{summary['mean_episode_length']:.1f} / {summary['max_episode_length']}"
        )
    metrics = summary["episode_metrics"]
    if metrics:
        terms = [f"{k.split('/', 1)[-1]} {v:.4g}" for k, v in metrics.items()]
        for i in range(0, len(terms), 4):
            print("    " + "  ".join(terms[i : i + 4]))
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


def _plain(value: Any) -> Any:
    from mjfleet.runs.run_dir import to_plain

    return to_plain(value)


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if _wants_video(argv):
        from mjfleet.runs.video import choose_gl_backend

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

"""One `play` job end to end: settings, device, policy, environment, evaluation, outputs, eval.json."""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any

from mjfleet import atomic
from mjfleet.errors import UsageError
from mjfleet.play.console import EpisodeBar, trouble_shares
from mjfleet.play.live_viewer import choose_viewer, open_viewer
from mjfleet.play.policy import PolicySource, act_fn, baseline_policy, build_checkpoint_actor, choose_policy
from mjfleet.play.report import print_summary
from mjfleet.play.settings import (
    applied_env_cfg,
    fix_command,
    notice_differences,
    play_setting_keys,
    print_play_settings,
)
from mjfleet.play.steps import (
    InitialState,
    StepDump,
    check_dump_path,
    check_fits,
    read_initial_state,
    start_from,
)
from mjfleet.progress import Progress

PROG = "play"

DEFAULT_NUM_ENVS = 16
"""Environments evaluated in parallel when neither --num-envs nor --env.num-envs is given."""


def play(task_name: str, flags: Any) -> dict[str, Any]:
    """Evaluate the policy `flags` choose on `task_name`, write eval.json, print its summary and return it.

    `flags` are cli/play.py's PlayFlags, already checked (`check_flags`), with the task's `env` and `agent`."""
    import torch
    import warp as wp

    from mjfleet.tasks import get_task

    spec = get_task(task_name)
    env_cfg, agent_cfg = flags.env, flags.agent
    if env_cfg.num_envs is None:
        env_cfg.num_envs = DEFAULT_NUM_ENVS
    if env_cfg.num_envs < 1:
        raise UsageError(f"--num-envs must be >= 1, got {env_cfg.num_envs}")
    viewer_kind = choose_viewer(flags, env_cfg.num_envs)  # the flags' checks and auto's choice
    if flags.command is not None:
        fix_command(env_cfg, flags.command, spec.name)
    device = play_device(flags.gpu_ids)

    play_keys = play_setting_keys(spec) if not flags.train_env else set()
    if play_keys:
        print_play_settings(spec.name, env_cfg, play_keys)
    source = choose_policy(flags, agent_cfg.experiment_name, spec.name)
    if source.state is not None:
        notice_differences(
            spec.name, env_cfg, source.state, fixed_command=flags.command is not None, on_purpose=play_keys
        )
    # A deployer's files are read and checked before anything runs or is written (the model's sizes: below).
    initial = read_initial_state(flags.initial_state) if flags.initial_state else None
    dump_path = check_dump_path(flags.dump_actions) if flags.dump_actions else None
    output = writable_output(flags.output, source.out_dir)

    torch.manual_seed(agent_cfg.seed)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    start = time.perf_counter()
    with wp.ScopedDevice(device):
        env = spec.make_env(env_cfg, device)
        obs = env.get_observations()
        actor = build_checkpoint_actor(source, obs, env, device, spec.name)
        if initial is not None:
            check_fits(initial, env, spec.name)
        act = act_fn(actor, flags, env)
        recorder = dump = None
        if flags.action_percentiles is not None:
            from mjfleet.play.action_range import ActionRecorder

            act = recorder = ActionRecorder(act)
        if dump_path is not None:
            act = dump = StepDump(act, env, actor.obs_groups, flags.dump_steps)
        result, video, viewer = _evaluate(
            env, act, flags, source, output.parent, spec.name, viewer_kind, device, initial
        )
        if dump is not None and dump_path is not None:
            dump.write(dump_path)
        baselines = (
            _evaluate_baselines(spec, env_cfg, device, agent_cfg.seed, flags.episodes, initial, flags.quiet)
            if flags.baselines
            else None
        )
        exported, export_error = None, None
        if flags.export:
            from mjfleet.deploy.check import ExportError
            from mjfleet.deploy.play_export import export_checkpoint_policy

            assert (
                source.state is not None and source.checkpoint is not None
            )  # check_flags: needs a checkpoint
            try:
                exported = export_checkpoint_policy(
                    env, actor, obs, spec.name, source.checkpoint, source.state, flags.command,
                    out=source.out_dir / "exported",
                )  # fmt: skip
            except ExportError as exc:  # the evaluation is kept (eval.json below), then the error ends play
                exported, export_error = {"error": str(exc)}, exc

    summary = {
        "task": spec.name,
        "policy": flags.policy,
        "checkpoint": str(source.checkpoint) if source.checkpoint else None,
        "iteration": source.state["iter"] if source.state is not None else None,
        "deterministic": flags.policy == "checkpoint" and not flags.stochastic,
        "num_envs": env_cfg.num_envs,
        "device": device,
        "seed": agent_cfg.seed,
        "command": list(flags.command) if flags.command is not None else None,
        "env_settings": "play" if play_keys else "train",
        **result,
        "trouble": trouble_shares(result),
        "baselines": baselines,
        "wall_s": time.perf_counter() - start,
        "video": str(video.path) if video is not None else None,
        "viewer": viewer.summary or None,
        "exported": exported,
        "action_percentiles": recorder.percentiles(*flags.action_percentiles) if recorder else None,
        "initial_state": flags.initial_state,
        "dumped": {"path": str(dump_path), "steps": len(dump.rows)} if dump is not None else None,
        "env_cfg": applied_env_cfg(env_cfg, env),
    }
    if baselines is None:  # an earlier --baselines at this output, evaluated as these would be, stays
        summary["baselines"] = kept_baselines(output, summary, flags.episodes)
    atomic.write_text(output, json.dumps(summary, indent=2) + "\n")
    print_summary(summary, source.label, output)
    if export_error is not None:
        raise export_error
    return summary


BASELINE_CONDITIONS = (
    "task",
    "num_envs",
    "device",
    "seed",
    "command",
    "env_settings",
    "initial_state",
    "env_cfg",
)
"""What the zero and random baselines depend on (not the checkpoint): equal, an earlier evaluation's still hold."""


def kept_baselines(output: pathlib.Path, summary: dict[str, Any], episodes: int) -> dict[str, Any] | None:
    """The baselines an earlier `play --baselines` wrote to `output`, when they were evaluated under this
    evaluation's conditions (`BASELINE_CONDITIONS`, and as many episodes): `play --export` after `play
    --baselines` keeps the table instead of dropping it. None when there are none or they do not fit."""
    try:
        previous = json.loads(output.read_text())
        baselines = previous["baselines"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(baselines, dict) or not baselines:
        return None
    now = json.loads(json.dumps({k: summary[k] for k in BASELINE_CONDITIONS}))  # tuples as the file has them
    if any(previous.get(k) != v for k, v in now.items()):
        return None
    if any(not isinstance(b, dict) or b.get("episodes") != episodes for b in baselines.values()):
        return None
    print(f"baselines: kept from the earlier evaluation in {output} (same seed, episodes and settings)")
    return baselines


def play_device(gpu_ids: tuple[str, ...]) -> str:
    """The one device of --gpu-ids (auto: GPU 0 if CUDA is available, else the CPU, with a notice)."""
    from mjfleet.launch.devices import make_plan, parse_gpu_ids

    tokens = None if list(gpu_ids) == ["auto"] else list(gpu_ids)
    plan = make_plan(parse_gpu_ids(tokens))
    if plan.world_size > 1:
        raise UsageError("play runs on one device: pass one GPU id, or None for CPU")
    if plan.notice:
        print(plan.notice)
    return plan.devices[0]


def writable_output(path: str | None, out_dir: pathlib.Path) -> pathlib.Path:
    """Where eval.json goes (--output, else `out_dir`), checked before the evaluation, not after it: a path that
    cannot be written is the user's to fix."""
    output = pathlib.Path(path) if path else out_dir / "eval.json"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if not os.access(output.parent, os.W_OK):
        raise UsageError(f"cannot write {output}: {output.parent} is not writable")
    return output


def _evaluate(
    env: Any,
    act: Any,
    flags: Any,
    source: PolicySource,
    out_dir: pathlib.Path,
    task: str,
    viewer_kind: str | None,
    device: str,
    initial: InitialState | None = None,
) -> tuple:
    """The evaluation of `act`, with the video and the viewer that `flags` ask for: (result, video, viewer)."""
    import torch

    from mjfleet.evaluation import evaluate

    video = None
    if flags.video:
        from mjfleet.play.video import PlayVideo

        tag = source.state["iter"] if source.state is not None else flags.policy
        video = PlayVideo(env, flags, out_dir, tag)
    viewer = open_viewer(viewer_kind, env, act, flags, task, source.checkpoint, device)
    try:
        torch.manual_seed(flags.agent.seed)  # the baselines start from the same states and commands
        with Progress(PROG, flags.episodes, "episodes", quiet=flags.quiet) as bar:
            episodes = EpisodeBar(bar, flags.episodes)
            result = evaluate(
                env,
                viewer.policy,
                flags.episodes,
                frame_sink=video.write_frame if video is not None else None,
                video_length=flags.video_length,
                on_step=viewer.on_step,
                start=(lambda: start_from(env, initial)) if initial is not None else None,
                progress=None if flags.quiet else episodes,
            )
            episodes.finish(result)
    except BaseException:
        if video is not None:
            video.abort()
        raise
    finally:
        if video is not None:
            video.close_renderer()
        viewer.close()
    if video is not None:
        video.finish()
    return result, video, viewer


def _evaluate_baselines(
    spec: Any,
    env_cfg: Any,
    device: str,
    seed: int,
    episodes: int,
    initial: InitialState | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Zero and random actions, each in a fresh environment seeded as the first: the same per-environment physics
    draws, pushes, initial states (--initial-state's too) and commands (the random policy draws from a generator of
    its own)."""
    import torch

    from mjfleet.evaluation import BASELINES, evaluate

    baselines = {}
    for name in BASELINES:
        torch.manual_seed(seed)
        baseline_env = spec.make_env(env_cfg, device)
        policy = baseline_policy(name, baseline_env, seed)
        torch.manual_seed(seed)
        start = (lambda e=baseline_env: start_from(e, initial)) if initial is not None else None
        with Progress(f"{PROG} baseline {name}", episodes, "episodes", quiet=quiet) as bar:
            shown = EpisodeBar(bar, episodes)
            baselines[name] = evaluate(
                baseline_env, policy, episodes, start=start, progress=None if quiet else shown
            )
            shown.finish(baselines[name])
    return baselines

"""Policies out of checkpoints: rebuild the actor for inference, export it to ONNX (+ TorchScript), check it.

The exported policy takes one float32 input `obs` of shape (batch, obs_dim): the concatenation of the actor's
observation groups in the order listed in policy.json, UNnormalised (the observation normaliser is part of the
graph). It outputs `actions` (batch, num_actions): the deterministic (mean) action, before clipping and scaling.
A recurrent actor's graph also takes its hidden state (`h_in`, and `c_in` for an LSTM; (layers, batch, hidden))
and returns the next one (`h_out`, `c_out`); policy.json's `state` says how a deployment carries and resets it.
policy.pt (TorchScript) is called alike: `policy(obs)`, or `policy(obs, h_in[, c_in])` -> (actions, h_out[, c_out]).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict

from mjfleet import atomic
from mjfleet.deploy.check import (
    ONNX_TOLERANCE,
    actor_input_groups,
    check_onnx,
    check_recurrent_onnx,
    check_recurrent_torchscript,
    check_torchscript,
    recurrent_state,
)
from mjfleet.deploy.metadata import FORMAT, write_onnx_metadata

ONNX_OPSET = 18
_MJCF_TEXT = "_mjcf_xml"
"""policy_metadata's key for the model's MJCF text and asset files, which export_policy writes beside the policy."""


def build_actor(state: dict[str, Any], obs: TensorDict, num_actions: int, device: str | torch.device = "cpu"):
    """The actor a checkpoint describes (normaliser included), rebuilt by the algorithm that trained it
    (`mjfleet.rl.algorithm`), in eval mode, on `device`. `obs` is one observation batch of the environment the
    policy will act in (for the group sizes)."""
    from mjfleet.rl.algorithm import actor_from_checkpoint

    return actor_from_checkpoint(state, obs, num_actions, device)


def policy_metadata(
    env, actor, obs: TensorDict, task: str, evaluation_command: Sequence[float] | None = None, **extra: Any
) -> dict[str, Any]:
    """What a deployment needs besides the network: input layout, action post-processing, control rate.

    `evaluation_command` is play's --command where it fixed one: recorded as `deployment["evaluation_command"]`,
    beside the training command ranges (`deployment["commands"]`), never in their place."""
    groups = actor_input_groups(actor, obs)
    cfg = getattr(env, "cfg", None)
    meta: dict[str, Any] = {
        "format": FORMAT,
        "task": task,
        "input": {
            "name": "obs",
            "size": sum(g["size"] for g in groups),
            "groups": groups,
            "terms": observation_slices(env, groups),
            "normalization": "included in the graph" if actor.obs_normalization else "none",
        },
        "output": {"name": "actions", "size": int(env.num_actions)},
        "control_rate_hz": 1.0 / float(env.step_dt),
        "step_dt": float(env.step_dt),
    }
    actions: dict[str, Any] = {}
    if cfg is not None:
        for key in ("clip_actions", "action_scale", "decimation"):
            if hasattr(cfg, key):
                actions[key] = _plain(getattr(cfg, key))
    joint_scale = getattr(env, "joint_action_scale", None)
    if joint_scale is not None:  # per joint (locomotion tasks): one number per action
        actions["action_scale"] = _plain(joint_scale)
    offset = getattr(env, "default_joint_pos", None)
    if offset is not None:
        actions["default_joint_pos"] = _plain(offset)
    # ctrl = offset + action_scale * action (before the ctrlrange clip): the default pose for position targets.
    actions["offset"] = _plain(offset) if offset is not None else [0.0] * int(env.num_actions)
    meaning = getattr(env, "action_meaning", None)
    if meaning:
        actions["meaning"] = meaning
    mj_model = getattr(env, "mj_model", None)
    if mj_model is not None:
        from mjfleet.sim.simulation import model_name  # loaded already: the env simulates with it

        meta["model"] = {
            "name": model_name(mj_model),
            "nq": int(mj_model.nq),
            "nv": int(mj_model.nv),
            "nu": int(mj_model.nu),
            "timestep": float(mj_model.opt.timestep),
        }
        actions["actuators"] = [mj_model.actuator(i).name for i in range(mj_model.nu)]
        actions.update(_actuated_joints(mj_model))
        # MuJoCo clamps each limited actuator's control to its range: a deployment must too.
        actions["ctrlrange"] = [
            [float(lo), float(hi)] if limited else None
            for (lo, hi), limited in zip(
                mj_model.actuator_ctrlrange, mj_model.actuator_ctrllimited, strict=True
            )
        ]
        target = "default_joint_pos + " if offset is not None else ""
        actions["control"] = (
            f"ctrl = clip({target}action_scale * clip(action, -clip_actions, clip_actions), ctrlrange)"
        )
    meta["actions"] = actions
    meta["episode"] = {
        "max_steps": int(env.max_episode_length),
        "length_s": float(cfg.episode_length_s) if cfg is not None else None,
        # After each step the first of these that holds ends the episode (MujocoVecEnv.step_op_by_op): a state that
        # is not finite (cause "nan"), the task's terminations in order, then the step limit (a time-out only when
        # nothing else ended the episode on that step).
        "end_checks": ["non_finite_state", "terminations", "time_out"],
    }
    from mjfleet.deploy import metadata
    from mjfleet.runs.provenance import versions

    meta["versions"] = versions()
    meta.update({k: _plain(v) for k, v in extra.items()})
    rules = getattr(env, "deployment_rules", None)
    if callable(rules):  # the task states how its episodes run (reset, terminations, rewards, commands)
        deployment = rules(metadata.trained_env_cfg(extra.get("checkpoint")))
        if deployment is not None:
            metadata.rules_for_input(deployment, meta["input"]["terms"])
        if deployment is not None and deployment.get("commands"):
            fixed = metadata.evaluation_command(deployment["commands"], evaluation_command)
            deployment["evaluation_command"] = fixed
        meta["deployment"] = deployment
    model_files = metadata.model_xml(env)
    if model_files is not None:
        meta["mjcf"] = metadata.MJCF_FILE
        meta["mjcf_assets"] = sorted(model_files[1])
        meta[_MJCF_TEXT] = model_files  # written by export_policy beside policy.onnx
    meta["mjlab"] = metadata.mjlab_metadata(meta, str(extra.get("checkpoint") or ""))
    return meta


def observation_slices(env, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each named observation term of the exported input: {"name", "group", "start", "stop"}, [start, stop) columns
    of the concatenated `obs` vector, from the environment's `observation_terms()` (a group it does not describe
    is one term named after the group), and `"clip": [low, high]` for a term its `observation_clips()` names.
    ValueError when a group's terms do not add up to its size."""
    described = getattr(env, "observation_terms", dict)()
    clips = getattr(env, "observation_clips", dict)()
    slices, start = [], 0
    for group in groups:
        terms = described.get(group["name"]) or [(group["name"], group["size"])]
        total = sum(size for _, size in terms)
        if total != group["size"]:
            raise ValueError(
                f"observation group {group['name']!r} has {group['size']} columns but its terms name {total}"
            )
        for name, size in terms:
            term = {"name": name, "group": group["name"], "start": start, "stop": start + size}
            if name in clips:
                term["clip"] = [float(bound) for bound in clips[name]]
            slices.append(term)
            start += size
    return slices


def _actuated_joints(mj_model) -> dict[str, Any]:
    """The joint each actuator drives, in action order, and for position actuators (MuJoCo's `position`: force =
    kp (ctrl - q) - kv qdot) their gains; None where an actuator is not of that kind."""
    import mujoco

    joints, stiffness, damping = [], [], []
    for i in range(mj_model.nu):
        on_joint = mj_model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT
        joints.append(mj_model.joint(mj_model.actuator_trnid[i, 0]).name if on_joint else None)
        kp, bias = float(mj_model.actuator_gainprm[i, 0]), mj_model.actuator_biasprm[i]
        position = (
            mj_model.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_FIXED
            and mj_model.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_AFFINE
            and float(bias[1]) == -kp
        )
        stiffness.append(kp if position else None)
        damping.append(-float(bias[2]) if position else None)
    return {"joint_names": joints, "stiffness": stiffness, "damping": damping}


def export_policy(
    actor, obs: TensorDict, out_dir: str | os.PathLike, metadata: dict[str, Any], *, torchscript: bool = True
) -> dict[str, pathlib.Path]:
    """Write policy.onnx (+ policy.pt) and policy.json to `out_dir`, after checking ONNX against torch.

    Raises ExportError when the ONNX model's outputs differ from the torch policy's by more than ONNX_TOLERANCE.
    Each file is replaced whole (`mjfleet.atomic`), so a reader never sees a half-written policy; policy.json last.
    """
    state = recurrent_state(actor)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, pathlib.Path] = {}
    metadata = dict(metadata)
    model_files = metadata.pop(_MJCF_TEXT, None)
    if (
        model_files is not None
    ):  # the model the policy was trained with, so that the folder deploys on its own
        xml, assets = model_files
        for name, data in {metadata["mjcf"]: xml.encode(), **assets}.items():
            target = out_dir / name  # meshes go to assets/ (mjfleet.robots.mjcf.bundle_files)
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(target, data)
        written["mjcf"] = out_dir / metadata["mjcf"]

    # The ONNX graph (under policy.onnx's temporary name) and the TorchScript module (in memory) are made and
    # checked first: policy.json's `files`, `onnx` and `torchscript` entries come from them, and policy.onnx
    # carries all of policy.json. A failed check leaves the previous export as it was.
    written["onnx"] = out_dir / "policy.onnx"
    with atomic.staged(written["onnx"]) as tmp:
        _export_onnx(actor, tmp, state)
        max_diff = check_onnx(tmp, actor, obs) if state is None else check_recurrent_onnx(tmp, actor, obs)
        onnx_info = {"opset": ONNX_OPSET, "max_abs_diff_vs_torch": max_diff, "tolerance": ONNX_TOLERANCE}
        torchscript_file, torchscript_diff = None, None
        if torchscript:
            try:
                scripted = _torchscript(actor, state is not None)
                if state is None:
                    torchscript_diff = check_torchscript(scripted, actor, obs)
                else:
                    torchscript_diff = check_recurrent_torchscript(scripted, actor, obs)
                torchscript_file = scripted.save_to_buffer()  # what scripted.save(path) writes
                written["torchscript"] = out_dir / "policy.pt"
            except Exception as exc:  # noqa: BLE001 - TorchScript is a bonus; ONNX is the deliverable
                warnings.warn(f"TorchScript export skipped: {exc}", stacklevel=2)

        meta = dict(metadata)
        if state is not None:
            meta["state"] = state
        meta["files"] = {kind: path.name for kind, path in written.items()}
        meta["onnx"] = onnx_info
        if torchscript_diff is not None:
            meta["torchscript"] = {"max_abs_diff_vs_torch": torchscript_diff, "tolerance": ONNX_TOLERANCE}
        write_onnx_metadata(tmp, meta)
    if torchscript_file is not None:
        atomic.write_bytes(written["torchscript"], torchscript_file)
    else:  # an older export's file must not pass for this one
        (out_dir / "policy.pt").unlink(missing_ok=True)
    json_path = out_dir / "policy.json"
    atomic.write_text(json_path, json.dumps(meta, indent=2) + "\n")
    written["metadata"] = json_path
    return written


class _RecurrentStep(torch.nn.Module):
    """A recurrent actor's step as its ONNX graph takes it: (obs, *state) -> (actions, *next state). rsl_rl's own
    TorchScript model keeps one robot's state inside; this one serves a batch and leaves the state to its caller."""

    def __init__(self, actor) -> None:
        super().__init__()
        self.step = actor.as_onnx(verbose=False).to("cpu").eval()

    def forward(self, obs: torch.Tensor, *state: torch.Tensor):
        return tuple(t for t in self.step(obs, *state) if t is not None)  # a GRU's step has no cell state


def _torchscript(actor, recurrent: bool):
    """The actor as TorchScript: scripted (feed-forward) or traced with its state in and out (recurrent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not recurrent:
            return torch.jit.script(actor.as_jit().to("cpu").eval())
        step = _RecurrentStep(actor)
        return torch.jit.trace(step, step.step.get_dummy_inputs())


def _export_onnx(actor, path: pathlib.Path, state: dict[str, Any] | None = None) -> None:
    module = actor.as_onnx(verbose=False).to("cpu").eval()
    batch_axes = {"obs": {0: "batch"}, "actions": {0: "batch"}}
    for name in (state["inputs"] + state["outputs"]) if state is not None else ():  # (layers, batch, hidden)
        batch_axes[name] = {1: "batch"}
    dummy = module.get_dummy_inputs()
    common = {
        "opset_version": ONNX_OPSET,
        "input_names": module.input_names,
        "output_names": module.output_names,
    }
    try:
        # The TorchScript-based exporter: quick, and the graph it writes is plain (Gemm/Elu/Sub/Div).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, dummy, str(path), dynamic_axes=batch_axes, dynamo=False, **common)
        return
    except (TypeError, RuntimeError, ImportError):  # newer torch without the legacy exporter
        pass
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = torch.export.Dim("batch")
        dynamic_shapes = ({0: batch},) + tuple(
            {1: batch} for _ in (state["inputs"] if state is not None else ())
        )
        torch.onnx.export(
            module,
            dummy,
            str(path),
            dynamic_shapes=dynamic_shapes,
            dynamo=True,
            external_data=False,
            **common,
        )


def _plain(value: Any) -> Any:
    """`to_plain` with tensors as lists: one vector for per-environment copies of it."""
    from mjfleet.runs.run_dir import to_plain

    return to_plain(value, _tensor_as_list)


def _tensor_as_list(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    if value.dim() == 2:  # per-environment copies of the same vector
        if not bool((value == value[0]).all()):
            raise ValueError("per-environment values differ: there is no one value to export")
        value = value[0]
    if value.dtype == torch.float32:
        from mjfleet.runs.run_dir import float32_list

        return float32_list(value)
    return value.tolist()

"""What an export needs beyond the network: the model as MJCF, the task's rules, and mjlab's metadata keys.

`policy_metadata` (deploy/export.py) gathers these from the environment; `export_policy` writes them beside
policy.onnx. docs/deploy.md defines every field; docs/coming-from-mjlab.md the mjlab keys.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

from mjfleet.deploy.check import ExportError

FORMAT = 2
"""policy.json's layout (its `format` entry; a file without one is format 1). docs/deploy.md lists what changed."""
MJCF_FILE = "model.xml"
MJLAB_KEYS = (
    "run_path",
    "joint_names",
    "joint_stiffness",
    "joint_damping",
    "default_joint_pos",
    "action_scale",
    "command_names",
    "observation_names",
    "observation_terms_scale",
    "observation_terms_history_length",
    "observation_terms_flatten_history_dim",
    "observation_terms_clip",
)
"""The keys mjlab's exporter writes (its velocity task's base metadata), as plain strings in the ONNX file."""
# The model fields an exported MJCF must reproduce exactly (everything the physics of a policy step reads).
CHECKED_MODEL_FIELDS = (
    "nq", "nv", "nu", "ngeom", "nbody", "njnt", "nsensor", "nhfield",
    "qpos0", "body_mass", "body_inertia", "body_pos", "body_quat", "body_ipos",
    "jnt_range", "jnt_type", "dof_damping", "dof_armature", "dof_frictionloss",
    "geom_type", "geom_size", "geom_friction", "geom_pos", "geom_quat", "geom_contype", "geom_conaffinity",
    "geom_priority", "geom_condim", "geom_solref", "geom_solimp", "geom_margin",
    "actuator_gainprm", "actuator_biasprm", "actuator_ctrlrange", "actuator_forcerange", "actuator_gear",
    "actuator_trnid", "sensor_type", "sensor_adr", "key_qpos", "hfield_data", "hfield_size",
    "nmesh", "nmeshvert", "geom_dataid", "mesh_vert",
)  # fmt: skip


MODEL_TOLERANCE = 1e-12
"""Largest difference allowed between a field of the trained model and the exported MJCF's: orientations written
as `fromto` recompile with rounding in the last bit (1e-16); the simulation itself runs in float32."""


class ModelMismatchError(ExportError):
    """The MJCF written for an export does not compile to the model the policy was trained with."""


def model_xml(env) -> tuple[str, dict[str, bytes]] | None:
    """(The MJCF of the environment's model, the files it loads by name), or None when the env kept no MjSpec to
    write it from. Checked to compile to the same MjModel (options exactly, every field in CHECKED_MODEL_FIELDS to
    MODEL_TOLERANCE).

    Heightfields go to binary files (MuJoCo's format: int32 nrow, int32 ncol, float32 data): as text in the XML
    they would be 12 MB for the rough terrain and rounded in the 7th digit. Mesh and texture files are copied
    (`mjfleet.robots.mjcf.bundle_files`), so that the folder runs without the robot's own files."""
    import mujoco
    import numpy as np

    from mjfleet.robots.mjcf import bundle_files

    spec = getattr(env, "mj_spec", None)
    if spec is None:
        return None
    spec = spec.copy()
    files = bundle_files(spec)
    for hfield in spec.hfields:
        if len(hfield.userdata):
            name = f"{hfield.name or 'hfield'}.bin"
            header = np.array([hfield.nrow, hfield.ncol], dtype=np.int32).tobytes()
            files[name] = header + np.asarray(hfield.userdata, dtype=np.float32).tobytes()
            hfield.file, hfield.userdata = name, []
    spec.assets = files  # to_xml compiles the spec, reading the files from here
    xml = spec.to_xml()
    trained, written = env.mj_model, mujoco.MjModel.from_xml_string(xml, files)
    for field in CHECKED_MODEL_FIELDS:
        a, b = np.asarray(getattr(trained, field)), np.asarray(getattr(written, field))
        if a.shape != b.shape or not np.allclose(a, b, rtol=MODEL_TOLERANCE, atol=MODEL_TOLERANCE):
            raise ModelMismatchError(
                f"the exported MJCF's {field} differs from the trained model's (MuJoCo writes 6 significant "
                "digits: a geom whose compiled size or orientation needs more, e.g. a tilted `fromto`, does not "
                "survive; author it axis-aligned or with pos/quat/size of few digits)"
            )
    for field in ("timestep", "gravity", "integrator", "cone", "solver", "iterations", "ls_iterations",
                  "disableflags", "enableflags", "impratio", "tolerance"):  # fmt: skip
        a, b = np.asarray(getattr(trained.opt, field)), np.asarray(getattr(written.opt, field))
        if not np.array_equal(a, b):
            raise ModelMismatchError(f"the exported MJCF's option {field} differs from the trained model's")
    return xml, files


def trained_env_cfg(checkpoint: str | None) -> dict[str, Any] | None:
    """The env config a checkpoint was trained with (its `infos["env_cfg"]`), or None when unknown.

    Read as plain data (`weights_only=True`), as every checkpoint is: an export may be made from a checkpoint
    copied from elsewhere, whose pickle must not run. A file that does not load that way is a UsageError."""
    if not checkpoint or not pathlib.Path(checkpoint).is_file():
        return None
    from mjfleet.runs.checkpoints import read_checkpoint

    state = read_checkpoint(checkpoint, map_location="cpu")
    return (state.get("infos") or {}).get("env_cfg")


def rules_for_input(deployment: dict[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
    """The task's rules (`deployment`) for this export's input `terms` (input.terms), so that each list says whose it
    is: `observations` becomes exactly the input's sources, in input order; every other source the task names (the
    quadruped's base_lin_vel under a `policy`-group input, which the rewards read) moves to `quantities`, which the
    episode computes and the policy never sees; `observation_noise`'s groups become one entry per input term."""
    sources = {source["name"]: source for source in deployment["observations"]}
    names = list(dict.fromkeys(term["name"] for term in terms))
    deployment["observations"] = [sources[name] for name in names if name in sources]
    episode_only = [source for name, source in sources.items() if name not in names]
    deployment["quantities"] = episode_only + (deployment.get("quantities") or [])
    noise = deployment.get("observation_noise")
    if noise is not None:
        groups, exact = noise.pop("groups"), {"per_step": 0.0, "per_episode": 0.0}
        noise["terms"] = [
            {"name": t["name"], "group": t["group"], **groups.get(t["group"], {}).get(t["name"], exact)}
            for t in terms
        ]
    return deployment


def evaluation_command(
    commands: dict[str, Any] | None, command: tuple[float, ...] | list[float] | None
) -> dict[str, list[float]] | None:
    """`deployment["evaluation_command"]`: the command `play --command` held in every evaluation episode, keyed by
    the name of the task's one command as in `deployment["commands"]` ({"twist": [vx, vy, wz]}); None when play
    drew its commands. Kept apart from `commands`, which are always the training ranges."""
    if command is None:
        return None
    if not commands or len(commands) != 1:
        raise ValueError(
            f"a fixed evaluation command needs exactly one task command, the task has {len(commands or {})}"
        )
    (name, spec), values = next(iter(commands.items())), [float(v) for v in command]
    if len(values) != len(spec["columns"]):
        raise ValueError(
            f"the evaluation command has {len(values)} values, {name} has columns {spec['columns']}"
        )
    return {name: values}


def csv(values: list[Any]) -> str:
    """mjlab's list encoding: numbers with three decimals, strings as they are, a nested list's numbers joined by
    ';', entries by ','."""

    def one(x: Any) -> str:
        if isinstance(x, (list, tuple)):
            return ";".join(one(v) for v in x)
        return f"{x:.3f}" if isinstance(x, (int, float)) else str(x)

    return ",".join(one(v) for v in values)


def mjlab_metadata(meta: dict[str, Any], run_path: str) -> dict[str, str]:
    """mjlab's metadata keys from mjfleet's metadata `meta`, encoded as mjlab encodes them (docs/coming-from-mjlab.md
    says where the meanings differ)."""
    actions, terms = meta["actions"], meta["input"]["terms"]
    nu = meta["output"]["size"]
    scale = actions.get("action_scale", 1.0)
    scale = list(scale) if isinstance(scale, (list, tuple)) else [float(scale)] * nu
    # Joint position servos have a stiffness and damping; other actuators (cart-pole's motor) have neither: 0.
    stiffness = [0.0 if k is None else k for k in actions.get("stiffness", [None] * nu)]
    damping = [0.0 if d is None else d for d in actions.get("damping", [None] * nu)]
    joint_names = [
        j if j is not None else f"actuator_{i}" for i, j in enumerate(actions.get("joint_names") or [])
    ]
    deployment = meta.get("deployment") or {}
    commands = list((deployment.get("commands") or {}).keys())
    clip = [t.get("clip", [-math.inf, math.inf]) for t in terms]  # the task's observation spec (input.terms)
    values: dict[str, Any] = {
        "run_path": run_path,
        "joint_names": joint_names,
        "joint_stiffness": stiffness,
        "joint_damping": damping,
        "default_joint_pos": list(actions.get("offset", [0.0] * nu)),
        "action_scale": scale,
        "command_names": commands,
        "observation_names": [t["name"] for t in terms],
        "observation_terms_scale": [1.0] * len(terms),
        "observation_terms_history_length": [0] * len(terms),
        "observation_terms_flatten_history_dim": [True] * len(terms),
        "observation_terms_clip": clip,
    }
    return {k: csv(v) if isinstance(v, list) else str(v) for k, v in values.items()}


def write_onnx_metadata(path: pathlib.Path, meta: dict[str, Any]) -> None:
    """Each top-level entry of policy.json (`meta`, all of it) as a JSON string in the ONNX model's metadata_props,
    so that a deployment holding only policy.onnx reads the same (onnx.load(path).metadata_props); the entries of
    `meta["mjlab"]` as top-level plain strings instead, under mjlab's own keys and in its encoding."""
    import onnx

    model = onnx.load(str(path))
    del model.metadata_props[:]
    for key, value in meta.items():
        if key != "mjlab":
            model.metadata_props.add(key=key, value=json.dumps(value))
    for key, value in (meta.get("mjlab") or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))

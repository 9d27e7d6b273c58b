"""A robot's model as the MJCF text an export writes: its files gathered, and the numbers MuJoCo's XML keeps.

MuJoCo writes an MjSpec as XML with 6 significant digits (MjSpec.to_xml): an armature mjfleet computes from a
rotor and a gearbox (0.004026312) comes back as 0.00402631. A task that trains the model as `build_robot` made it
would then export a different model. `as_written` gives the model the MJCF says instead: the spec written once and
read back, which writing again reproduces exactly; that is the model a described robot's task trains and exports.
"""

from __future__ import annotations

import pathlib

import mujoco

ASSETS_DIR = "assets"
"""Where the files a model loads (meshes, textures) go beside an exported MJCF, named relative to it."""


def bundle_files(spec: mujoco.MjSpec) -> dict[str, bytes]:
    """The mesh and texture files `spec` loads, read now (from `spec.assets` where they are there, else from the
    MJCF's folder) and renamed in `spec`, changed in place, to `assets/<path relative to meshdir or texturedir>`
    with meshdir and texturedir cleared: the MJCF then names them relative to itself."""
    root = pathlib.Path(spec.modelfiledir or ".")
    held = dict(spec.assets or {})
    files: dict[str, bytes] = {}
    for items, folder in ((spec.meshes, spec.meshdir), (spec.textures, spec.texturedir)):
        base = root / folder if folder else root
        for item in items:
            if not item.file:
                continue
            if item.file in held:  # bundled already (a spec read back by `as_written`)
                files[item.file] = held[item.file]
                continue
            path = pathlib.PurePosixPath(item.file.replace("\\", "/"))
            name = f"{ASSETS_DIR}/{path.as_posix()}"
            if path.is_absolute() or ".." in path.parts:  # kept inside the export's folder
                name = f"{ASSETS_DIR}/{len(files)}_{path.name}"
            files[name] = (base / item.file).read_bytes()
            item.file = name
    spec.meshdir, spec.texturedir = "", ""
    return files


def as_written(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    """`spec` written as MJCF and read back (its files bundled as `bundle_files` names them, in `.assets`)."""
    copy = spec.copy()
    files = bundle_files(copy)
    copy.assets = files
    return mujoco.MjSpec.from_string(copy.to_xml(), assets=files)

"""Does an exported policy act as the torch policy does? Checked on random observations at every export."""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict

ONNX_TOLERANCE = 1e-5
"""Largest allowed |onnx - torch| over random observations."""


class ExportError(RuntimeError):
    """The exported policy does not reproduce the torch policy."""


def actor_input_groups(actor, obs: TensorDict) -> list[dict[str, Any]]:
    """[{"name": group, "size": n}, ...] in the order the actor concatenates them."""
    return [{"name": g, "size": int(obs[g].shape[-1])} for g in actor.obs_groups]


def check_onnx(path: str | os.PathLike, actor, obs: TensorDict, samples: int = 256, seed: int = 0) -> float:
    """Max |onnx - torch| of the deterministic action on random observations; ExportError above tolerance.

    Runs the graph with onnxruntime (the `deploy` extra) where it is installed, else with onnx's own reference
    evaluator (numpy): training and play do not need onnxruntime, and the export is checked either way."""
    import numpy as np

    x, expected = _reference_actions(actor, obs, samples, seed)
    inputs = {"obs": x.numpy().astype(np.float32)}
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        (got,) = ReferenceEvaluator(str(path)).run(["actions"], inputs)
        return _checked("ONNX", got, expected)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(["actions"], inputs)
    return _checked("ONNX", got, expected)


def check_torchscript(scripted, actor, obs: TensorDict, samples: int = 256, seed: int = 0) -> float:
    """Max |torchscript - torch| of the deterministic action on random observations; ExportError above tolerance."""
    x, expected = _reference_actions(actor, obs, samples, seed)
    with torch.inference_mode():
        got = scripted(x).float().numpy()
    return _checked("TorchScript", got, expected)


def _checked(kind: str, got, expected) -> float:
    import numpy as np

    max_diff = float(np.abs(got - expected).max())
    if not max_diff <= ONNX_TOLERANCE:
        raise ExportError(
            f"exported {kind} policy differs from the torch policy by {max_diff:.3g} (> {ONNX_TOLERANCE:g}) on "
            "random observations"
        )
    return max_diff


def _reference_actions(actor, obs: TensorDict, samples: int, seed: int):
    """(random concatenated observations on the CPU, the torch actor's deterministic actions for them)."""
    groups = actor_input_groups(actor, obs)
    generator = torch.Generator().manual_seed(seed)
    # Standard-normal inputs (around the normaliser's statistics when there is one): the scale observations have.
    x = torch.randn(samples, sum(g["size"] for g in groups), generator=generator)
    if actor.obs_normalization:
        norm = actor.obs_normalizer
        x = x * norm.std.cpu() + norm.mean.cpu()
    parts = torch.split(x, [g["size"] for g in groups], dim=1)
    batch = TensorDict({g["name"]: p for g, p in zip(groups, parts, strict=True)}, batch_size=[samples])
    device = next(actor.parameters()).device
    with torch.inference_mode():
        expected = actor(batch.to(device)).float().cpu().numpy()
    return x, expected

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
    (got,) = _onnx_runner(path)(["actions"], {"obs": x.numpy().astype(np.float32)})
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


def check_recurrent_onnx(path: str | os.PathLike, actor, obs: TensorDict) -> float:
    """`check_recurrent` of an ONNX graph. Needs onnxruntime (the `deploy` extra) or onnx's evaluator."""
    return check_recurrent("recurrent ONNX", _onnx_runner(path), actor, obs)


def check_recurrent_torchscript(scripted, actor, obs: TensorDict) -> float:
    """`check_recurrent` of a TorchScript module called as the ONNX graph is: (obs, *state) -> (actions, *state)."""
    inputs = ["obs", *recurrent_state(actor)["inputs"]]

    def run(names, feeds):
        with torch.inference_mode():
            return [t.numpy() for t in scripted(*(torch.from_numpy(feeds[name]) for name in inputs))]

    return check_recurrent("recurrent TorchScript", run, actor, obs)


def check_recurrent(kind: str, run, actor, obs: TensorDict, steps: int = 24, robots: int = 8) -> float:
    """Max |exported - torch| of a recurrent actor's deterministic actions over `steps` steps of `robots` robots,
    each carrying its hidden state from step to step and zeroing it when its episode ends (at random steps), as a
    deployment does; ExportError above tolerance. `run(output names, feeds)` runs the export's step."""
    import numpy as np

    x, batch = _random_observations(actor, obs, steps * robots, seed=0)
    ends = torch.rand(steps, robots, generator=torch.Generator().manual_seed(1)) < 0.15
    device = next(actor.parameters()).device
    kept = actor.get_hidden_state()  # the actor's own state (a training rollout's) is given back afterwards
    actor.reset()
    expected = []
    try:
        with torch.inference_mode():
            for t in range(steps):
                expected.append(actor(batch[t * robots : (t + 1) * robots].to(device)).float().cpu().numpy())
                actor.reset(ends[t].float().to(device))
    finally:
        actor.reset(hidden_state=kept)
    state = recurrent_state(actor)
    carried = {
        name: np.zeros(state["shape"][:1] + [robots] + state["shape"][2:], np.float32)
        for name in state["inputs"]
    }
    got = []
    for t in range(steps):
        feeds = {"obs": x[t * robots : (t + 1) * robots].numpy().astype(np.float32), **carried}
        actions, *states = run(["actions", *state["outputs"]], feeds)
        got.append(actions)
        for name, value in zip(state["inputs"], states, strict=True):
            carried[name] = np.where(ends[t].numpy()[None, :, None], 0.0, value).astype(np.float32)
    return _checked(kind, np.stack(got), np.stack(expected))


def recurrent_state(actor) -> dict[str, Any] | None:
    """What a deployment keeps between steps for a recurrent actor (None for a feed-forward one): the ONNX
    inputs and outputs of its hidden state, their shape (num_layers, batch, hidden) and the reset rule."""
    if not getattr(actor, "is_recurrent", False):
        return None
    rnn = actor.rnn.rnn
    kind = "lstm" if isinstance(rnn, torch.nn.LSTM) else "gru"
    inputs, outputs = (["h_in", "c_in"], ["h_out", "c_out"]) if kind == "lstm" else (["h_in"], ["h_out"])
    return {
        "type": kind,
        "inputs": inputs,
        "outputs": outputs,
        "shape": [rnn.num_layers, "batch", rnn.hidden_size],
        "initial": 0.0,
        "reset": "zeros at the start of every episode, per robot; otherwise feed each step's outputs back as the "
        "next step's inputs",
    }


def _onnx_runner(path: str | os.PathLike):
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(str(path)).run
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run


def _reference_actions(actor, obs: TensorDict, samples: int, seed: int):
    """(random concatenated observations on the CPU, the torch actor's deterministic actions for them)."""
    x, batch = _random_observations(actor, obs, samples, seed)
    device = next(actor.parameters()).device
    with torch.inference_mode():
        expected = actor(batch.to(device)).float().cpu().numpy()
    return x, expected


def _random_observations(actor, obs: TensorDict, samples: int, seed: int):
    """(random concatenated observations on the CPU, the same as the actor's groups)."""
    groups = actor_input_groups(actor, obs)
    generator = torch.Generator().manual_seed(seed)
    # Standard-normal inputs (around the normaliser's statistics when there is one): the scale observations have.
    x = torch.randn(samples, sum(g["size"] for g in groups), generator=generator)
    if actor.obs_normalization:
        norm = actor.obs_normalizer
        x = x * norm.std.cpu() + norm.mean.cpu()
    parts = torch.split(x, [g["size"] for g in groups], dim=1)
    return x, TensorDict({g["name"]: p for g, p in zip(groups, parts, strict=True)}, batch_size=[samples])

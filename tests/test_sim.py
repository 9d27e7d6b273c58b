"""Simulation: one batched MuJoCo-Warp model on one device."""

import mujoco
import numpy as np
import pytest
import torch

from mjfleet.assets import asset_path
from mjfleet.sim import Simulation

NUM_WORLDS = 8


@pytest.fixture(scope="module")
def cartpole_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))


def _controls(steps: int, num_worlds: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(steps, num_worlds, 1, generator=g) * 2 - 1


def _set_initial_state(sim: Simulation) -> None:
    sim.qpos[:, 0] = torch.linspace(-0.5, 0.5, sim.num_worlds)
    sim.qpos[:, 1] = torch.linspace(-0.3, 0.3, sim.num_worlds)
    sim.qvel.zero_()


def test_captured_and_uncaptured_steps_give_identical_states(cartpole_model):
    sims = [Simulation(cartpole_model, NUM_WORLDS, substeps=2, capture=c) for c in (True, False)]
    assert sims[0].captured and not sims[1].captured
    controls = _controls(60, NUM_WORLDS)
    for sim in sims:
        _set_initial_state(sim)
        for u in controls:
            sim.ctrl.copy_(u)
            sim.step()
    assert torch.equal(sims[0].qpos, sims[1].qpos)
    assert torch.equal(sims[0].qvel, sims[1].qvel)
    assert not torch.allclose(sims[0].qpos, torch.zeros_like(sims[0].qpos))


def test_masked_reset_touches_only_masked_worlds(cartpole_model):
    sim = Simulation(cartpole_model, NUM_WORLDS)
    _set_initial_state(sim)
    sim.qvel.fill_(0.7)
    for _ in range(5):
        sim.step()
    before_qpos, before_qvel = sim.qpos.clone(), sim.qvel.clone()
    mask = torch.zeros(NUM_WORLDS, dtype=torch.bool)
    mask[[1, 4]] = True
    sim.reset(mask)
    qpos0 = torch.as_tensor(cartpole_model.qpos0, dtype=torch.float32)
    assert torch.equal(sim.qpos[mask], qpos0.expand(2, -1))
    assert torch.equal(sim.qvel[mask], torch.zeros(2, 2))
    assert torch.equal(sim.qpos[~mask], before_qpos[~mask])
    assert torch.equal(sim.qvel[~mask], before_qvel[~mask])


def _implicitly_damped() -> mujoco.MjModel:
    """The same cart-pole, its damping integrated implicitly by Euler: it needs the constraint solver's output."""
    model = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
    model.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    return model


@pytest.mark.parametrize(
    "variant, buffers",
    [("as shipped", "none"), ("implicit damping", "default")],
)
def test_matches_mujoco_c_within_float32_tolerance_over_150_steps(cartpole_model, variant, buffers):
    """The shipped cart-pole runs without constraint buffers (mujoco_warp skips its solver); a variant whose
    integrator reads the solver's output keeps them. Both step like MuJoCo's C implementation."""
    if variant != "as shipped":
        cartpole_model = _implicitly_damped()
    sim = Simulation(cartpole_model, NUM_WORLDS)
    assert (sim.data.njmax == 0 and sim.data.naconmax == 0) == (buffers == "none")
    _set_initial_state(sim)
    data = [mujoco.MjData(cartpole_model) for _ in range(NUM_WORLDS)]
    for w, d in enumerate(data):
        d.qpos[:] = sim.qpos[w].numpy()
        d.qvel[:] = 0.0
    controls = _controls(150, NUM_WORLDS, seed=1)
    for u in controls:
        sim.ctrl.copy_(u)
        sim.step()
        for w, d in enumerate(data):
            d.ctrl[:] = u[w].numpy()
            mujoco.mj_step(cartpole_model, d)
    expected_qpos = np.stack([d.qpos for d in data])
    expected_qvel = np.stack([d.qvel for d in data])
    np.testing.assert_allclose(sim.qpos.numpy(), expected_qpos, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(sim.qvel.numpy(), expected_qvel, atol=2e-3, rtol=1e-3)


def test_views_share_memory_with_the_simulation(cartpole_model):
    sim = Simulation(cartpole_model, NUM_WORLDS)
    ctrl_ptr = sim.ctrl.data_ptr()
    sim.ctrl.fill_(1.0)  # full push to the right in every world
    sim.step()
    assert sim.ctrl.data_ptr() == ctrl_ptr
    assert (sim.qvel[:, 0] > 0).all()
    assert sim.data_view("time")[0].item() == pytest.approx(cartpole_model.opt.timestep)


def test_forward_updates_body_positions_from_qpos(cartpole_model):
    sim = Simulation(cartpole_model, NUM_WORLDS)
    sim.qpos[:, 0] = 0.3
    sim.forward()
    cart = mujoco.mj_name2id(cartpole_model, mujoco.mjtObj.mjOBJ_BODY, "cart")
    assert torch.allclose(sim.xpos[:, cart, 0], torch.full((NUM_WORLDS,), 0.3))


def test_rejects_empty_world_count(cartpole_model):
    with pytest.raises(ValueError, match="num_worlds"):
        Simulation(cartpole_model, 0)


def test_constraint_buffers_are_dropped_only_when_nothing_can_need_them(cartpole_model):
    from mjfleet.sim import needs_no_constraint_buffers

    disable = mujoco.mjtDisableBit
    assert needs_no_constraint_buffers(cartpole_model)
    assert not needs_no_constraint_buffers(_implicitly_damped())
    for bit in (disable.mjDSBL_CONTACT, disable.mjDSBL_CONSTRAINT):  # contacts or constraints possible
        model = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
        model.opt.disableflags &= ~int(bit)
        assert not needs_no_constraint_buffers(model)
    model = mujoco.MjModel.from_xml_path(str(asset_path("cartpole.xml")))
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert not needs_no_constraint_buffers(model)
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    assert needs_no_constraint_buffers(model)
    quadruped = mujoco.MjModel.from_xml_path(str(asset_path("quadruped.xml")))
    assert not needs_no_constraint_buffers(quadruped)

"""The sensors mjlab's velocity terms read (tasks/locomotion/gait.py) and the per-substep sensor history under them
(Simulation(sensor_history=...)): recorded alike with and without captured graphs, equal to reading the sensors
after every single physics step, and turned into air and contact times as mjlab 1.6's contact sensors count them."""

from __future__ import annotations

import mujoco
import pytest
import torch

from mjfleet.sim import Simulation
from mjfleet.tasks import get_task

# A ball dropped onto the floor: it lands within the first steps and bounces, so contacts begin and end inside a
# step of 4 substeps.
BALL = """
<mujoco model="ball_drop">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="ball" pos="0 0 0.12"><freejoint/><geom name="ball" type="sphere" size="0.05" solref="0.005 0.1"/></body>
  </worldbody>
  <sensor><contact name="touch" geom1="ball" body2="world" data="found force" reduce="netforce" num="1"/></sensor>
</mujoco>
"""
COLUMNS = [0, 1, 2, 3]  # found, force x y z


def _ball(**kwargs) -> Simulation:
    return Simulation(mujoco.MjModel.from_xml_string(BALL), 3, "cpu", **kwargs)


def test_the_substep_history_is_the_same_captured_or_not_and_equals_reading_after_every_physics_step():
    captured = _ball(substeps=4, sensor_history=COLUMNS, capture=True)
    plain = _ball(substeps=4, sensor_history=COLUMNS, capture=False)
    single = _ball(substeps=1, capture=False)
    assert captured.captured and not plain.captured
    found_any = False
    for _ in range(12):
        captured.step()
        plain.step()
        readings = []
        for _ in range(4):
            single.step()
            readings.append(single.sensordata[:, COLUMNS].clone())
        expected = torch.stack(readings, dim=1)
        torch.testing.assert_close(captured.sensor_history, plain.sensor_history, rtol=0, atol=0)
        torch.testing.assert_close(plain.sensor_history, expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(captured.sensor_history[:, -1], captured.sensordata[:, COLUMNS])
        found_any |= bool((expected[..., 0] > 0).any() and (expected[..., 0] == 0).any())
    assert found_any, "the ball should both touch and leave the floor within these steps"


@pytest.fixture(scope="module")
def go1(robot_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MJFLEET_CACHE_DIR", str(robot_cache))
        spec = get_task("Go1-Velocity-Flat")
        cfg = spec.play_env_config()
        cfg.num_envs = 2
        torch.manual_seed(0)
        yield spec.make_env(cfg)


def _feed_found(env, pattern: list[list[int]]) -> None:
    """Write each substep's found flags (substeps x feet, the same for every world) into the history."""
    history = env.sim.sensor_history
    history[:, :, : len(pattern[0])] = torch.tensor(pattern, dtype=history.dtype)


def test_air_and_contact_times_advance_per_substep_as_mjlabs_contact_sensor_counts_them(go1):
    gait, dt = go1.gait, go1.physics_dt
    gait.reset(torch.ones(go1.num_envs, dtype=torch.bool))
    # foot 0 in the air for two steps, lands in the third step's third substep; foot 1 stands, lifts in step 3
    _feed_found(go1, [[0, 1, 1, 1]] * 4)
    gait.update(go1)
    _feed_found(go1, [[0, 1, 1, 1]] * 4)
    gait.update(go1)
    assert gait.current_air_time[0, 0] == pytest.approx(8 * dt)
    assert not gait.first_contact()[0].any()  # foot 1 stood throughout: its contact is older than a step
    _feed_found(go1, [[0, 1, 1, 1], [0, 1, 1, 1], [1, 0, 1, 1], [1, 0, 1, 1]])
    gait.update(go1)
    assert gait.last_air_time[0, 0] == pytest.approx(11 * dt)  # 10 substeps in the air, counted on landing
    assert gait.current_contact_time[0, 0] == pytest.approx(2 * dt)
    assert gait.current_air_time[0, 1] == pytest.approx(2 * dt)
    assert gait.last_contact_time[0, 1] == pytest.approx(11 * dt)
    assert gait.first_contact()[0].tolist() == [True, False, False, False]
    _feed_found(go1, [[1, 0, 1, 1]] * 4)
    gait.update(go1)
    assert not gait.first_contact()[0, 0]  # landed more than a step ago
    gait.reset(torch.tensor([True, False]))
    assert gait.current_contact_time[0].abs().sum() == 0 and gait.current_contact_time[1, 0] > 0


def test_the_gait_sensors_read_the_feet_of_a_standing_robot(go1):
    go1.reset()
    for _ in range(50):  # a second: the drop onto the floor has settled
        go1.step(torch.zeros(go1.num_envs, go1.num_actions))
    gait = go1.gait
    assert gait.in_contact.all()  # four feet on the floor
    weight = float(go1.mj_model.body_subtreemass[go1.built.base_body_id]) * 9.81
    total = gait.force[..., 2].sum(dim=1).abs()  # the floor pushes the feet up
    assert torch.allclose(total, torch.full_like(total, weight), rtol=0.05)  # the feet carry the robot
    assert (gait.vel_w.norm(dim=-1) < 0.05).all() and (gait.self_contact_force == 0).all()
    assert (gait.pos_w[..., 2] < 0.05).all()  # the foot frames sit at the soles

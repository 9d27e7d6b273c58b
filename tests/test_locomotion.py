"""Quadruped-Velocity-Flat and -Rough: physics sanity, commands, rewards, terminations, terrain and curriculum.

One flat and one rough environment are built once each (two models, so warp compiles kernels twice at most) and
shared by all tests; each test puts the state it needs in place first.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest
import torch
from task_envs import make_task_env

from mjfleet.assets import asset_path
from mjfleet.rl import FleetRunner
from mjfleet.tasks import get_task, task_names
from mjfleet.tasks.locomotion import LocomotionEnv, Terrain, TerrainConfig
from mjfleet.tasks.locomotion.math import quat_from_yaw, quat_rotate
from mjfleet.tasks.locomotion.mdp import commands, events, observations, rewards

FLAT, ROUGH = "Quadruped-Velocity-Flat", "Quadruped-Velocity-Rough"
NUM_ENVS = 6


def _make(task: str) -> LocomotionEnv:
    return make_task_env(task, NUM_ENVS)


@pytest.fixture(scope="module")
def flat() -> LocomotionEnv:
    return _make(FLAT)


@pytest.fixture(scope="module")
def rough() -> LocomotionEnv:
    return _make(ROUGH)


def _stand_at_home(env: LocomotionEnv, lift: float = 0.0) -> None:
    """Every robot in the keyframe pose at its environment's origin, at rest, its gait state as a reset leaves it;
    timers far from firing. Every test on the module's shared env starts here, so none sees another's leftovers
    (feet in the air or touching down, say)."""
    home = torch.as_tensor(env.mj_model.key("home").qpos, dtype=torch.float32)
    qpos = home.repeat(env.num_envs, 1)
    qpos[:, 0:2] = env.env_origins[:, 0:2]
    qpos[:, 2] = env.terrain_height(env.env_origins[:, 0:2]) + home[2] + lift
    env.sim.qpos.copy_(qpos)
    env.sim.qvel.zero_()
    env.sim.forward()
    env.episode_length_buf.zero_()
    env._push_steps.fill_(10**6)
    env._command_steps.zero_()
    env.last_actions.zero_()
    env.feet_air_time.zero_()
    env._touchdown_air_time.zero_()
    env._last_foot_contact.zero_()
    env.first_contact.zero_()


def _zero_action(env: LocomotionEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.num_actions)


# --------------------------------------------------------------------------------------------- registry, layout


def test_both_tasks_are_registered_and_listed_by_the_tasks_command(capsys):
    from mjfleet.cli.tasks import main

    assert {FLAT, ROUGH} <= set(task_names())
    main([])
    out = capsys.readouterr().out
    assert FLAT in out and ROUGH in out
    assert get_task(FLAT).num_envs_gpu == 4096 and get_task(ROUGH).num_envs_gpu == 4096


def test_defaults_are_50hz_policy_over_200hz_physics_with_20s_episodes(flat):
    assert flat.physics_dt == pytest.approx(0.005) and flat.cfg.decimation == 4
    assert flat.step_dt == pytest.approx(0.02)
    assert flat.max_episode_length == 1000
    agent = get_task(FLAT).agent_config()
    assert agent.num_steps_per_env == 24 and agent.actor.init_noise_std == 1.0
    assert (agent.ppo.learning_rate, agent.ppo.desired_kl, agent.ppo.entropy_coef) == (
        1e-3,
        0.01,
        0.01,
    )


def test_flat_observations_are_48_for_the_actor_and_55_for_the_critic(flat):
    obs = flat.get_observations()
    assert obs["actor"].shape == (NUM_ENVS, 48)
    assert obs["critic"].shape == (NUM_ENVS, 55)


def test_rough_observations_add_a_187_point_height_scan_to_actor_and_critic(rough):
    obs = rough.get_observations()
    assert rough.scan_points.shape == (187, 2)
    assert obs["actor"].shape == (NUM_ENVS, 48 + 187)
    assert obs["critic"].shape == (NUM_ENVS, 55 + 187)


def test_critic_sees_noise_free_values_and_the_actor_noisy_ones(flat):
    _stand_at_home(flat)
    obs = flat.compute_observations()
    actor, critic = obs["actor"], obs["critic"]
    joint_pos = slice(12, 24)
    assert torch.allclose(critic[:, joint_pos], torch.zeros(NUM_ENVS, 12), atol=1e-6)
    assert not torch.allclose(actor[:, joint_pos], critic[:, joint_pos])
    assert (actor[:, joint_pos] - critic[:, joint_pos]).abs().max() <= flat.cfg.noise.joint_pos + 1e-6
    assert torch.equal(actor[:, 9:12], critic[:, 9:12])  # the command is never noisy


# --------------------------------------------------------------------------------------------- physics sanity


def test_robot_stands_on_its_keyframe_under_zero_action_without_drifting(flat):
    _stand_at_home(flat)
    start_xy = flat.sim.qpos[:, 0:2].clone()
    heights, fell = [], torch.zeros(NUM_ENVS, dtype=torch.bool)
    for _ in range(100):  # 2 s
        _, _, dones, _ = flat.step(_zero_action(flat))
        fell |= dones
        heights.append(flat.sim.qpos[:, 2].clone())
    heights = torch.stack(heights)
    assert not fell.any()
    assert torch.isfinite(flat.sim.qpos).all()
    assert ((heights > 0.2) & (heights < 0.3)).all()
    assert (heights[50:].amax(0) - heights[50:].amin(0)).max() < 0.01  # settled after the first second
    assert (flat.sim.qpos[:, 0:2] - start_xy).norm(dim=1).max() < 0.1
    assert (flat.gravity_b[:, 2] < -0.98).all()
    assert flat.foot_contact.all()


def test_reset_randomises_joint_state_and_base_velocity_within_ranges(flat):
    flat.reset()
    ev = flat.cfg.events
    joints = flat.sim.qpos[:, 7:19]
    assert ((joints - flat.default_joint_pos).abs() <= ev.joint_pos + 1e-6).all()
    assert joints.std(dim=0).min() > 0
    assert (flat.sim.qvel[:, 0:3].abs() <= ev.base_lin_vel + 1e-6).all()
    assert flat.sim.qvel[:, 0:6].abs().sum(dim=1).min() > 0
    assert torch.allclose(flat.sim.qpos[:, 2], torch.full((NUM_ENVS,), ev.spawn_height))


def test_friction_and_trunk_mass_are_randomised_per_environment(flat):
    friction = flat.sim.model_view("geom_friction")
    mass = flat.sim.model_view("body_mass")
    m = flat.mj_model
    foot_mu = friction[:, flat.foot_geoms, 0]
    assert torch.equal(foot_mu, flat.foot_friction.unsqueeze(1).expand(-1, 4))
    assert len(set(flat.foot_friction.tolist())) == NUM_ENVS
    low, high = flat.cfg.events.foot_friction
    assert ((foot_mu >= low) & (foot_mu <= high)).all()
    trunk_mass = mass[:, flat.trunk_body]
    assert torch.allclose(trunk_mass, m.body_mass[flat.trunk_body] + flat.added_mass)
    assert len(set(trunk_mass.tolist())) == NUM_ENVS
    other = [b for b in range(m.nbody) if b != flat.trunk_body]
    assert torch.allclose(mass[:, other], torch.as_tensor(m.body_mass[other], dtype=torch.float32))
    critic = flat.get_observations()["critic"]
    assert torch.allclose(critic[:, 52], flat.foot_friction) and torch.allclose(
        critic[:, 53], flat.added_mass
    )


def _c_model_with_added_mass(env: LocomotionEnv, world: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
    """MuJoCo C's model of one environment's robot: its trunk mass, constants recomputed by mj_setConst."""
    model = mujoco.MjModel.from_xml_path(str(asset_path("quadruped.xml")))
    model.body_mass[env.trunk_body] += float(env.added_mass[world])
    data = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)
    return model, data


def test_added_trunk_mass_updates_each_worlds_derived_constants_and_dynamics_as_mujoco_c(flat):
    for world in range(NUM_ENVS):
        model, _ = _c_model_with_added_mass(flat, world)
        for field in ("body_subtreemass", "body_invweight0", "dof_invweight0"):
            ours = flat.sim.model_view(field)[world].reshape(getattr(model, field).shape)
            np.testing.assert_allclose(
                ours.numpy(), getattr(model, field), rtol=2e-5, atol=1e-5, err_msg=field
            )
    # Far from the origin a stale subtree mass puts the centre of mass metres off: the accelerations then differ
    # from MuJoCo's by up to 0.4 rad/s^2 for 2 kg at 30 m (float32 rounding alone: 0.003).
    rng = np.random.default_rng(0)
    qpos = flat.mj_model.key("home").qpos.copy()
    qpos[0:3] = (30.0, 30.0, 1.0)
    qpos[3:7] = (0.98, 0.1, 0.1, 0.1)
    qpos[3:7] /= np.linalg.norm(qpos[3:7])
    qpos[7:] += rng.uniform(-0.3, 0.3, 12)
    qvel = rng.uniform(-1.0, 1.0, 18)
    ctrl = flat.mj_model.key("home").ctrl
    flat.sim.qpos.copy_(torch.as_tensor(qpos, dtype=torch.float32))
    flat.sim.qvel.copy_(torch.as_tensor(qvel, dtype=torch.float32))
    flat.sim.ctrl.copy_(torch.as_tensor(ctrl, dtype=torch.float32))
    flat.sim.forward()
    for world in range(NUM_ENVS):
        model, data = _c_model_with_added_mass(flat, world)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(model, data)
        np.testing.assert_allclose(flat.sim.qacc[world].numpy(), data.qacc, atol=0.02)


def test_a_push_changes_the_base_velocity_and_rearms_the_timer(flat):
    _stand_at_home(flat)
    for _ in range(25):  # let the servos settle
        flat.step(_zero_action(flat))
    torch.manual_seed(3)
    flat._push_steps[0] = 1
    flat.step(_zero_action(flat))
    # the pushed robot leaves with the push's velocity; the others stay nearly at rest
    assert flat.sim.qvel[0, 0:2].norm() > 0.05 + flat.sim.qvel[1:, 0:2].norm(dim=1).max()
    low, high = (t / flat.step_dt for t in flat.cfg.events.push_interval_s)
    assert low - 1 <= flat._push_steps[0] <= high


# --------------------------------------------------------------------------------------------- commands


def test_commands_resample_at_the_configured_interval(flat):
    _stand_at_home(flat)
    assert (flat.command_resample_steps == round(flat.cfg.commands.resampling_time_s / flat.step_dt)).all()
    interval = int(flat.command_resample_steps[0])
    assert interval == 250
    sentinel = torch.tensor([9.0, 9.0, 9.0])
    flat.commands[:] = sentinel
    for _ in range(interval - 1):
        _, _, dones, _ = flat.step(_zero_action(flat))
        assert not dones.any()
    assert (flat.commands == sentinel).all()
    flat.step(_zero_action(flat))
    c = flat.cfg.commands
    assert (flat.commands != sentinel).all(dim=1).all()
    assert (flat.commands[:, 0] >= c.lin_vel_x[0]).all() and (flat.commands[:, 0] <= c.lin_vel_x[1]).all()
    assert (flat.commands[:, 2].abs() <= max(map(abs, c.ang_vel_z))).all()


def test_the_step_that_redraws_commands_is_rewarded_against_the_command_the_policy_saw(flat):
    _stand_at_home(flat)
    seen = torch.tensor([0.5, -0.2, 0.3])
    flat.commands[:] = seen
    flat._command_steps.copy_(flat.command_resample_steps - 1)
    flat._episode_sums.zero_()
    obs, _, dones, _ = flat.step(_zero_action(flat))
    assert not dones.any()
    assert (flat.commands != seen).any(dim=1).all()  # redrawn in this step ...
    assert torch.equal(obs["critic"][:, 9:12], flat.commands)  # ... and shown in the next observation
    term = flat._reward_names.index("track_lin_vel_xy")
    error = (seen[:2] - flat.base_lin_vel[:, :2]).square().sum(dim=1)
    expected = (
        torch.exp(-error / flat.cfg.rewards["track_lin_vel_xy"].params["sigma"])
        * flat.reward_weights["track_lin_vel_xy"]
    )
    torch.testing.assert_close(flat._episode_sums[term], expected)


def test_a_new_episode_observes_a_zero_last_action(flat):
    _stand_at_home(flat)
    flat.episode_length_buf[0] = flat.max_episode_length - 1
    actions = torch.full((flat.num_envs, flat.num_actions), 0.3)
    obs, _, dones, _ = flat.step(actions)
    assert dones[0] and not dones[1:].any()
    last_action = obs["critic"][:, 36:48]  # noise-free
    assert (last_action[0] == 0).all()
    assert torch.equal(last_action[1:], actions[1:])


def test_a_share_of_commands_is_standing_still(flat):
    torch.manual_seed(1)
    draws = []
    for _ in range(50):
        commands.resample_commands(flat, torch.ones(NUM_ENVS, dtype=torch.bool))
        draws.append(flat.commands.clone())
    draws = torch.cat(draws)
    standing = (draws == 0).all(dim=1).float().mean()
    assert 0.03 < standing < 0.25  # configured 0.1, plus the slow draws zeroed
    assert (draws[:, :2].norm(dim=1)[draws[:, :2].norm(dim=1) > 0] >= flat.cfg.commands.min_speed).all()


# --------------------------------------------------------------------------------------------- rewards


def _set_base_velocity(env: LocomotionEnv, lin_b: torch.Tensor, ang_b: torch.Tensor) -> None:
    """Write base-frame velocities into qvel (linear velocity is world-frame there, angular body-frame)."""
    quat = env.sim.qpos[:, 3:7]
    env.sim.qvel[:, 0:3] = quat_rotate(quat, lin_b)
    env.sim.qvel[:, 3:6] = ang_b
    env._update_base_state()


def test_tracking_rewards_are_highest_when_the_base_velocity_matches_the_command(flat):
    _stand_at_home(flat)
    yaw = torch.linspace(-3, 3, NUM_ENVS)
    flat.sim.qpos[:, 3:7] = quat_from_yaw(yaw)  # the base frame matters, not the world frame
    command = torch.tensor([0.6, -0.2, 0.5])
    flat.commands[:] = command
    lin = torch.tensor([0.6, -0.2, 0.0]).repeat(NUM_ENVS, 1)
    _set_base_velocity(flat, lin, torch.tensor([0.0, 0.0, 0.5]).repeat(NUM_ENVS, 1))
    # in the world frame the matching velocity points along each robot's own heading
    assert not torch.allclose(flat.sim.qvel[0, 0:2], flat.sim.qvel[-1, 0:2], atol=0.1)
    lin_match, ang_match = rewards.track_lin_vel_xy(flat), rewards.track_ang_vel_z(flat)
    assert torch.allclose(lin_match, torch.ones(NUM_ENVS), atol=1e-5)
    assert torch.allclose(ang_match, torch.ones(NUM_ENVS), atol=1e-5)
    _set_base_velocity(flat, torch.zeros(NUM_ENVS, 3), torch.zeros(NUM_ENVS, 3))
    assert (rewards.track_lin_vel_xy(flat) < lin_match - 0.5).all()
    assert (rewards.track_ang_vel_z(flat) < ang_match - 0.5).all()
    # a velocity matching the command in the world frame but not in the base frame is not rewarded
    flat.sim.qvel[:, 0:3] = lin
    flat._update_base_state()
    assert rewards.track_lin_vel_xy(flat)[0] < 0.5


def test_reward_weights_reward_tracking_and_penalise_everything_else(flat):
    w = flat.reward_weights
    positive = {"track_lin_vel_xy", "track_ang_vel_z", "feet_air_time"}
    assert positive <= set(w)
    assert all(w[name] > 0 for name in positive)
    assert all(v < 0 for name, v in w.items() if name not in positive)
    expected = {
        "lin_vel_z",
        "ang_vel_xy",
        "orientation",
        "torques",
        "joint_acc",
        "action_rate",
        "joint_limits",
        "undesired_contacts",
    }
    assert expected <= set(w)
    # weights are per second of simulated time: scaled by the policy step
    assert w["track_lin_vel_xy"] == pytest.approx(flat.cfg.rewards["track_lin_vel_xy"].weight * flat.step_dt)


def test_penalty_terms_grow_with_what_they_penalise(flat):
    _stand_at_home(flat)
    _set_base_velocity(flat, torch.zeros(NUM_ENVS, 3), torch.zeros(NUM_ENVS, 3))
    still = {n: getattr(rewards, n)(flat).clone() for n in ("lin_vel_z", "ang_vel_xy", "orientation")}
    _set_base_velocity(
        flat,
        torch.tensor([0.0, 0.0, 0.5]).repeat(NUM_ENVS, 1),
        torch.tensor([0.7, -0.3, 0.0]).repeat(NUM_ENVS, 1),
    )
    assert (rewards.lin_vel_z(flat) > still["lin_vel_z"]).all()
    assert (rewards.ang_vel_xy(flat) > still["ang_vel_xy"]).all()
    tilt = torch.tensor([math.cos(0.2), math.sin(0.2), 0.0, 0.0])  # 0.4 rad roll
    flat.sim.qpos[:, 3:7] = tilt
    flat._update_base_state()
    assert (rewards.orientation(flat) > still["orientation"] + 0.1).all()
    flat.actions.fill_(0.5)
    flat.last_actions.zero_()
    assert torch.allclose(rewards.action_rate(flat), torch.full((NUM_ENVS,), 12 * 0.25))
    flat.sim.qpos[:, 7:19] = flat.default_joint_pos
    assert (rewards.joint_limits(flat) == 0).all()
    flat.sim.qpos[:, 9] = -2.8  # FR calf near its lower limit: beyond the soft limit
    assert (rewards.joint_limits(flat) > 0.05).all()


def test_feet_air_time_rewards_long_steps_and_penalises_short_ones_while_moving(flat):
    flat.commands[:] = torch.tensor([0.5, 0.0, 0.0])
    flat.first_contact.zero_()
    flat.first_contact[:, 0] = True
    flat._touchdown_air_time.zero_()
    flat._touchdown_air_time[:, 0] = 0.8
    assert torch.allclose(rewards.feet_air_time(flat), torch.full((NUM_ENVS,), 0.3))
    flat._touchdown_air_time[:, 0] = 0.1
    assert (rewards.feet_air_time(flat) < 0).all()
    flat.commands.zero_()
    assert (rewards.feet_air_time(flat) == 0).all()


def test_step_rewards_are_clipped_at_zero_so_falling_early_never_pays(flat):
    torch.manual_seed(0)
    flat.reset()
    for step in range(5):
        if step == 4:  # every episode ends here (a time-out), so the episode log reports their sums
            flat.episode_length_buf.fill_(flat.max_episode_length - 1)
        _, reward, _, extras = flat.step(3.0 * torch.randn(NUM_ENVS, 12))  # violent: big penalties
        assert (reward >= 0).all()
    assert extras["episodes_finished"] == NUM_ENVS
    assert extras["log"]["Episode_Reward/action_rate"] < 0  # the per-term logs are not clipped


def test_episode_log_has_every_reward_term_and_the_tracking_metrics(flat):
    _stand_at_home(flat)
    _, _, _, extras = flat.step(_zero_action(flat))
    log = extras["log"]
    for name in flat.reward_weights:
        assert f"Episode_Reward/{name}" in log
    assert {"Metrics/lin_vel_error", "Metrics/ang_vel_error", "Metrics/sim_overflow"} <= log.keys()
    assert {"Metrics/sim_linesearch_limit", "Metrics/sim_solver_limit"} <= log.keys()


def test_iteration_limits_are_recorded_per_world_but_not_printed_while_buffer_overflows_still_are(flat):
    from mujoco_warp import OverflowType

    warn = int(flat.sim.model.opt.warn_overflow)
    assert not warn & OverflowType.LS_ITERATIONS and not warn & OverflowType.ITERATIONS
    assert warn & OverflowType.NEFC and warn & OverflowType.NARROWPHASE
    _stand_at_home(flat)
    try:
        # As the solver flags a world that hit the limit:
        flat._overflow.fill_(int(OverflowType.LS_ITERATIONS))
        flat._overflow[0] = 0
        flat._overflow[1] |= int(OverflowType.ITERATIONS)
        _, _, _, extras = flat.step(_zero_action(flat))
        assert extras["log"]["Metrics/sim_linesearch_limit"] == pytest.approx((NUM_ENVS - 1) / NUM_ENVS)
        assert extras["log"]["Metrics/sim_solver_limit"] == pytest.approx(1 / NUM_ENVS)
        assert extras["log"]["Metrics/sim_overflow"] == 0
    finally:
        flat._overflow.zero_()  # the module's shared env: later tests read these flags


# --------------------------------------------------------------------------------------------- terminations


def test_a_flipped_robot_terminates_and_the_time_limit_is_a_time_out(flat):
    _stand_at_home(flat)
    flat.sim.qpos[0, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # upside down
    flat.sim.qpos[0, 2] = 0.15
    flat.episode_length_buf[1] = flat.max_episode_length - 1
    _, _, dones, extras = flat.step(_zero_action(flat))
    assert dones[0] and flat.terminated[0] and not extras["time_outs"][0]
    assert dones[1] and extras["time_outs"][1] and not flat.terminated[1]
    assert not dones[2:].any()
    assert flat.episode_length_buf[0] == 0 and flat.episode_length_buf[1] == 0


def test_a_diverged_world_is_a_nan_reset_not_a_fall_and_keeps_the_logs_finite(flat):
    _stand_at_home(flat)
    flat.sim.qpos[0, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # robot 0 upside down: a fall
    flat.sim.qpos[0, 2] = 0.15
    flat.sim.qvel[1, 0] = float("nan")  # robot 1's physics blew up
    _, reward, dones, extras = flat.step(_zero_action(flat))
    log = extras["log"]
    assert dones[0] and dones[1] and flat.terminated[1]
    assert log["Sim/nan_resets"] == 1
    assert log["Episode_Termination/fell"] == pytest.approx(1 / extras["episodes_finished"].item())
    assert torch.isfinite(extras["log_packed"]).all() and torch.isfinite(reward).all()


def test_the_termination_penalty_is_added_after_the_clip_to_falls_only(flat):
    def step_flipped_and_timed_out(penalty: float) -> torch.Tensor:
        _stand_at_home(flat)
        flat.sim.qpos[0, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # robot 0 upside down: a fall
        flat.sim.qpos[0, 2] = 0.15
        flat.episode_length_buf[1] = flat.max_episode_length - 1  # robot 1 reaches the time limit
        flat.commands.copy_(commands)
        flat.cfg.termination_penalty = penalty
        try:
            return flat.step(_zero_action(flat))[1]
        finally:
            flat.cfg.termination_penalty = 0.0

    commands = flat.commands.clone()
    plain, penalised = step_flipped_and_timed_out(0.0), step_flipped_and_timed_out(-5.0)
    assert plain[0] >= 0  # clipped at 0 ...
    assert penalised[0] == pytest.approx(plain[0].item() - 5.0)  # ... and the penalty comes after the clip
    assert torch.equal(penalised[1:], plain[1:])  # a time-out and the robots still standing pay nothing


def test_trunk_contact_terminates(flat):
    _stand_at_home(flat)
    # Robot 0 lies upright on its belly, legs raised over its back: only the trunk box touches the floor.
    flat.sim.qpos[0, 2] = 0.056
    flat.sim.qpos[0, 7:19] = torch.tensor([0.0, 3.0, -1.0] * 4)
    flat.sim.ctrl.copy_(flat.sim.qpos[:, 7:19])
    flat.sim.step()
    flat.post_physics_step()
    terminated = flat.compute_terminations()
    assert flat.contact_counts[0, flat.trunk_geom] > 0
    assert flat.gravity_b[0, 2] < -0.99  # upright: ended by the contact, not by tilting
    assert terminated[0] and not terminated[1:].any()


def test_environment_steps_inside_and_outside_inference_mode(flat):
    torch.manual_seed(0)
    flat.reset()
    with torch.inference_mode():
        inside = flat.step(torch.randn(NUM_ENVS, 12))
    outside = flat.step(torch.randn(NUM_ENVS, 12))
    for obs, reward, dones, _ in (inside, outside):
        assert obs["actor"].shape == (NUM_ENVS, 48) and torch.isfinite(obs["actor"]).all()
        assert reward.shape == dones.shape == (NUM_ENVS,) and torch.isfinite(reward).all()
    flat.reset()


# --------------------------------------------------------------------------------------------- terrain


def test_generated_tiles_get_harder_with_the_level():
    cfg = TerrainConfig(
        kind="rough", num_levels=4, num_cols=6, tile_size=4.0, border=1.0, proportions=(1,) * 6
    )
    terrain = Terrain(cfg)
    n = terrain.tile_cells
    assert terrain.column_types == ["slope_up", "slope_down", "rough", "stairs_up", "stairs_down", "boxes"]

    def relief(level, col):
        x0, y0 = terrain.border_cells + level * n, terrain.border_cells + col * n
        tile = terrain.heights[y0 : y0 + n + 1, x0 : x0 + n + 1]
        return tile.max() - tile.min()

    for col in range(6):
        reliefs = [relief(level, col) for level in range(4)]
        assert reliefs[-1] > reliefs[0], terrain.column_types[col]
    assert terrain.origins[0, 3, 2] < 0 < terrain.origins[-1, 4, 2]  # stairs up start in a pit, down on a top


def test_heightfield_in_the_model_matches_the_height_map(rough):
    """MuJoCo's own ray casts onto the compiled heightfield agree with the map at grid vertices."""
    m = rough.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    heights, hs = rough.terrain.heights, rough.cfg.terrain.horizontal_scale
    rng = np.random.default_rng(0)
    geomid = np.array([-1], dtype=np.int32)
    for _ in range(50):
        i, j = rng.integers(1, heights.shape[0] - 1), rng.integers(1, heights.shape[1] - 1)
        start = np.array([j * hs, i * hs, 5.0])
        dist = mujoco.mj_ray(m, d, start, np.array([0.0, 0.0, -1.0]), None, 1, -1, geomid)
        assert geomid[0] == m.geom("floor").id
        assert 5.0 - dist == pytest.approx(heights[i, j], abs=1e-5)


def test_height_scan_matches_the_height_map_at_known_points(rough):
    _stand_at_home(rough)
    hs = rough.cfg.terrain.horizontal_scale
    heights = rough.terrain.heights
    # Put robot 0 on a grid vertex of a stairs tile, facing +y: scan points (0.1 m grid) fall on vertices.
    level, col = 5, rough.terrain.column_types.index("stairs_down")
    origin = rough.terrain.origins[level, col]
    i0, j0 = round(origin[1] / hs) + 12, round(origin[0] / hs) + 13  # off the platform, on the steps
    base_z = 1.0
    rough.sim.qpos[0, 0:3] = torch.tensor([j0 * hs, i0 * hs, base_z])
    rough.sim.qpos[0, 3:7] = quat_from_yaw(torch.tensor(math.pi / 2))
    scan = observations.height_scan(rough)[0]
    offset = rough.cfg.height_scan.offset
    for k in (0, 40, 93, 186):
        px, py = rough.scan_points[k].tolist()
        # facing +y: the base's x axis is world +y and its y axis world -x
        i, j = i0 + round(px / hs), j0 - round(py / hs)
        expected = np.clip(base_z - heights[i, j] - offset, -1, 1)
        assert scan[k].item() == pytest.approx(expected, abs=1e-4)
    # between vertices the look-up interpolates bilinearly
    x, y = (j0 + 0.25) * hs, (i0 + 0.5) * hs
    corners = heights[i0 : i0 + 2, j0 : j0 + 2]
    expected = np.array([0.5, 0.5]) @ corners @ np.array([0.75, 0.25])
    assert rough.height_map(torch.tensor([[x, y]]))[0].item() == pytest.approx(expected, abs=1e-5)


def test_robots_spawn_on_their_tiles_above_the_ground(rough):
    rough.reset()
    xy = rough.sim.qpos[:, 0:2]
    assert ((xy - rough.env_origins[:, 0:2]).abs() <= rough.cfg.events.spawn_xy + 1e-5).all()
    ground = rough.terrain_height(xy)
    assert (rough.sim.qpos[:, 2] - ground >= rough.cfg.events.spawn_height - 1e-4).all()
    expected = rough.tile_origins[rough.terrain_levels, rough.terrain_types]
    assert torch.equal(rough.env_origins, expected)


def test_curriculum_moves_robots_up_after_walking_far_and_down_after_failing(rough):
    rough.reset()
    _stand_at_home(rough)
    rough.terrain_levels[:] = 3
    rough.env_origins[:] = rough.tile_origins[3, rough.terrain_types]
    _stand_at_home(rough)
    rough.commands[:] = torch.tensor([0.0, 0.0, 0.0])
    rough.commands[1] = torch.tensor([1.0, 0.0, 0.0])  # asked to walk 20 m in the episode
    # robot 0 walked 5 m (beyond the 4 m tile half-width): teleport it, raised so it does not hit the ground
    far = rough.env_origins[0, 0:2] + torch.tensor([5.0, 0.0])
    rough.sim.qpos[0, 0:2] = far
    rough.sim.qpos[0, 2] = rough.terrain_height(far) + 0.5
    rough.episode_length_buf[0:3] = rough.max_episode_length - 1  # all three end now, by time-out
    _, _, dones, extras = rough.step(_zero_action(rough))
    assert dones[0:3].all()
    assert rough.terrain_levels[0] == 4  # walked far: harder
    assert rough.terrain_levels[1] == 2  # stayed put although commanded to walk: easier
    assert rough.terrain_levels[2] == 3  # standing command, stood: unchanged
    assert (rough.terrain_levels[3:] == 3).all()
    assert torch.equal(rough.env_origins[0], rough.tile_origins[4, rough.terrain_types[0]])
    assert extras["log"]["Metrics/terrain_level"] == pytest.approx(rough.terrain_levels.float().mean().item())


def test_curriculum_keeps_levels_in_range(rough):
    torch.manual_seed(0)
    top = rough.num_levels - 1
    solved_levels = []
    for _ in range(10):
        rough.terrain_levels[:] = torch.tensor([0, top, 0, top, 0, top])
        rough.env_origins[:] = rough.tile_origins[rough.terrain_levels, rough.terrain_types]
        rough._root_xy.copy_(rough.env_origins[:, 0:2])  # the easiest-level robots did not move...
        rough._root_xy[1::2, 0] += 6.0  # ...the top-level ones walked far
        rough.commands[:] = torch.tensor([1.0, 0.0, 0.0])
        events.update_terrain_levels(rough, torch.ones(NUM_ENVS, dtype=torch.bool))
        assert (rough.terrain_levels[0::2] == 0).all()  # cannot go below the easiest level
        assert ((rough.terrain_levels >= 0) & (rough.terrain_levels <= top)).all()
        solved_levels += rough.terrain_levels[1::2].tolist()
    assert len(set(solved_levels)) > 2  # beyond the top: a random level, not the top again


def test_rough_rollout_keeps_contact_buffers_within_their_sizes(rough):
    torch.manual_seed(0)
    rough.reset()
    nefc = rough.sim.data_view("nefc")
    worst = 0
    for _ in range(40):
        _, _, _, extras = rough.step(torch.randn(NUM_ENVS, 12))
        worst = max(worst, int(nefc.max()))
        assert extras["log"]["Metrics/sim_overflow"] == 0
    assert 0 < worst <= rough.sim.data.njmax


# --------------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("task", [FLAT, ROUGH])
def test_one_training_iteration_runs_with_the_default_agent(task, flat, rough, tmp_path):
    env = flat if task == FLAT else rough
    agent = get_task(task).agent_config()
    agent.logger = "none"
    runner = FleetRunner(env, agent, None, "cpu")
    record = runner.learn(1, init_at_random_ep_len=True)
    assert np.isfinite(record["Loss/value"]) and record["env_steps"] == NUM_ENVS * 24
    assert dataclasses.asdict(agent)["actor"]["hidden_dims"] == (512, 256, 128)

"""The locomotion tasks' observation groups named by what a robot measures: `policy` (deployable), beside the
default `actor` and the privileged `critic`; PPO and a distillation student reading the deployable set."""

from __future__ import annotations

import pytest
import torch

from mjfleet.rl import FleetRunner
from mjfleet.tasks.locomotion.mdp.observations import DEPLOYABLE
from mjfleet.tasks.registry import get_task

TASK = "Quadruped-Velocity-Flat"


def _env(num_envs: int = 4, noise: bool = True, **noise_settings):
    spec = get_task(TASK)
    cfg = spec.env_config()
    cfg.num_envs = num_envs
    cfg.noise.enabled = noise
    for key, value in noise_settings.items():
        setattr(cfg.noise, key, value)
    return spec, cfg, spec.make_env(cfg, "cpu")


def _columns(env, group: str, name: str) -> slice:
    start = 0
    for term, size in env.observation_terms()[group]:
        if term == name:
            return slice(start, start + size)
        start += size
    raise KeyError(name)


def test_the_policy_group_holds_only_what_a_robot_measures():
    _, _, env = _env()
    terms = env.observation_terms()
    assert [name for name, _ in terms["policy"]] == list(DEPLOYABLE)
    assert "base_lin_vel" in dict(terms["actor"]) and "base_lin_vel" not in dict(terms["policy"])
    privileged = {
        "base_lin_vel",
        "foot_contact",
        "foot_friction",
        "added_trunk_mass",
        "base_height",
        "height_scan",
    }
    assert not privileged & set(dict(terms["policy"]))
    obs = env.get_observations()
    assert obs["policy"].shape == (4, sum(size for _, size in terms["policy"]))


def test_a_learner_receives_only_the_groups_its_networks_read():
    """PPO on the default actor: its rollout storage holds no deployable copy it would never read."""
    spec, _, env = _env(num_envs=8)
    agent = spec.agent_config()
    agent.num_steps_per_env, agent.logger = 4, "none"
    runner = FleetRunner(env, agent, None, "cpu")
    assert set(runner.alg.storage.observations.keys()) == {"actor", "critic"}
    obs, *_ = env.step(torch.zeros(8, env.num_actions))
    assert set(obs.keys()) == {"actor", "critic"}


def test_without_noise_the_policy_group_is_the_actors_measured_terms_exactly():
    _, _, env = _env(noise=False)
    obs, *_ = env.step(torch.zeros(4, env.num_actions))
    for name in DEPLOYABLE:
        torch.testing.assert_close(
            obs["policy"][:, _columns(env, "policy", name)], obs["actor"][:, _columns(env, "actor", name)]
        )


def test_encoder_offsets_hold_for_an_episode_and_are_drawn_anew_at_its_reset():
    # Only the offsets: the other noise off, so the joint positions differ from the exact ones by the offset alone.
    settings = dict(lin_vel=0.0, ang_vel=0.0, gravity=0.0, joint_pos=0.0, joint_vel=0.0, joint_pos_bias=0.05)
    _, _, env = _env(**settings)
    offsets = env.joint_pos_bias.clone()
    assert 0 < offsets.abs().max() <= 0.05
    obs, *_ = env.step(torch.zeros(4, env.num_actions))
    columns = _columns(env, "policy", "joint_pos")
    exact = obs["critic"][:, _columns(env, "critic", "joint_pos")]
    torch.testing.assert_close(obs["policy"][:, columns] - exact, offsets, atol=1e-6, rtol=0)
    env.on_reset(torch.tensor([True, False, False, False]))
    assert not torch.equal(env.joint_pos_bias[0], offsets[0])
    assert torch.equal(env.joint_pos_bias[1:], offsets[1:])


def test_ppo_trains_an_actor_on_the_deployable_set_and_exports_its_terms():
    from mjfleet.deploy.export import policy_metadata

    spec, cfg, env = _env(num_envs=8)
    agent = spec.agent_config()
    agent.num_steps_per_env, agent.logger = 4, "none"
    agent.actor.obs_groups = ("policy",)
    runner = FleetRunner(env, agent, None, "cpu")
    record = runner.learn(1)
    assert record["env_steps"] == 32
    actor = runner.alg.get_policy().eval()
    assert actor.obs_groups == ["policy"]
    meta = policy_metadata(env, actor, env.get_observations(), TASK)
    assert [group["name"] for group in meta["input"]["groups"]] == ["policy"]
    assert [term["name"] for term in meta["input"]["terms"]] == list(DEPLOYABLE)


@pytest.mark.parametrize("group", ["policy", "actor"])
def test_an_exports_rules_tell_its_input_from_what_the_episode_alone_reads_and_state_the_training_noise(
    group,
):
    """deployment.observations: exactly the input's terms; base_lin_vel, which the rewards read, is a quantity
    where the input lacks it. observation_noise: training's half-ranges per input term, read from the training
    config even when the export's env runs play's settings (no noise), the encoder offsets on `policy` alone."""
    import dataclasses

    from mjfleet.deploy.export import observation_slices
    from mjfleet.deploy.metadata import rules_for_input

    spec = get_task(TASK)
    cfg = spec.play_env_config()
    cfg.num_envs = 2
    env = spec.make_env(cfg, "cpu")
    trained = dataclasses.asdict(spec.env_config())
    trained["noise"]["joint_pos_bias"] = 0.03  # not the default: it can only come from the training config
    size = sum(size for _, size in env.observation_terms()[group])
    terms = observation_slices(env, [{"name": group, "size": size}])
    rules = rules_for_input(env.deployment_rules(trained), terms)
    assert [source["name"] for source in rules["observations"]] == [term["name"] for term in terms]
    quantities = [q["name"] for q in rules["quantities"]]
    assert quantities == (["base_lin_vel"] if group == "policy" else [])
    noise = {t["name"]: (t["per_step"], t["per_episode"]) for t in rules["observation_noise"]["terms"]}
    assert (
        list(noise) == [term["name"] for term in terms]
        and rules["observation_noise"]["distribution"] == "uniform"
    )
    assert noise["joint_pos"] == (0.01, 0.03 if group == "policy" else 0.0)
    assert noise["base_ang_vel"] == (0.2, 0.0) and noise["command"] == noise["actions"] == (0.0, 0.0)
    assert noise.get("base_lin_vel") == (None if group == "policy" else (0.1, 0.0))


def test_an_unknown_actor_group_is_a_usage_error():
    from mjfleet.errors import UsageError

    spec, _, env = _env()
    agent = spec.agent_config()
    agent.actor.obs_groups = ("lidar",)
    with pytest.raises(UsageError, match="no observation group"):
        FleetRunner(env, agent, None, "cpu")


def test_a_distillation_student_reads_the_deployable_set_by_default(tmp_path):
    spec, cfg, env = _env(num_envs=8)
    agent = spec.agent_config()
    agent.num_steps_per_env, agent.logger = 4, "none"
    teacher = FleetRunner(env, agent, None, "cpu", checkpoint_info={"task": TASK})
    teacher.save(tmp_path / "teacher.pt")
    agent.algorithm_name = "distillation"
    agent.distillation.teacher = str(tmp_path / "teacher.pt")
    _, _, student_env = _env(num_envs=8)  # the teacher's runner selected the groups PPO reads from its env
    student = FleetRunner(student_env, agent, None, "cpu")
    assert "student on policy from a ppo teacher (actor)" in student.describe()
    assert student.learn(1)["Loss/behavior"] > 0

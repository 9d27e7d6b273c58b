"""Recipes as data over the reward term library (mjfleet.envs.terms): a user's term is one function and one line of
a recipe, and a recipe that names what does not exist is one line naming its field, before any environment."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import assert_one_line_usage_error, run_cli
from task_envs import make_task_env

from mjfleet.envs.terms import (
    REWARD_TERMS,
    ParamError,
    Term,
    bind_recipe,
    check_recipe,
    reward_term,
    with_overrides,
)
from mjfleet.errors import UsageError
from mjfleet.tasks import get_task
from mjfleet.tasks.locomotion.mdp import rewards  # noqa: F401 - the velocity terms, registered on import
from mjfleet.tasks.locomotion.recipes import quadruped_recipe

FLAT = "Quadruped-Velocity-Flat"


@reward_term(positive=("target",))
def trunk_above(env, target: float = 0.25) -> torch.Tensor:
    """A user's own term: 1 where the trunk is higher than `target` above the ground (m)."""
    return (env.sim.qpos[:, 2] > target).float()


class FootCount:
    """A user's term with a name to resolve once: the number of feet in contact, or one named foot."""

    def __init__(self, env, foot: str = "") -> None:
        names = [str(f) for f in env.robot.feet]
        if foot and foot not in names:
            raise ParamError("foot", f"no foot of this robot (its feet: {', '.join(names)})")
        self.columns = [names.index(foot)] if foot else list(range(len(names)))

    def __call__(self, env) -> torch.Tensor:
        return env.foot_contact[:, self.columns].float().sum(dim=1)


reward_term(FootCount, name="foot_count")


def test_a_users_term_is_one_function_and_one_line_of_the_recipe():
    spec = get_task(FLAT)
    cfg = spec.env_config()
    cfg.num_envs = 4
    cfg.rewards["trunk_above"] = Term("trunk_above", weight=0.5, params={"target": 0.2})
    torch.manual_seed(0)
    env = spec.make_env(cfg, "cpu")
    assert env.reward_weights["trunk_above"] == pytest.approx(0.5 * env.step_dt)
    _, _, dones, extras = env.step(torch.zeros(4, env.num_actions))
    assert not dones.any() and "Episode_Reward/trunk_above" in extras["log"]
    # after one step, the term's row of the episode sums is its weight per step times its value
    row = env._episode_sums[env._reward_names.index("trunk_above")]
    assert torch.allclose(row, 0.5 * env.step_dt * trunk_above(env, target=0.2))
    assert row.sum() > 0  # the robots start above 0.2 m: the term is live


def test_a_term_class_resolves_its_names_once_and_a_wrong_name_names_the_field():
    env = make_task_env(FLAT, 2)
    recipe = {"front_left": Term("foot_count", 1.0, {"foot": str(env.robot.feet[0])})}
    (bound,) = bind_recipe(env, recipe, "env.rewards")
    assert torch.equal(bound.call(env), env.foot_contact[:, 0].float())
    with pytest.raises(UsageError) as err:
        bind_recipe(env, {"paw": Term("foot_count", 1.0, {"foot": "paw"})}, "env.rewards")
    assert str(err.value).startswith(
        f"{env.robot.name}: env.rewards.paw.params.foot = 'paw': no foot of this robot"
    )


@pytest.mark.parametrize(
    ("recipe", "needle"),
    [
        ({"x": Term("track_lin_vel_xyz")}, "env.rewards.x.func = 'track_lin_vel_xyz': no such reward term"),
        (
            {"x": Term("track_lin_vel_xy", 1.0, {"std": 0.5})},
            "env.rewards.x.params.std: track_lin_vel_xy takes no",
        ),
        (
            {"x": Term("track_lin_vel_xy", 1.0, {"sigma": -0.25})},
            "env.rewards.x.params.sigma = -0.25: give a pos",
        ),
        ({"x": Term("track_lin_vel_xy", "2")}, "env.rewards.x.weight = '2': give a finite number"),
        ({"x": Term("track_lin_vel_xy", float("nan"))}, "env.rewards.x.weight = nan"),
        (
            {"x": Term("trunk_above", 1.0, {"target": 0})},
            "env.rewards.x.params.target = 0: give a positive number",
        ),
        ({"x": 1.0}, "env.rewards.x: give Term(func, weight, params)"),
    ],
)
def test_a_recipe_that_does_not_fit_the_library_is_one_line_naming_its_field(recipe, needle):
    with pytest.raises(
        UsageError, match="^" + needle.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")
    ):
        check_recipe(recipe, "env.rewards")


def test_a_disabled_term_is_still_checked():
    with pytest.raises(UsageError, match="no such reward term"):
        check_recipe({"x": Term("no_such_term", 0.0)}, "env.rewards")


def test_a_term_that_needs_a_parameter_says_which():
    @reward_term(name="needs_height")
    def needs_height(env, height: float) -> torch.Tensor:
        return env.sim.qpos[:, 2] - height

    try:
        with pytest.raises(
            UsageError, match=r"env\.rewards\.h\.params\.height: needs_height needs this parameter"
        ):
            check_recipe({"h": Term("needs_height")}, "env.rewards")
        check_recipe({"h": Term("needs_height", 1.0, {"height": 0.3})}, "env.rewards")
    finally:
        REWARD_TERMS.pop("needs_height")


def test_description_overrides_set_weights_and_parameters_and_add_library_terms():
    recipe = with_overrides(
        quadruped_recipe(),
        weights={"feet_air_time": 0.0, "trunk_above": 1.0},
        params={"track_lin_vel_xy": {"sigma": 0.5}},
    )
    assert recipe["feet_air_time"].weight == 0.0 and recipe["trunk_above"] == Term("trunk_above", 1.0)
    assert recipe["track_lin_vel_xy"].params == {"sigma": 0.5}
    assert quadruped_recipe()["track_lin_vel_xy"].params == {"sigma": 0.25}  # the recipe itself is untouched
    with pytest.raises(UsageError, match=r"^g2: reward_params\['upright'\]: no term of the recipe"):
        with_overrides(quadruped_recipe(), params={"upright": {"std": 1.0}}, prefix="g2: ")


def test_the_short_weight_flag_and_a_parameter_flag_reach_the_recipe(tmp_path):
    result = run_cli(
        "train", FLAT, "--gpu-ids", "None", "--env.rewards.feet-air-time", "0", "--env.rewards.track-lin-vel-xy."
        "params.sigma", "-1", cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert_one_line_usage_error(
        result, "env.rewards.track_lin_vel_xy.params.sigma = -1.0: give a positive number"
    )
    assert "run dir" not in result.stdout and os.listdir(tmp_path) == []  # before any worker or run directory


def test_a_mass_range_that_leaves_the_trunk_no_mass_is_one_line_before_any_worker(tmp_path):
    result = run_cli(
        "train",
        FLAT,
        "--gpu-ids",
        "None",
        "--env.events.added-trunk-mass",
        "-50",
        "1",
        cwd=tmp_path,
        timeout=180,
    )
    assert_one_line_usage_error(
        result, "mjfleet-quadruped: env.events.added_trunk_mass = (-50.0, 1.0): body 'trunk' weighs", "kg"
    )
    assert os.listdir(tmp_path) == []

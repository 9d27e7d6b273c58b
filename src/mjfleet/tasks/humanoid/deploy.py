"""The humanoid velocity task's rules for a deployment outside mjfleet (exported with the policy).

The locomotion rules (tasks/locomotion/deploy.py: observations, reset, commands, the shared reward terms, foot
contact, metrics, randomisation) with what the humanoid adds, in the vocabulary of docs/deploy.md (implemented by
examples/sim2sim.py): named per-step quantities (sole heights, foot speeds, self-contacts), its gait and posture
reward terms as expressions, and its further terminations (pelvis too low, self-contact).
"""

from __future__ import annotations

from typing import Any

from mjfleet.runs.run_dir import float32_list
from mjfleet.tasks.locomotion import deploy as locomotion


def deployment_rules(env, trained_cfg: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The rules of an episode of `env`, a flat-ground HumanoidEnv (its `deployment_rules` decides that; this
    module reads the env's state and does not import its class). None where a weighted reward term has no
    expression here (a term added to the recipe but not to these rules): the rules would misstate the reward."""
    cfg, m = env.cfg, env.mj_model
    qj = env._qj
    default = float32_list(
        env.default_joint_pos
    )  # as the export writes float32 (0.9, not 0.8999999761581421)
    moving = f"(norm(command[0:2]) > {locomotion.trained_commands(env, trained_cfg)['min_speed']!r})"

    def deviation(joints) -> str:
        index = [qj.start + int(j) for j in joints.cpu()]
        return f"sum(abs(qpos[{index!r}] - {[default[int(j)] for j in joints.cpu()]!r}))"

    # The base's height above the flat ground is its free joint's z (qpos[2]).
    more_rewards = {  # by term function: its expression for a recipe entry's parameters
        "alive": lambda p: "1 - terminated",
        "single_stance": lambda p: f"(sum(foot_contact) == 1) * {moving}",
        "feet_slide": lambda p: "sum(foot_speed_xy * foot_contact)",
        "foot_clearance_shortfall": lambda p: (
            f"sum(square(maximum({p['height']!r} - foot_height, 0)) * foot_speed_xy * (1 - foot_contact))"
        ),
        "base_height": lambda p: f"square(qpos[2] - {p['target']!r})",
        "joint_deviation_upper": lambda p: deviation(env._upper_joints),
        "joint_deviation_hips": lambda p: deviation(env._hip_joints),
    }
    rules = locomotion.deployment_rules(env, trained_cfg, more_rewards)
    if rules is None:
        return None
    feet = [int(b) for b in env._foot_bodies.cpu()]
    robot_geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] != 0]
    rules["quantities"] = [
        {"name": "foot_height", "kind": "body_z", "bodies": feet, "offset": float(env.sole_offset)},
        {"name": "foot_speed_xy", "kind": "body_speed_xy", "bodies": feet},
        {"name": "self_contacts", "kind": "contacts_between", "geoms1": robot_geoms, "geoms2": robot_geoms},
    ]
    # play names every early end a fall (Episode_Termination/fell): so do these rules.
    rules["terminations"] += [
        {"cause": "fell", "kind": "expression", "expression": f"qpos[2] < {cfg.min_base_height!r}"},
        {"cause": "fell", "kind": "expression", "expression": "self_contacts > 0"},
    ]
    rules["metrics"]["self_contact"] = "self_contacts > 0"
    return rules

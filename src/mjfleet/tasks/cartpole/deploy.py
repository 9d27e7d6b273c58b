"""Cart-pole's rules for a deployment outside mjfleet (exported with the policy; see docs/deploy.md).

Observation sources, reset, terminations and rewards are stated in the small vocabulary docs/deploy.md defines
(and examples/sim2sim.py implements), so that a deployer needs no mjfleet code to run an episode as training did.
"""

from __future__ import annotations

from typing import Any

# Observation term -> where its value comes from (qpos/qvel indices of the exported model: x = 0, theta = 1).
_SOURCES = {
    "cart_position": {"kind": "qpos", "index": [0]},
    "cos_pole_angle": {"kind": "cos_qpos", "index": [1]},
    "sin_pole_angle": {"kind": "sin_qpos", "index": [1]},
    "cart_velocity": {"kind": "qvel", "index": [0]},
    "pole_angular_velocity": {"kind": "qvel", "index": [1]},
}
# Reward terms as expressions over qpos, qvel and the clipped action (docs/deploy.md, "Expressions").
_UPRIGHT = "0.5 * (1 + cos(qpos[1]))"
_CENTERED = "exp(-square(qpos[0]))"
_SMALL_CONTROL = "exp(-square(action[0]))"
_SMALL_VELOCITY = "exp(-0.25 * square(qvel[1]))"
_REWARDS = {
    "upright": _UPRIGHT,
    "centered": _CENTERED,
    "small_control": _SMALL_CONTROL,
    "small_velocity": _SMALL_VELOCITY,
    "upright_product": f"({_UPRIGHT}) * (1 + {_CENTERED}) * (4 + {_SMALL_CONTROL}) * (1 + {_SMALL_VELOCITY}) / 20",
}


def deployment_rules(env, trained_cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules of a Cartpole episode, for the export's metadata; `trained_cfg` (the training run's env config,
    where known) gives the observation noise the policy was trained with."""
    cfg = env.cfg
    noise = float((trained_cfg or {}).get("observation_noise", cfg.observation_noise))
    center = 3.141592653589793 if cfg.swingup else 0.0
    half = [cfg.init_position_range, cfg.init_angle_range]
    terminations = [
        {"cause": "terminated", "kind": "qpos_abs_above", "index": [0], "limit": [cfg.rail_limit]}
    ]
    if not cfg.swingup:
        terminations[0] = {
            "cause": "terminated",
            "kind": "qpos_abs_above",
            "index": [0, 1],
            "limit": [cfg.rail_limit, cfg.max_pole_angle],
        }
    if cfg.end_stops:
        terminations = []
    return {
        "observations": [_SOURCES[name] | {"name": name} for name in _SOURCES],
        # What training added to the actor's input (a deployment adds none): Gaussian, this standard deviation.
        "observation_noise": {
            "distribution": "gaussian",
            "groups": {"actor": {name: {"per_step": noise, "per_episode": 0.0} for name in _SOURCES}},
        },
        "reset": {
            "qpos_uniform": [[-half[0], half[0]], [center - half[1], center + half[1]]],
            "qvel_uniform": [[-cfg.init_velocity_range, cfg.init_velocity_range]] * 2,
            "free_joint": None,
            "clip_to_joint_range": False,
        },
        "after_physics": (
            [{"kind": "end_stop", "qpos_index": 0, "qvel_index": 0, "limit": cfg.rail_limit}]
            if cfg.end_stops
            else []
        ),
        "terminations": terminations,
        "rewards": {
            "terms": [
                {"name": name, "weight": weight, "expression": _REWARDS[name]}
                for name, weight in env.reward_weights.items()
            ],
            "clip_total_below_zero": False,
        },
        "commands": None,
        "metrics": {},
        "randomization": {},
    }

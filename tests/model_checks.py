"""Checks shared by the robot model specifications (tests/test_quadruped_model.py, tests/test_humanoid_model.py)."""

from __future__ import annotations

import itertools

import mujoco


def contype_collisions(model: mujoco.MjModel) -> tuple[list[tuple[str, str]], set[str]]:
    """What MuJoCo's contype/conaffinity filter lets collide (explicit <pair>s aside): (the pairs of robot geoms
    that may touch each other, the robot geoms that may touch the floor). Robot geoms: those not on the world body."""

    def collides(g1: int, g2: int) -> bool:
        return bool(
            (model.geom_contype[g1] & model.geom_conaffinity[g2])
            or (model.geom_contype[g2] & model.geom_conaffinity[g1])
        )

    floor = model.geom("floor").id
    robot = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    among = [
        (model.geom(a).name, model.geom(b).name)
        for a, b in itertools.combinations(robot, 2)
        if collides(a, b)
    ]
    return among, {model.geom(g).name for g in robot if collides(g, floor)}

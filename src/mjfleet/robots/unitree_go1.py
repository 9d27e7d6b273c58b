"""Unitree Go1, the 12-joint quadruped, as mjlab 1.6.0's wheel ships its MJCF (`uv run robots fetch unitree-go1`).

Facts from mjlab 1.6.0, mjlab/asset_zoo/robots/unitree_go1/go1_constants.py ("go1_constants" below), which takes
the rotor inertia from Unitree's go1.urdf (unitreerobotics/unitree_ros, robots/go1_description), and from
mjlab/tasks/velocity/config/go1/env_cfgs.py ("go1 velocity config").
"""

from __future__ import annotations

from mjfleet.robots.description import ActuatorGroup, HomePose, RobotDescription
from mjfleet.robots.fetch import PackageSource

SOURCE = PackageSource("mjlab", "1.6.0", "mjlab/asset_zoo/robots/unitree_go1/xmls")

ROTOR_INERTIA = 0.000111842
"""kg m^2, the rotor's Ixx in Unitree's go1.urdf (go1_constants: ROTOR_INERTIA)."""
HIP_GEAR_RATIO = 6.0
"""Hip and thigh gearbox (go1_constants: HIP_GEAR_RATIO)."""
KNEE_GEAR_RATIO = HIP_GEAR_RATIO * 1.5
"""The knee's extra 1.5x stage (go1_constants: KNEE_GEAR_RATIO)."""

HIP = ActuatorGroup(
    joints=(".*_hip_joint", ".*_thigh_joint"),
    armature=ROTOR_INERTIA * HIP_GEAR_RATIO**2,  # reflected inertia: rotor inertia x gear ratio^2
    effort_limit=23.7,  # N m (go1_constants: HIP_ACTUATOR)
    velocity_limit=30.1,  # rad/s (go1_constants: HIP_ACTUATOR)
)
KNEE = ActuatorGroup(
    joints=(".*_calf_joint",),
    armature=ROTOR_INERTIA * KNEE_GEAR_RATIO**2,
    effort_limit=35.55,  # N m (go1_constants: KNEE_ACTUATOR)
    velocity_limit=20.06,  # rad/s (go1_constants: KNEE_ACTUATOR)
)
# kp and kd: the default rule, 10 Hz and damping ratio 2 (go1_constants: NATURAL_FREQ, DAMPING_RATIO)

HOME = HomePose(
    # m: go1_constants' INIT_STATE.pos is 0.278, which puts the foot spheres 16.5 mm into the floor at this pose
    # (mujoco.mj_geomDistance, 2026-11-28); 0.295 stands them on it
    base_height=0.295,
    joints={  # rad (go1_constants: INIT_STATE.joint_pos)
        ".*_thigh_joint": 0.9,
        ".*_calf_joint": -1.8,
        ".*R_hip_joint": 0.1,
        ".*L_hip_joint": -0.1,
    },
)

FEET = r"[FR][LR]_foot_collision"

UNITREE_GO1 = RobotDescription(
    name="unitree-go1",
    fetched="unitree-go1",
    mjcf="go1.xml",
    actuators=(HIP, KNEE),
    home=HOME,
    base_body="trunk",  # the body with the free joint in go1.xml (go1 velocity config: viewer.body_name)
    feet=("FR", "FL", "RR", "RL"),  # sites at the foot spheres' centres (go1 velocity config: site_names)
    foot_kind="site",
    foot_geoms=("[FR][LR]_foot_collision",),  # the foot spheres (go1_constants: _foot_regex)
    # the thighs touching the ground end an episode on rough terrain (go1 velocity config: illegal_contact on
    # thigh_ground_touch); on flat ground mjlab ends it on orientation instead, a task's choice
    terminate_on_contact=(".*_thigh",),
    collisions="all",  # go1_constants: FULL_COLLISION, the collision mjlab's Go1 trains with
    imu_site="imu",  # the MJCF's imu_lin_vel and imu_ang_vel sensors are there (mjlab's observations)
    recipe="go1",  # mjlab 1.6's Go1 velocity recipe (tasks/locomotion/described_config.py)
    # go1_constants FULL_COLLISION: every collision geom solref (0.01, 1); the feet condim 6, priority 1, friction
    # (1, 5e-3, 5e-4); every other collision geom condim 1 (frictionless)
    contacts={
        "solref": {r".*_collision\d*": (0.01, 1.0)},
        "condim": {FEET: 6, r".*_collision\d*": 1},
        "priority": {FEET: 1},
        "friction": {FEET: (1.0, 5e-3, 5e-4)},
    },
)

"""Unitree G1, the 29-joint humanoid, as mjlab 1.6.0's wheel ships its MJCF (`uv run robots fetch unitree-g1`).

Facts from mjlab 1.6.0, mjlab/asset_zoo/robots/unitree_g1/g1_constants.py ("g1_constants" below; its motor
specifications are Unitree's), and from mjlab/tasks/velocity/config/g1/env_cfgs.py ("g1 velocity config").
"""

from __future__ import annotations

from mjfleet.robots.description import ActuatorGroup, HomePose, RobotDescription
from mjfleet.robots.fetch import PackageSource

SOURCE = PackageSource("mjlab", "1.6.0", "mjlab/asset_zoo/robots/unitree_g1/xmls")


def planetary_armature(rotor: tuple[float, float, float], gears: tuple[float, float, float]) -> float:
    """Reflected inertia (kg m^2) at the output of a motor with a two-stage planetary gearbox: the rotor's
    inertia through both stages, the first stage's through the second, the second stage's as it is.
    `rotor`: the rotor's and the two stages' inertias; `gears`: 1 (the rotor), then each stage's ratio."""
    return rotor[0] * (gears[1] * gears[2]) ** 2 + rotor[1] * gears[2] ** 2 + rotor[2]


# Unitree's motors: rotor and stage inertias (kg m^2) and stage ratios (g1_constants: ROTOR_INERTIAS_*, GEARS_*)
ARMATURE_5020 = planetary_armature((0.139e-4, 0.017e-4, 0.169e-4), (1, 1 + 46 / 18, 1 + 56 / 16))
ARMATURE_7520_14 = planetary_armature((0.489e-4, 0.098e-4, 0.533e-4), (1, 4.5, 1 + 48 / 22))
ARMATURE_7520_22 = planetary_armature((0.489e-4, 0.109e-4, 0.738e-4), (1, 4.5, 5))
ARMATURE_4010 = planetary_armature((0.068e-4, 0.0, 0.0), (1, 5, 5))

# Effort (N m) and velocity (rad/s) limits: g1_constants ACTUATOR_5020, _7520_14, _7520_22, _4010.
# kp and kd: the default rule, 10 Hz and damping ratio 2 (g1_constants: NATURAL_FREQ, DAMPING_RATIO).
MOTOR_5020 = ActuatorGroup(
    joints=(".*_elbow_joint", ".*_shoulder_pitch_joint", ".*_shoulder_roll_joint", ".*_shoulder_yaw_joint",
            ".*_wrist_roll_joint"),
    armature=ARMATURE_5020, effort_limit=25.0, velocity_limit=37.0,
)  # fmt: skip
MOTOR_7520_14 = ActuatorGroup(
    joints=(".*_hip_pitch_joint", ".*_hip_yaw_joint", "waist_yaw_joint"),
    armature=ARMATURE_7520_14, effort_limit=88.0, velocity_limit=32.0,
)  # fmt: skip
MOTOR_7520_22 = ActuatorGroup(
    joints=(".*_hip_roll_joint", ".*_knee_joint"),
    armature=ARMATURE_7520_22, effort_limit=139.0, velocity_limit=20.0,
)  # fmt: skip
MOTOR_4010 = ActuatorGroup(
    joints=(".*_wrist_pitch_joint", ".*_wrist_yaw_joint"),
    armature=ARMATURE_4010, effort_limit=5.0, velocity_limit=22.0,
)  # fmt: skip
# Waist pitch and roll and the ankles are four-bar linkages driven by two 5020 motors; g1_constants takes the
# linkage as 1:1, so the joint sees both motors' armature and effort (G1_ACTUATOR_WAIST, G1_ACTUATOR_ANKLE).
# No velocity limit is given there for them.
TWO_5020 = ActuatorGroup(
    joints=("waist_pitch_joint", "waist_roll_joint", ".*_ankle_pitch_joint", ".*_ankle_roll_joint"),
    armature=2 * ARMATURE_5020, effort_limit=2 * 25.0,
)  # fmt: skip

HOME = HomePose(
    base_height=0.76,  # m (g1_constants: KNEES_BENT_KEYFRAME.pos, the pose mjlab's G1 starts from)
    joints={  # rad (g1_constants: KNEES_BENT_KEYFRAME.joint_pos)
        ".*_hip_pitch_joint": -0.312,
        ".*_knee_joint": 0.669,
        ".*_ankle_pitch_joint": -0.363,
        ".*_elbow_joint": 0.6,
        ".*_shoulder_pitch_joint": 0.2,
        "left_shoulder_roll_joint": 0.2,
        "right_shoulder_roll_joint": -0.2,
    },
)

FEET = r"(left|right)_foot[1-7]_collision"

UNITREE_G1 = RobotDescription(
    name="unitree-g1",
    fetched="unitree-g1",
    mjcf="g1.xml",
    actuators=(MOTOR_5020, MOTOR_7520_14, MOTOR_7520_22, MOTOR_4010, TWO_5020),
    home=HOME,
    base_body="pelvis",  # the body with the free joint in g1.xml
    feet=("left_foot", "right_foot"),  # sites under the ankles (g1 velocity config: site_names)
    foot_kind="site",
    foot_geoms=(
        "(left|right)_foot[1-7]_collision",
    ),  # seven capsules per sole (g1_constants: FEET_ONLY_COLLISION)
    # mjlab's G1 ends episodes on orientation (fell_over), on no body's contact: none here either
    terminate_on_contact=(),
    collisions="all",  # g1_constants: FULL_COLLISION, self-collisions included, as mjlab's G1 trains
    imu_site="imu_in_pelvis",  # the MJCF's imu_lin_vel and imu_ang_vel sensors are there (mjlab's observations)
    recipe="g1",  # mjlab 1.6's G1 velocity recipe (tasks/locomotion/described_config.py)
    events={"com_body": "torso_link"},  # g1 env_cfgs.py: base_com on torso_link
    # g1_constants FULL_COLLISION: the soles condim 3, priority 1, friction 0.6; every other collision geom condim 1
    contacts={
        "condim": {FEET: 3, ".*_collision": 1},
        "priority": {FEET: 1},
        "friction": {FEET: (0.6,)},
    },
)

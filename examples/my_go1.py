"""A robot in one file: the Unitree Go1, described for mjfleet as you would port it from mjlab.

    uv run robots fetch unitree-go1                                   # the MJCF and meshes, into the cache
    uv run train Velocity-Flat --robot examples/my_go1.py             # train it
    uv run play Velocity-Flat --robot examples/my_go1.py --export     # evaluate, export for MuJoCo C

Each number comes from mjlab 1.6.0's asset_zoo/robots/unitree_go1/go1_constants.py (named in the comments) and
its velocity task's Go1 config (tasks/velocity/config/go1/env_cfgs.py). docs/bring-your-robot.md walks through
it; docs/coming-from-mjlab.md maps mjlab's names to these fields.
"""

import mujoco

from mjfleet.robots import ActuatorGroup, HomePose, RobotDescription

# go1_constants: ROTOR_INERTIA (the rotor's Ixx in Unitree's go1.urdf), HIP_GEAR_RATIO, KNEE_GEAR_RATIO
ROTOR_INERTIA = 0.000111842  # kg m^2
HIP_GEAR_RATIO = 6.0
KNEE_GEAR_RATIO = HIP_GEAR_RATIO * 1.5

ROBOT = RobotDescription(
    name="my-go1",
    # The MJCF: here the one `robots fetch unitree-go1` put in the cache. Your own: mjcf="my_robot/robot.xml"
    # (relative to this file) and no `fetched`.
    fetched="unitree-go1",
    mjcf="go1.xml",
    # mjlab's BuiltinPositionActuatorCfg per joint group: armature = rotor inertia x gear ratio^2; kp and kd
    # from a 10 Hz natural frequency and damping ratio 2 (the default rule; go1_constants NATURAL_FREQ,
    # DAMPING_RATIO); the effort and velocity limits of HIP_ACTUATOR and KNEE_ACTUATOR.
    actuators=(
        ActuatorGroup(
            joints=(".*_hip_joint", ".*_thigh_joint"),
            armature=ROTOR_INERTIA * HIP_GEAR_RATIO**2,
            effort_limit=23.7,  # N m
            velocity_limit=30.1,  # rad/s
        ),
        ActuatorGroup(
            joints=(".*_calf_joint",),
            armature=ROTOR_INERTIA * KNEE_GEAR_RATIO**2,
            effort_limit=35.55,
            velocity_limit=20.06,
        ),
    ),
    # mjlab's InitialStateCfg (go1_constants INIT_STATE): the joints' angles; the base height is 0.295 m, not
    # mjlab's 0.278, where the foot spheres would start 16.5 mm inside the floor (build_robot checks this).
    home=HomePose(
        base_height=0.295,
        joints={".*_thigh_joint": 0.9, ".*_calf_joint": -1.8, ".*R_hip_joint": 0.1, ".*L_hip_joint": -0.1},
    ),
    base_body="trunk",  # the body with the free joint
    feet=("FR", "FL", "RR", "RL"),  # sites at the feet (go1 env_cfgs: site_names)
    foot_geoms=("[FR][LR]_foot_collision",),  # the foot spheres (go1_constants: _foot_regex)
    terminate_on_contact=(".*_thigh",),  # a thigh on the ground ends the episode
    collisions="all",  # go1_constants: FULL_COLLISION
    # go1 env_cfgs: sim.mujoco impratio 10 and elliptic friction cones; 50 line search iterations (mjlab: 20),
    # which MuJoCo C needs with elliptic cones to take the step MuJoCo-Warp takes (tasks/locomotion/described.py)
    physics={"cone": mujoco.mjtCone.mjCONE_ELLIPTIC, "impratio": 10.0, "ls_iterations": 50},
)

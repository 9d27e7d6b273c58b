"""mjfleet's own quadruped (Quadruped-Velocity-Flat/-Rough), a Unitree Go1-class robot written for this project:
src/mjfleet/assets/quadruped.xml, whose header and docs/tasks.md ("Quadruped model") name each published fact.

Everything physical is in the MJCF already (position servos with their gains and force ranges, armature, the
"home" keyframe, the feet's touch sensors), so the description only names its parts.
"""

from __future__ import annotations

from mjfleet.assets import asset_path
from mjfleet.robots.description import HomePose, RobotDescription

MJFLEET_QUADRUPED = RobotDescription(
    name="mjfleet-quadruped",
    mjcf=str(asset_path("quadruped.xml")),
    # none described: the MJCF's 12 position servos drive the robot as they are (quadruped.xml <actuator>: kp 35,
    # kv 0.5, force range 23.7 N m hip and thigh, 35.55 N m knee; docs/tasks.md: "Quadruped model")
    actuators=(),
    home=HomePose(keyframe="home"),  # quadruped.xml <keyframe>: thigh 0.9, calf -1.8, trunk 0.285 m up
    base_body="trunk",  # quadruped.xml: the body with the free joint
    # the touch-sensor zones around the foot spheres (quadruped.xml <sensor>: <leg>_foot_touch on these sites)
    feet=("FR_foot_site", "FL_foot_site", "RR_foot_site", "RL_foot_site"),
    foot_kind="site",
    foot_geoms=("[FR][LR]_foot",),  # the foot spheres, not the calf capsules on the same body
    # docs/tasks.md, Quadruped-Velocity-Flat: the trunk touching anything ends an episode
    terminate_on_contact=("trunk",),
    collisions="all",  # quadruped.xml: robot geoms collide with the floor only (contype 1, conaffinity 0)
)

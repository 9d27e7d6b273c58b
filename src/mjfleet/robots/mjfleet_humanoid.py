"""mjfleet's own humanoid (Humanoid-Velocity-Flat/-Rough), a Unitree G1-class robot written for this project:
src/mjfleet/assets/humanoid.xml, whose header and docs/tasks.md ("Humanoid model") name each published fact.

As for the quadruped, the MJCF holds everything physical (23 position servos with gains and force ranges,
armature, the "home" keyframe, the soles' touch sensors); the description names its parts.
"""

from __future__ import annotations

from mjfleet.assets import asset_path
from mjfleet.robots.description import HomePose, RobotDescription

MJFLEET_HUMANOID = RobotDescription(
    name="mjfleet-humanoid",
    mjcf=str(asset_path("humanoid.xml")),
    # none described: the MJCF's 23 position servos drive the robot as they are (humanoid.xml <actuator>; their
    # gains and effort limits: docs/tasks.md, "Humanoid model")
    actuators=(),
    home=HomePose(keyframe="home"),  # humanoid.xml <keyframe>: knees bent, pelvis 0.749 m up
    base_body="pelvis",  # humanoid.xml: the body with the free joint
    feet=("left_foot_site", "right_foot_site"),  # the soles' touch-sensor zones (humanoid.xml <sensor>)
    foot_kind="site",
    foot_geoms=(".*_foot",),  # the sole boxes on the ankle-roll bodies
    # docs/tasks.md, Humanoid-Velocity-Flat: pelvis, torso or head on the ground ends an episode (the torso and
    # head are geoms of torso_link)
    terminate_on_contact=("pelvis", "torso_link"),
    collisions="all",  # humanoid.xml: robot geoms meet the floor, and the legs each other (its <contact> pairs)
)

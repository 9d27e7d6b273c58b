"""Legged robots described as data: describe an MJCF's actuators, home pose and feet, and build the MuJoCo model
a task trains on. See docs/robots.md."""

from mjfleet.robots.build import BuiltRobot, build_robot
from mjfleet.robots.cache import fetched_dir, is_fetched, robots_dir
from mjfleet.robots.description import ActuatorGroup, HomePose, RobotDescription

__all__ = [
    "ActuatorGroup",
    "BuiltRobot",
    "HomePose",
    "RobotDescription",
    "build_robot",
    "fetched_dir",
    "is_fetched",
    "robots_dir",
]

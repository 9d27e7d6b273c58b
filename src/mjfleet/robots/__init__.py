"""Legged robots described as data: fetch a third-party MJCF, describe its actuators, home pose and feet, and
build the MuJoCo model a task trains on. See docs/robots.md."""

from mjfleet.robots.build import BuiltRobot, build_robot
from mjfleet.robots.cache import fetched_dir, is_fetched, robots_dir
from mjfleet.robots.description import ActuatorGroup, HomePose, RobotDescription
from mjfleet.robots.fetch import PackageSource, fetch
from mjfleet.robots.zoo import ROBOTS, known_robot

__all__ = [
    "ROBOTS",
    "ActuatorGroup",
    "BuiltRobot",
    "HomePose",
    "PackageSource",
    "RobotDescription",
    "build_robot",
    "fetch",
    "fetched_dir",
    "is_fetched",
    "known_robot",
    "robots_dir",
]

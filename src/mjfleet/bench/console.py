"""What `bench` says while it measures: how many phases of how many are done (mjfleet.progress: a bar on a
terminal, a plain line at most every 30 s in a log, on stderr), and the physics trouble each launch met.

The unit is a phase of one env count in one launch (physics, env, rollout, training): a run of 3 env counts with
1 and 2 workers over 3 rounds is 3 x 4 x 6 = 72 phases. One worker runs in this process and reports each phase as
it starts and ends (`BenchJob.on_phase`); several workers run in their own processes, whose rank 0 prints one
result line per env count through the launcher, and their phases are counted when their launch ends.
"""

from __future__ import annotations

from typing import Any

from mjfleet.progress import Progress
from mjfleet.runs.trouble import TroubleWatch


class BenchProgress:
    """The bar of one bench invocation and the trouble warnings, given once per kind (`TroubleWatch`)."""

    def __init__(self, bar: Progress, phases_per_launch: int) -> None:
        self.bar = bar
        self.phases_per_launch = phases_per_launch
        self.watch = TroubleWatch("bench")
        self.label = ""
        self._seen = 0  # phases of the current launch reported as they ended

    def start_launch(self, label: str) -> None:
        """A launch begins: `label` says which (`1 worker, round 2 of 3`)."""
        self.label, self._seen = label, 0
        self.bar.update(status=label)

    def on_phase(self, num_envs: int, phase: str, finished: bool) -> None:
        """BenchJob.on_phase: a phase of the in-process worker starts ("build" included) or ends."""
        what = "building" if phase == "build" else phase
        status = f"{self.label}: {num_envs:,} envs, {what}"
        if finished:
            self._seen += 1
            self.bar.update(advance=1, status=f"{status} done")
        else:
            self.bar.update(status=status)

    def end_launch(self, run: dict[str, Any]) -> None:
        """A launch ended with summary `run`: count the phases nobody reported, warn about its trouble."""
        self.bar.update(advance=max(self.phases_per_launch - self._seen, 0), status=f"{self.label} done")
        for point in run["points"]:
            for phase, trouble in point.get("trouble", {}).items():
                where = f"({run['workers']} x {point['num_envs']:,} envs, {phase} phase)"
                for line in self.watch.warnings(trouble["record"], trouble["env_steps"], where):
                    self.bar.log(line)


def auto_sweep_progress(quiet: bool) -> Progress:
    """The bar of a `--num-envs auto` sweep, whose length is known only when it stops: env counts measured."""
    return Progress("bench --num-envs auto", total=None, unit="env counts", quiet=quiet)

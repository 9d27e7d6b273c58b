"""The sweep's report: each configuration judged over its seeds (IQM and a 95% bootstrap interval of the
objective), ranked (falls first, then the IQM: `mjfleet.ranking`); its learning curves with confidence bands and
the parameters' importances (report_plots.py).

Written to <sweep dir>/report/: report.json (everything), report.md (the ranking as a table) and the plots.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mjfleet.atomic import write_text as atomic_write_text
from mjfleet.ranking import FALLS_STEP_PERCENT, RULE, RankKey, ended_early, rank_key
from mjfleet.sweep.objective import Objective
from mjfleet.sweep.stats import interval_text, iqm, seeds_interval


@dataclass
class ConfigResult:
    """One configuration over its seeds: the objective per seed that completed, the IQM and its 95% interval."""

    config: int
    params: dict[str, Any]
    values: dict[int, float] = field(default_factory=dict)
    """seed -> objective."""
    failed: dict[int, str] = field(default_factory=dict)
    """seed -> why its (latest) trial did not complete."""
    runs: dict[int, list[str]] = field(default_factory=dict)
    """seed -> the run directories of its trial, oldest first (an interrupted run, then its continuation)."""
    ended_early: dict[int, tuple[int, int]] = field(default_factory=dict)
    """seed -> (episodes that ended before the time limit, episodes ended) in its evaluation: a legged robot's
    falls, which a tracking-error objective does not show."""
    iqm: float | None = None
    ci: tuple[float, float] | None = None
    """None with fewer than two completed seeds (the report says "1 seed: no interval")."""
    rank: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "config": self.config, "params": self.params, "iqm": self.iqm,
            "ci95": list(self.ci) if self.ci else None, "seeds_completed": len(self.values),
            "values": {str(k): v for k, v in sorted(self.values.items())},
            "failed": {str(k): v for k, v in sorted(self.failed.items())},
            "runs": {str(k): v for k, v in sorted(self.runs.items())},
            "ended_early": {str(k): list(v) for k, v in sorted(self.ended_early.items())},
        }  # fmt: skip

    def falls(self) -> tuple[int, int] | None:
        """(episodes that ended early, episodes ended) over the completed seeds' evaluations; None where none
        reported them."""
        if not self.ended_early:
            return None
        return sum(e for e, _ in self.ended_early.values()), sum(n for _, n in self.ended_early.values())

    def ended_early_total(self) -> str:
        """The falls as "<early> of <ended> (<share>)" over the completed seeds' evaluations ("-": not reported)."""
        falls = self.falls()
        if falls is None:
            return "-"
        early, ended = falls
        return f"{early} of {ended}" + (f" ({100 * early / ended:.0f}%)" if ended else "")

    def rank_key(self, objective: Objective) -> RankKey:
        """`mjfleet.ranking`'s key: the seeds' falls together, in steps of 5 points, then the IQM."""
        falls = self.falls()
        return rank_key(self.iqm, objective.direction, [falls] if falls is not None else None)


def collect(study: Any, objective: Objective) -> list[ConfigResult]:
    """Every configuration of the study with its seeds' latest trials, ranked best first by `mjfleet.ranking`'s
    rule (falls first, in steps of 5 points; then the IQM) and those with no completed seed last."""
    from optuna.trial import TrialState

    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    by_number = {t.number: t for t in trials}
    configs: dict[int, ConfigResult] = {}
    for t in trials:
        if "config" not in t.user_attrs or t.state in (TrialState.WAITING, TrialState.RUNNING):
            continue
        config, seed = int(t.user_attrs["config"]), int(t.user_attrs["seed"])
        result = configs.setdefault(config, ConfigResult(config, dict(t.params)))
        result.runs[seed] = _run_chain(t, by_number)
        if t.state == TrialState.COMPLETE and t.value is not None:  # the latest trial of a seed wins
            result.values[seed] = float(t.value)
            result.failed.pop(seed, None)
            terminations = t.user_attrs.get("eval", {}).get("terminations")
            if terminations is not None:
                result.ended_early[seed] = ended_early(terminations)
        elif seed not in result.values:
            result.failed[seed] = t.user_attrs.get("fail_reason", t.state.name.lower())
    results = list(configs.values())
    for r in results:
        if r.values:
            scores = np.array(list(r.values.values()))
            r.iqm = iqm(scores)
            r.ci = seeds_interval(scores)
    # Configurations with no completed seed last; a configuration whose seeds fell clearly more never ranks above
    # one whose seeds fell less, whatever the objective says (a falling robot can track a velocity "well").
    results.sort(key=lambda r: (r.iqm is None, r.rank_key(objective), r.config))
    for rank, r in enumerate(results, 1):
        r.rank = rank
    return results


def _run_chain(trial: Any, by_number: dict[int, Any]) -> list[str]:
    chain: list[str] = []
    t = trial
    while t is not None:
        if t.user_attrs.get("run_dir"):
            chain.insert(0, t.user_attrs["run_dir"])
        t = by_number.get(t.user_attrs["continues"]) if "continues" in t.user_attrs else None
    return chain


def write_report(study: Any, objective: Objective, sweep_dir: Path, command: str) -> list[ConfigResult]:
    """report.json, report.md and the plots in <sweep dir>/report/; returns the ranking."""
    from mjfleet.sweep.report_plots import plot_importances, plot_learning_curves

    results = collect(study, objective)
    out = sweep_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    plots = {
        "learning_curves": plot_learning_curves(results, out / "learning_curves.png"),
        "importances": plot_importances(study, out / "importances.png"),
    }
    report = {
        "objective": objective.name, "direction": objective.direction, "command": command, "ranked_by": RULE,
        "configurations": [r.as_dict() for r in results], "plots": plots,
    }  # fmt: skip
    atomic_write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(out / "report.md", ranking_table(results, objective, command, plots) + "\n")
    return results


def ranking_table(results: list[ConfigResult], objective: Objective, command: str = "", plots=None) -> str:
    """The ranking as a markdown table: rank, IQM [95% CI], seeds completed, episodes that ended early over those
    seeds' evaluations (falls: "<early> of <ended> (<share>)", what the ranking compares first), parameters,
    failures; then `plots` (name -> path, None when not drawn) as images linked relative to report.md."""
    lines = []
    if command:
        lines += [f"Sweep: `{command}`", ""]
    better = "higher" if objective.direction == "maximize" else "lower"
    lines += [
        f"Objective: {objective.name} ({better} is better), IQM over seeds with a 95% bootstrap interval.",
        f"Ranked by the share of episodes that ended early (falls) in steps of {FALLS_STEP_PERCENT} percentage "
        "points, then by the IQM: a configuration that falls clearly more never ranks above one that falls less.",
        "",
    ]
    names = sorted({k for r in results for k in r.params})
    lines.append(
        "| rank | config | "
        + " | ".join([f"{objective.name} IQM", "95% CI", "seeds", "ended early", *names, "failed"])
        + " |"
    )
    lines.append("|" + "---|" * (6 + len(names) + 1))
    for r in results:
        ci = interval_text(r.ci, len(r.values))
        score = f"{r.iqm:.4g}" if r.iqm is not None else "-"
        failed = "; ".join(f"seed {s}: {why}" for s, why in sorted(r.failed.items())) or ""
        cells = [
            str(r.rank),
            str(r.config),
            score,
            ci,
            str(len(r.values)),
            r.ended_early_total(),
            *[_show(r.params.get(n)) for n in names],
            failed,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    for name, path in (plots or {}).items():
        # Relative to report.md, which lies beside them: the report still shows them where the sweep is copied.
        title = name.replace("_", " ")
        lines += [
            "",
            f"![{title}]({Path(path).name})" if path else f"{title}: not drawn (too few completed trials)",
        ]
    return "\n".join(lines)


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

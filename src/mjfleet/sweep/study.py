"""The Optuna study a sweep keeps in its directory: storage, sampler, pruner, and which trial runs next.

One Optuna trial is one `train` run: a configuration (the sampled parameters) with one seed. A configuration's
first trial is sampled; its other seeds are enqueued with the same parameters at once, so that any process that
joins the study (a slot, an array task of a Slurm job) takes them before sampling anew. The study is the queue:
there is no other record of what ran or runs.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfleet.errors import UsageError, first_line
from mjfleet.runs.checkpoints import checkpoints_in
from mjfleet.sweep.objective import Objective
from mjfleet.sweep.params import Param

STUDY_NAME = "sweep"
JOURNAL = "study.journal"
"""The default storage: Optuna's journal file in the sweep directory (one file, safe for several processes, also
on a shared filesystem)."""


@dataclass(frozen=True)
class NextTrial:
    """A trial to run: the Optuna trial, its configuration (the number of that configuration's first trial), the
    seed, and the run directory it continues (an interrupted trial's), if any."""

    trial: Any
    config: int
    seed: int
    resume_run: str | None
    evaluate_only: bool = False
    """`resume_run` was trained to its budget and interrupted during its evaluation: evaluate it, train nothing."""


def storage_url(sweep_dir: Path, storage: str | None) -> str:
    """What --storage names (an RDB URL, or a journal file path), else the journal file in the sweep directory."""
    return storage or str(sweep_dir / JOURNAL)


def open_storage(url: str) -> Any:
    """The Optuna storage `url` names, opened and reachable: a UsageError (one line) when it is not."""
    import optuna

    try:
        if "://" in url:
            storage: Any = optuna.storages.RDBStorage(url)
        else:
            from optuna.storages.journal import JournalFileBackend

            Path(url).parent.mkdir(parents=True, exist_ok=True)
            storage = optuna.storages.JournalStorage(JournalFileBackend(url))
        storage.get_all_studies()  # an RDB connects lazily: reach it now, before any trial starts
    except Exception as exc:  # drivers and servers raise their own types; each is "cannot open" to the user
        raise UsageError(f"--storage {url}: cannot open it: {first_line(exc)}") from None
    return storage


def make_sampler(kind: str, params: Sequence[Param], seed: int) -> Any:
    import optuna

    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "grid":
        return _grid_sampler({p.path: p.grid_values() for p in params}, seed)
    if kind == "cmaes":
        categorical = [p.path for p in params if p.kind == "choice"]
        if categorical:
            raise UsageError(f"--sampler cmaes samples numbers only; --param {categorical[0]} is a choice")
        try:
            import cmaes  # noqa: F401  (Optuna's CMA-ES sampler needs it)
        except ImportError:
            raise UsageError("--sampler cmaes needs the cmaes package: uv sync --extra sweep") from None
        return optuna.samplers.CmaEsSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def _grid_sampler(space: dict[str, list[Any]], seed: int) -> Any:
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        """Optuna's grid, less its `study.stop()` after the last point: that works only inside `optimize`, and
        the sweep counts its configurations itself (TrialQueue)."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            pass

    return GridSampler(space, seed=seed)


def make_pruner(kind: str) -> Any:
    import optuna

    if kind == "median":  # on train --eval-interval's evaluations, from the third trial on
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def open_study(storage: Any, objective: Objective, sampler: Any, pruner: Any) -> Any:
    """Create the sweep's study in `storage`, or join it (another array task, --resume)."""
    import optuna

    study = optuna.create_study(
        study_name=STUDY_NAME,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        direction=objective.direction,
        load_if_exists=True,
    )
    if study.direction.name.lower() != objective.direction:
        raise UsageError(
            f"the study in this storage {study.direction.name.lower()}s; this sweep {objective.direction}s"
        )
    return study


def owner_id() -> str:
    """Who runs a trial: the Slurm array task or job (the same after a requeue), else this host."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID"):
        return f"slurm:{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '0')}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}"
    return f"host:{socket.gethostname()}"


class TrialQueue:
    """Hands out the study's trials to slots: enqueued seeds and continuations first, then new configurations
    until `configs` have been sampled. Thread-safe (one lock around ask)."""

    def __init__(
        self, study: Any, storage: Any, params: Sequence[Param], configs: int, seeds: int, seed: int
    ) -> None:
        self.study, self.storage, self.params = study, storage, list(params)
        self.configs, self.seeds, self.first_seed = configs, seeds, seed
        self.owner = owner_id()
        self.lock = threading.Lock()

    def _set(self, number: int, key: str, value: Any) -> None:
        study_id = self.storage.get_study_id_from_name(STUDY_NAME)
        self.storage.set_trial_user_attr(
            self.storage.get_trial_id_from_study_id_trial_number(study_id, number), key, value
        )

    def sampled_configs(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False) if t.user_attrs.get("config") == t.number)

    def next(self) -> NextTrial | None:
        """The next trial to run (already RUNNING, owned by this process), or None when the sweep has no more."""
        from optuna.trial import TrialState

        with self.lock:
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if not waiting and self.sampled_configs() >= self.configs:
                return None
            trial = self.study.ask()
            attrs = trial.user_attrs
            for p in self.params:
                p.suggest(trial)
            if "config" not in attrs:  # newly sampled: its other seeds wait in the study for any slot
                trial.set_user_attr("config", trial.number)
                trial.set_user_attr("seed", self.first_seed)
                for k in range(1, self.seeds):
                    self.study.enqueue_trial(
                        trial.params,
                        user_attrs={"config": trial.number, "seed": self.first_seed + k},
                        skip_if_exists=False,
                    )
            trial.set_user_attr("owner", self.owner)
            attrs = trial.user_attrs
            return NextTrial(
                trial,
                int(attrs["config"]),
                int(attrs["seed"]),
                attrs.get("resume_run"),
                bool(attrs.get("evaluate_only")),
            )

    def recover(self, stale: bool) -> list[int]:
        """Enqueue a continuation of every interrupted trial nobody continues yet; with `stale`, first mark this
        owner's RUNNING trials (left by a sweep that was killed or requeued) as interrupted. Returns their numbers."""
        from optuna.trial import TrialState

        with self.lock:
            trials = self.study.get_trials(deepcopy=False)
            if stale:
                for t in trials:
                    if t.state == TrialState.RUNNING and t.user_attrs.get("owner") == self.owner:
                        self._set(t.number, "interrupted", True)
                        self._set(t.number, "fail_reason", "interrupted: the sweep stopped while it ran")
                        self.study.tell(t.number, state=TrialState.FAIL)
                trials = self.study.get_trials(deepcopy=False)
            continued = {t.user_attrs.get("continues") for t in trials}
            again = []
            for t in trials:
                if t.state != TrialState.FAIL or not t.user_attrs.get("interrupted") or t.number in continued:
                    continue
                attrs = {k: t.user_attrs[k] for k in ("config", "seed") if k in t.user_attrs}
                attrs["continues"] = t.number
                run_dir = t.user_attrs.get("run_dir")
                if run_dir and checkpoints_in(run_dir):
                    attrs["resume_run"] = run_dir
                    if t.user_attrs.get("trained"):  # stopped in its evaluation: train would refuse to go on
                        attrs["evaluate_only"] = True
                self.study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)
                again.append(t.number)
            return again

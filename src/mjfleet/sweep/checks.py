"""Everything a sweep's command line can get wrong, found before any trial starts: each a UsageError (one line,
exit status 2) naming the parameter, distribution, objective, flag or storage at fault."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfleet.errors import UsageError
from mjfleet.sweep.objective import Objective, check_reported, parse_objective
from mjfleet.sweep.params import RESERVED, Param, parse_params
from mjfleet.sweep.slots import Slot, make_slots
from mjfleet.sweep.study import make_pruner, make_sampler, storage_url
from mjfleet.sweep.trial import SweepSpec, python_command


@dataclass
class SweepPlan:
    """A checked sweep: what every trial shares, where trials run, how many, and the study's parts."""

    spec: SweepSpec
    slots: list[Slot]
    configs: int
    seeds: int
    first_seed: int
    storage_url: str
    sampler: Any
    pruner: Any
    prune: bool

    @property
    def sweep_dir(self) -> Path:
        return self.spec.sweep_dir


def check(
    task: str,
    flags: Any,
    fixed: list[str],
    sweep_dir: Path,
    parse_train: Callable[[list[str]], Any],
    preflight: bool = True,
) -> SweepPlan:
    """The sweep `flags` ask for, checked; `parse_train(argv)` is train's own command-line parser (a UsageError for
    what train would refuse). `preflight`: look at the world too: resolve --hosts, and evaluate the task once when only
    that can tell whether it reports the objective (its metrics, its termination causes)."""
    params = parse_params(flags.param)
    objective = parse_objective(flags.objective, flags.direction)
    configs = flags.trials if flags.trials is not None else (8 if params else 1)
    for name, value in (("--trials", configs), ("--seeds", flags.seeds), ("--eval-episodes", flags.eval_episodes),
                        ("--eval-num-envs", flags.eval_num_envs), ("--prune-interval", flags.prune_interval)):  # fmt: skip
        if value < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")
    if not params and configs > 1:
        raise UsageError(
            f"--trials {configs} with no --param would run one configuration {configs} times: use --seeds"
        )
    budget = _budget_flags(flags)
    _check_fixed(fixed)
    sampler = make_sampler(flags.sampler, params, flags.sampler_seed)
    if flags.sampler == "grid":
        configs = min(configs, math.prod(len(p.grid_values()) for p in params))
    prune = flags.pruner == "median"
    if prune and objective.periodic_key() is None:
        raise UsageError(
            f"--pruner median judges train's periodic evaluation, which does not report {objective.name}"
        )
    slots = make_slots(flags, resolve=preflight)
    trained = _check_train_flags(parse_train, task, [*fixed, *budget, *slots[0].train_flags], params, fixed)
    if objective.needs_preflight and preflight:
        _check_objective_reported(task, objective, fixed)
    spec = SweepSpec(
        task=task,
        params=tuple(params),
        objective=objective,
        sweep_dir=sweep_dir,
        train_flags=(*fixed, *budget),
        minutes=flags.minutes,
        eval_flags=_eval_flags(flags, task),
        prune_interval=flags.prune_interval if prune else 0,
        iterations=None if flags.env_steps is not None else trained.agent.max_iterations,
        env_steps=flags.env_steps,
    )
    url = storage_url(sweep_dir, flags.storage)
    return SweepPlan(
        spec, slots, configs, flags.seeds, flags.seed, url, sampler, make_pruner(flags.pruner), prune
    )


def _eval_flags(flags: Any, task: str) -> tuple[str, ...]:
    """play's flags for each trial's evaluation (a command only where the task takes one)."""
    if flags.eval_command:
        from mjfleet.tasks import get_task

        commands = getattr(get_task(task).env_config(), "commands", None)
        if not callable(getattr(commands, "fix", None)):
            raise UsageError(f"--eval-command: {task} takes no velocity command")
    command = ("--command", *(repr(float(v)) for v in flags.eval_command)) if flags.eval_command else ()
    return ("--episodes", str(flags.eval_episodes), "--num-envs", str(flags.eval_num_envs), *command)


def _budget_flags(flags: Any) -> list[str]:
    if flags.iterations is not None and flags.env_steps is not None:
        raise UsageError("--iterations and --env-steps both set the budget: pass one of them")
    if flags.minutes is not None and not flags.minutes > 0:
        raise UsageError(f"--minutes must be > 0, got {flags.minutes}")
    if flags.iterations is not None:
        if flags.iterations < 1:
            raise UsageError(f"--iterations must be >= 1, got {flags.iterations}")
        return ["--max-iterations", str(flags.iterations)]
    if flags.env_steps is not None:
        if flags.env_steps < 1:
            raise UsageError(f"--env-steps must be >= 1, got {flags.env_steps}")
        return ["--max-env-steps", str(flags.env_steps)]
    return []


def _check_fixed(fixed: list[str]) -> None:
    for arg in fixed:
        name = arg.split("=", 1)[0].lstrip("-").replace("_", "-")
        if arg.startswith("--") and name in RESERVED:
            raise UsageError(
                f"train flag {arg.split('=', 1)[0]} after --: the sweep sets it for every trial itself"
            )


def _check_train_flags(
    parse_args: Callable[[list[str]], Any], task: str, base: list[str], params: list[Param], fixed: list[str]
) -> Any:
    """Parse train's command line as each trial's will be: the fixed flags, then each parameter at each of its
    probe values (both bounds, every choice), with train's own parser. Returns train's flags without parameters
    (the budget in iterations: --iterations, else the task's)."""
    try:
        _, trained = parse_args([task, *base])
    except UsageError as exc:
        raise UsageError(f"train flags {shlex.join(fixed)}: {exc}") from None
    for p in params:
        for value in p.probe_values():
            try:
                parse_args([task, *base, p.flag, value])
            except UsageError as exc:
                raise UsageError(f"--param {p.path}={value}: {exc}") from None
    return trained


def _check_objective_reported(task: str, objective: Objective, fixed: list[str]) -> None:
    """A task's metrics and termination causes are known once it ran: one episode of zero actions says."""
    with tempfile.TemporaryDirectory(prefix="sweep-objective-") as tmp:
        output = Path(tmp) / "eval.json"
        cmd = [*python_command("mjfleet.cli.play"), task, "--agent", "zero", "--episodes", "1", "--num-envs", "1",
               "--gpu-ids", "None", "--logs-root", tmp, "--output", str(output)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not output.exists():
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UsageError(f"--objective {objective.name}: could not evaluate {task} to check it: {last}")
        check_reported(objective, json.loads(output.read_text()), task)

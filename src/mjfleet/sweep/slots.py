"""Where trials run: slots, each running one trial at a time, from the placement flags `train` already has.

--gpu-ids None [--cpu-workers W] [--slots S]   S trials at once on this machine's CPU, each on W workers
                                                (default S: the usable cores // W)
--gpu-ids all | 0 1 [--gpus-per-trial G] [--trials-per-gpu T]   every G GPUs run T trials at once
--hosts h1 h2 / --hosts slurm                  one slot per host (over train's own ssh launch); each trial is
                                                `train --hosts <host>` with the --gpu-ids/--cpu-workers given
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mjfleet.errors import UsageError


@dataclass(frozen=True)
class Slot:
    """One place a trial runs: its name in reports, the placement flags of its `train` and of its `play`."""

    name: str
    train_flags: tuple[str, ...]
    play_flags: tuple[str, ...]


def make_slots(flags: Any, resolve: bool = True) -> list[Slot]:
    """The slots the sweep's placement flags ask for (checked: GPUs that are not there and, with `resolve`, host
    names nobody resolves)."""
    from mjfleet.launch.devices import make_plan, parse_gpu_ids, runs_on_cpu, usable_cores
    from mjfleet.launch.hosts import resolve_host_names, resolve_hosts

    request = parse_gpu_ids(None if list(flags.gpu_ids) == ["auto"] else list(flags.gpu_ids))
    cpu = runs_on_cpu(request)
    workers = flags.cpu_workers or 1
    if workers < 1 or flags.gpus_per_trial < 1 or flags.trials_per_gpu < 1:
        raise UsageError("--cpu-workers, --gpus-per-trial and --trials-per-gpu must be >= 1")
    placement = ["--gpu-ids", "None", "--cpu-workers", str(workers)] if cpu else []
    hosts = resolve_host_names(list(flags.hosts))
    if hosts != ("localhost",):
        if resolve:
            resolve_hosts(hosts)  # a name nobody resolves is a one-line error now, not a failed trial later
        if not cpu:
            placement = ["--gpu-ids", *flags.gpu_ids]
        per_host = flags.slots or 1
        return [
            Slot(
                f"{host}#{k}" if per_host > 1 else host, (*placement, "--hosts", host), ("--gpu-ids", "None")
            )
            for host in hosts
            for k in range(per_host)
        ]
    if cpu:
        count = flags.slots or max(1, usable_cores() // workers)
        # The cores split among the trials, so that S trials' updates do not fight over every core.
        threads = ["--threads", str(max(1, usable_cores() // (count * workers)))]
        return [Slot(f"cpu{k}", (*placement, *threads), ("--gpu-ids", "None")) for k in range(count)]
    plan = make_plan(request)  # the GPUs that are there (a missing one is a one-line error)
    ids = (
        [str(i) for i in range(plan.world_size)]
        if request.mode in ("all", "default")
        else [str(i) for i in request.ids]
    )
    if len(ids) % flags.gpus_per_trial:
        raise UsageError(
            f"--gpus-per-trial {flags.gpus_per_trial} does not divide the {len(ids)} GPUs selected"
        )
    groups = [ids[i : i + flags.gpus_per_trial] for i in range(0, len(ids), flags.gpus_per_trial)]
    slots = [
        Slot(f"gpu{'+'.join(g)}#{k}", ("--gpu-ids", *g), ("--gpu-ids", g[0]))
        for g in groups
        for k in range(flags.trials_per_gpu)
    ]
    return slots[: flags.slots] if flags.slots else slots

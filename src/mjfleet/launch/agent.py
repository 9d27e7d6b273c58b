"""mjfleet's torchrunx agent: ``python -m mjfleet.launch.agent`` on every host, one per run.

It does what torchrunx's agent does (trade payloads with the launcher, spawn this host's workers through torch
elastic, report their status every round; the protocol's classes come through launch/seam.py) with three pieces
that hold the trust model (docs/distributed.md, "Network and trust"): logs go to the launcher as JSON after the
run token (logserver.py), the launcher-agent group is signed and bound (group.py), and workers bind their store
to the master address only (worker.py).

Everything it needs arrives as one JSON line on stdin, secrets included, so nothing private is on a command line.
Stdin then stays open as the launcher's line to this agent: "signal N" forwards signal N to this host's workers
(Ctrl-C/SIGTERM on the launching host reaches remote workers this way); end of file (the launcher or the ssh
connection is gone) ends the workers and the agent. The agent dies with its parent (the ssh session or the
launcher) and workers die with the agent, so no process outlives a run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

import psutil

from mjfleet.fleet.liveness import BEAT_FILE_ENV, read_beat, start_file
from mjfleet.launch.worker import die_with_parent, worker_entrypoint

if TYPE_CHECKING:
    from mjfleet.launch.group import SignedGroup
    from mjfleet.launch.seam import AgentStatus

UNREACHABLE_EXIT = 3
_TEMPORARY: list[str] = []
"""Folders this agent made (its workers' beat files), removed however it ends."""


def main() -> None:
    die_with_parent()
    # The launcher decides who gets a signal; a Ctrl-C meant for its terminal must not end the agent (its workers
    # would then be killed before they save).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = json.loads(sys.stdin.readline())
    os.environ.update(spec["env"])
    address, port = spec["launcher_address"], spec["launcher_port"]
    try:
        socket.create_connection((address, port), timeout=10).close()
    except OSError as exc:
        print(
            f"{spec['hostname']} cannot reach the launching host at {address}:{port} "
            f"({exc.strerror or exc}); give an address it can reach with --rendezvous-host",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(UNREACHABLE_EXIT)
    _bind_collectives_to_the_route_to(address)
    threading.Thread(target=_follow_launcher, name="mjfleet-agent-stdin", daemon=True).start()

    from mjfleet.launch.group import TOKEN_ENV, SignedGroup
    from mjfleet.launch.logserver import send_logs_to
    from mjfleet.launch.seam import redirect_stdio_to_logger

    send_logs_to(spec["hostname"], None, address, spec["logger_port"], os.environ[TOKEN_ENV])
    redirect_stdio_to_logger(logging.getLogger())
    group = SignedGroup(
        launcher_hostname=address,
        launcher_port=port,
        world_size=spec["world_size"],
        rank=spec["rank"],
        agent_timeout=spec["agent_timeout"],
    )
    run_workers_here(group, address, spec["logger_port"])


def run_workers_here(group: SignedGroup, logger_address: str, logger_port: int) -> None:
    """torchrunx's agent protocol: trade payloads with the launcher, spawn this host's workers through torch
    elastic, then report their status every round until every host is done or one has failed."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes

    from mjfleet.launch.seam import AgentPayload, WorkerArgs, get_open_port

    logger = logging.getLogger()
    me = group.rank - 1
    here = AgentPayload(hostname=socket.getfqdn(), port=get_open_port(), process_id=os.getpid())
    launch, agents = group.sync_payloads(payload=here)
    ranks = launch.worker_global_ranks[me]
    hostname = launch.hostnames[me]
    worker_args = {
        local_rank: WorkerArgs(
            function=launch.fn,
            logger_hostname=logger_address,
            logger_port=logger_port,
            master_hostname=agents[0].hostname,
            master_port=agents[0].port,
            backend=launch.backend,
            rank=rank,
            local_rank=local_rank,
            node_rank=me,
            local_world_size=len(ranks),
            world_size=launch.worker_world_size,
            hostname=hostname,
            timeout=launch.worker_timeout,
        )
        for local_rank, rank in enumerate(ranks)
    }
    logger.info(f"Starting {len(ranks)} worker processes.")
    beats_dir = tempfile.mkdtemp(prefix="mjfleet-beats-")
    _TEMPORARY.append(beats_dir)
    beat_files = {rank: os.path.join(beats_dir, f"rank-{rank}") for rank in ranks}
    for path in beat_files.values():
        start_file(path)
    workers = start_processes(
        name=f"{hostname}_",
        entrypoint=worker_entrypoint,
        args={i: (a.serialize(),) for i, a in worker_args.items()},
        # the agent's environment is copied to its workers as it is, plus where each one beats (fleet/liveness.py)
        envs={i: {BEAT_FILE_ENV: beat_files[a.rank]} for i, a in worker_args.items()},
        logs_specs=DefaultLogsSpecs(log_dir=tempfile.mkdtemp()),  # output goes to the launcher's log server
    )
    try:
        status = None
        while True:
            if status is None or status.state == "running":
                status = _status(workers.wait(5), ranks, hostname, beat_files)
            statuses = group.sync_agent_statuses(status=status)  # raises AgentFailedError when a peer is gone
            failed = any(s.state == "failed" for s in statuses)
            if failed or all(s.state == "done" for s in statuses):
                logger.info(f"Workers exited {'with' if failed else 'without'} errors.")
                break
    finally:
        workers.close()
        sys.stdout.flush()
        sys.stderr.flush()
        group.shutdown()
        shutil.rmtree(beats_dir, ignore_errors=True)


def _status(result: Any, ranks: list[int], host: str, beat_files: dict[int, str]) -> AgentStatus:
    """This host's status from torch elastic's result (None while every worker runs): while running, its
    workers' last beats (fleet/liveness.py; the launcher judges them); then the return values by local rank, a failed
    worker's replaced by its failure record (fleet/failure.py, written to torch elastic's error file)."""
    from mjfleet.fleet.failure import Failure, from_process_failure
    from mjfleet.launch.seam import AgentStatus

    if result is None:
        beats = (read_beat(path, rank) for rank, path in beat_files.items())
        return AgentStatus(state="running", return_values=[b for b in beats if b is not None])
    values = dict(result.return_values)
    for local_rank, failure in result.failures.items():
        values[local_rank] = from_process_failure(failure, ranks[local_rank], host)
    ordered = [values[local_rank] for local_rank in sorted(values)]
    failed = any(isinstance(value, Failure) for value in ordered)
    return AgentStatus(state="failed" if failed else "done", return_values=ordered)


def _bind_collectives_to_the_route_to(address: str) -> None:
    """gloo/nccl listen on the interface that reaches the launcher unless the user named one (GLOO_SOCKET_IFNAME,
    NCCL_SOCKET_IFNAME): loopback for a run on one machine, the cluster network for several."""
    from mjfleet.launch.hosts import interface_of, source_address

    interface = interface_of(source_address(address))
    if interface is not None:
        for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(variable, interface)


def _follow_launcher() -> None:
    for line in sys.stdin:
        word, _, value = line.strip().partition(" ")
        if word == "signal" and value.isdigit():
            _send_to_workers(int(value))
    # End of input: the launcher is done with us, or gone.
    _send_to_workers(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    _send_to_workers(signal.SIGKILL)
    for folder in _TEMPORARY:
        shutil.rmtree(folder, ignore_errors=True)
    logging.shutdown()
    os._exit(0)


def _workers() -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def _send_to_workers(sig: int) -> None:
    for proc in _workers():
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


if __name__ == "__main__":
    main()

"""mjfleet's torchrunx agent: ``python -m mjfleet.launch.agent`` on every host, one per run.

It runs torchrunx's own agent (torchrunx.agent.main) with three pieces swapped for ones that hold the trust model
(docs/distributed.md, "Network and trust"): logs go to the launcher as JSON after the run token (logserver.py),
the launcher-agent group is signed and bound (group.py), and workers bind their store to the master address only.

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
import signal
import socket
import sys
import threading
import time

import psutil

from mjfleet.launch.workerentry import die_with_parent, worker_entrypoint

UNREACHABLE_EXIT = 3


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

    import torchrunx.agent as agent

    from mjfleet.launch.group import SignedGroup
    from mjfleet.launch.logserver import send_logs_to

    token = os.environ["MJFLEET_RUN_TOKEN"]
    agent.log_records_to_socket = lambda hostname, local_rank, logger_hostname, logger_port: send_logs_to(
        hostname, local_rank, logger_hostname, logger_port, token
    )
    agent.LauncherAgentGroup = SignedGroup
    agent.worker_entrypoint = worker_entrypoint
    agent.main(
        launcher_hostname=address,
        launcher_port=port,
        world_size=spec["world_size"],
        rank=spec["rank"],
        logger_hostname=address,
        logger_port=spec["logger_port"],
        hostname=spec["hostname"],
        agent_timeout=spec["agent_timeout"],
    )


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

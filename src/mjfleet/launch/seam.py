"""The one module of mjfleet that imports torchrunx: every name it uses, with why, and what it relies on.

torchrunx's public surface (``Launcher``, ``LaunchResult``, ``DEFAULT_ENV_VARS_FOR_COPY``, two errors) cannot hold
mjfleet's trust model: its launcher and agent listen on every interface, unpickle what arrives, and take their
log server, group and worker entry point from module globals. So mjfleet runs torchrunx's launcher-agent
protocol itself (launch/agents.py on the launching host, launch/agent.py on each host, launch/worker.py in
each worker) with the protocol's own classes, listed below. Each entry of :data:`RELIED_ON` names a torchrunx
name and the parameters, fields or attributes mjfleet uses; tests/test_torchrunx_seam.py checks every one, so a
torchrunx upgrade that changes them fails there, naming the name, rather than at a user's launch.
"""

from __future__ import annotations

from typing import NamedTuple

# Public (torchrunx.__all__).
from torchrunx import DEFAULT_ENV_VARS_FOR_COPY, AgentFailedError

# Private: the launcher-agent protocol (payloads, statuses, the group they travel through) and the worker's
# arguments. mjfleet speaks this protocol on both ends, so the classes only need to agree with themselves; they
# are torchrunx's so that the agents and workers stay torchrunx's design (one agent per host, one worker per
# GPU, spawned by torch elastic) and so that a change of that design shows here first.
from torchrunx.utils.comm import AgentPayload, AgentStatus, LauncherAgentGroup, LauncherPayload, get_open_port
from torchrunx.utils.log_streaming import redirect_stdio_to_logger
from torchrunx.worker import WorkerArgs

__all__ = [
    "DEFAULT_ENV_VARS_FOR_COPY",
    "RELIED_ON",
    "AgentFailedError",
    "AgentPayload",
    "AgentStatus",
    "LauncherAgentGroup",
    "LauncherPayload",
    "WorkerArgs",
    "get_open_port",
    "redirect_stdio_to_logger",
]


class Reliance(NamedTuple):
    """A torchrunx name, the parameters/fields/attributes of it that mjfleet uses, and why it is used."""

    name: str
    needs: tuple[str, ...]
    why: str


RELIED_ON = (
    Reliance(
        "torchrunx.DEFAULT_ENV_VARS_FOR_COPY",
        (),
        "public: the variables torchrunx copies to workers (PATH, PYTHON*, CUDA*, ...); mjfleet adds its own",
    ),
    Reliance("torchrunx.AgentFailedError", (), "public: what a broken launcher-agent exchange raises"),
    Reliance(
        "torchrunx.utils.comm.LauncherAgentGroup",
        ("launcher_hostname", "launcher_port", "world_size", "rank", "agent_timeout")
        + ("sync_payloads", "sync_agent_statuses", "shutdown", "_all_gather"),
        "the launcher-agent group; launch/group.py subclasses it to bind and sign, overriding the private "
        "_all_gather that both sync_* calls go through",
    ),
    Reliance(
        "torchrunx.utils.comm.LauncherPayload",
        ("fn", "hostnames", "worker_global_ranks", "worker_world_size", "backend", "worker_timeout"),
        "what the launcher sends every agent: the function and who runs it",
    ),
    Reliance(
        "torchrunx.utils.comm.AgentPayload",
        ("hostname", "port", "process_id"),
        "what each agent sends back: the first agent's free port becomes rank 0's store port",
    ),
    Reliance(
        "torchrunx.utils.comm.AgentStatus",
        ("state", "return_values"),
        "an agent's report each round: running / failed / done, and its workers' results by local rank (a failed "
        "worker's as mjfleet's failure record, fleet/failure.py); while running, their liveness beats "
        "(fleet/liveness.py)",
    ),
    Reliance(
        "torchrunx.utils.comm.get_open_port", (), "the free port the first agent offers for rank 0's store"
    ),
    Reliance(
        "torchrunx.utils.log_streaming.redirect_stdio_to_logger",
        ("logger",),
        "agents' and workers' stdout/stderr file descriptors become log records (INFO/ERROR) for the launcher",
    ),
    Reliance(
        "torchrunx.worker.WorkerArgs",
        ("function", "logger_hostname", "logger_port", "master_hostname", "master_port", "backend", "rank")
        + ("local_rank", "node_rank", "local_world_size", "world_size", "hostname", "timeout")
        + ("serialize", "from_bytes"),
        "what an agent hands each worker it spawns (serialised through torch elastic)",
    ),
)

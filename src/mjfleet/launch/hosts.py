"""Where each host of a multi-host run is, and which address of this machine the others reach it at.

Host names are what the user typed: a name ssh resolves itself (``~/.ssh/config`` aliases with HostName, Port,
User, IdentityFile, ProxyJump, ...) or one the resolver knows. ``ssh -G`` says what ssh would connect to, so an
alias works wherever ssh works; the address it names is the one the other hosts are assumed to reach it at.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass

import psutil

from mjfleet.errors import UsageError

RENDEZVOUS_ENV = "MJFLEET_RENDEZVOUS_HOST"
"""The address (or name) of this machine that remote agents connect to, when the automatic choice is wrong."""


@dataclass(frozen=True)
class Host:
    """One host of the run: the name as given, the address it is reached at, and whether it is this machine."""

    name: str
    address: str
    local: bool


def resolve_hosts(names: tuple[str, ...]) -> list[Host]:
    """Resolve every ``--hosts`` entry once, before anything starts; a name nobody knows is a one-line error."""
    mine = local_addresses()
    hosts = []
    for name in names:
        if name in ("localhost", socket.gethostname()):
            hosts.append(Host(name, "127.0.0.1", True))
            continue
        address = _address(name)
        hosts.append(Host(name, address, address in mine or ipaddress.ip_address(address).is_loopback))
    return hosts


def _address(name: str) -> str:
    target = name
    if shutil.which("ssh"):
        result = subprocess.run(["ssh", "-G", name], capture_output=True, text=True, timeout=30)
        if result.returncode == 0:
            for line in result.stdout.splitlines():
                key, _, value = line.partition(" ")
                if key == "hostname":
                    target = value.strip()
    try:
        return socket.getaddrinfo(target, 22, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        alias = f" (ssh config names it {target})" if target != name else ""
        raise UsageError(
            f"--hosts: cannot resolve {name!r}{alias}: use a host name, an address, or a Host in ~/.ssh/config"
        ) from None


def local_addresses() -> set[str]:
    """Every IP address of this machine's interfaces (in this network namespace)."""
    return {
        addr.address.split("%")[0]
        for addrs in psutil.net_if_addrs().values()
        for addr in addrs
        if addr.family in (socket.AF_INET, socket.AF_INET6)
    }


def source_address(destination: str) -> str:
    """The address of this machine that packets to `destination` leave from (the routing table's choice)."""
    family = socket.AF_INET6 if ":" in destination else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, 9))  # UDP: no packet is sent, the kernel only picks a route
        return probe.getsockname()[0]


def interface_of(address: str) -> str | None:
    """The name of the interface that holds `address` (e.g. "lo", "eth0"), or None."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addrs):
            return name
    return None


def rendezvous_address(hosts: list[Host], requested: str | None = None) -> str:
    """The address of this machine the agents connect to: loopback when every host is this machine, else the
    requested one (--rendezvous-host or $MJFLEET_RENDEZVOUS_HOST), else the one the route to the first remote host
    leaves from. Listeners bind this address only."""
    requested = requested or os.environ.get(RENDEZVOUS_ENV) or None
    remote = [h for h in hosts if not h.local]
    if requested is None:
        if not remote:
            return "127.0.0.1"
        try:
            return source_address(remote[0].address)
        except OSError as exc:
            raise UsageError(f"--hosts: no route to {remote[0].name} ({remote[0].address}): {exc}") from None
    try:
        address = socket.getaddrinfo(requested, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        raise UsageError(f"--rendezvous-host: cannot resolve {requested!r}") from None
    if address not in local_addresses():
        raise UsageError(f"--rendezvous-host: {requested} ({address}) is not an address of this machine")
    return address


def resolve_host_names(hosts: list[str] | None) -> tuple[str, ...]:
    """The hosts of a run, as typed: `localhost` when none, the allocation's nodes for `slurm`; no repeats."""
    names = [h.strip() for h in (hosts or []) if h.strip()]
    if not names:
        return ("localhost",)
    if "slurm" in names:
        if len(names) > 1:
            raise UsageError(
                "--hosts slurm takes the hosts from the SLURM allocation; do not list others with it"
            )
        return _slurm_hosts()
    duplicates = sorted({h for h in names if names.count(h) > 1})
    if duplicates:
        raise UsageError(
            f"--hosts: {', '.join(duplicates)} listed twice; each host runs all its workers once"
        )
    return tuple(names)


def _slurm_hosts() -> tuple[str, ...]:
    """The allocation's node names (`scontrol show hostnames`, as torchrunx finds them)."""
    from mjfleet.fleet.srun import SlurmError, scontrol_hostnames
    from mjfleet.launch.slurm import current_job

    if current_job() is None:
        raise UsageError(
            "--hosts slurm: not inside a SLURM allocation (SLURM_JOB_ID is not set); "
            "run under salloc/sbatch, or list hosts by name"
        )
    try:
        names = scontrol_hostnames()
    except SlurmError as exc:  # scontrol missing or failing
        raise UsageError(
            f"--hosts slurm: could not list the allocation's nodes with scontrol: {exc}"
        ) from None
    if not names:
        raise UsageError("--hosts slurm: scontrol listed no nodes for this allocation")
    return tuple(names)

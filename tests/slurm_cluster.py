"""A one-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's slurm-wlm and munge packages,
configured and run entirely under one temporary directory, started and stopped by pid.

Nothing system-wide is used or changed: the munge key, socket and seed, Slurm's state, spool, logs and pid files all
live under the directory; the daemons talk over loopback (the node's address is 127.0.0.1) on ports picked free.
Clients find the cluster through ``SLURM_CONF`` (see :meth:`SlurmCluster.env`). Needs root (SlurmUser=root, and
slurmd starts jobs as their user), no cgroups (proctrack/linuxproc, task/none).

Also a command line for trying the shipped batch script by hand:
``python tests/slurm_cluster.py up DIR`` prints the ``export SLURM_CONF=...`` to use, ``... down DIR`` stops it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "salloc", "scontrol", "squeue", "scancel", "sinfo")


def missing_reason() -> str | None:
    """Why a Slurm cluster cannot be started on this machine, or None when it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a one-node Slurm cluster needs root (SlurmUser=root); .ci/run runs as root"
    missing = [
        name
        for name in (*DAEMONS, *CLIENTS, "mungekey")
        if shutil.which(name) is None and not os.path.exists(f"/usr/sbin/{name}")
    ]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line() -> str:
    """This machine as a NodeName line (`slurmd -C`: CPUs, sockets, cores, threads), on loopback. RealMemory is
    left out so that no memory is reserved or checked."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    fields = out.splitlines()[0].split()
    kept = [f for f in fields if not f.startswith("RealMemory=")]
    return " ".join([*kept, "NodeAddr=127.0.0.1", "State=UNKNOWN"])


class SlurmCluster:
    """munged + slurmctld + slurmd under `root`; `start()` waits until the node is idle, `stop()` ends each
    daemon by its pid (SIGTERM, then SIGKILL after a grace period) whatever state the cluster is in."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = pathlib.Path(root).resolve()
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.node = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        """Environment variables that point Slurm's clients (and jobs) at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "# written by tests/slurm_cluster.py: a one-node cluster under one temporary directory",
                    "ClusterName=mjfleet-test",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    f"StateSaveLocation={r}/state",
                    f"SlurmdSpoolDir={r}/spool",
                    f"SlurmctldPidFile={r}/run/slurmctld.pid",
                    f"SlurmdPidFile={r}/run/slurmd.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd.log",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    # No cgroups: track a job's processes through /proc and bind no CPUs.
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "SwitchType=switch/none",
                    "MpiDefault=none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/builtin",
                    "ReturnToService=2",
                    # Requeued jobs may start again at once, as a preempted job would on a free node.
                    "JobRequeue=1",
                    # Time between Slurm's SIGTERM and SIGKILL: a worker finishes its iteration and saves in it.
                    "KillWait=30",
                    "MinJobAge=300",
                    _node_line(),
                    f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def start(self, timeout: float = 60.0) -> None:
        self.write_config()
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            subprocess.run(
                [_binary("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True
            )
            os.chmod(key, 0o400)
        self._spawn(
            "munged",
            [
                _binary("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.root}/run/munged.pid",
                f"--log-file={self.root}/log/munged.log",
                f"--seed-file={self.root}/munge/munged.seed",
            ],
        )
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged to create its socket")
        self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._scontrol("ping").returncode == 0, timeout, "slurmctld to answer")
        self._spawn("slurmd", [_binary("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self._node_idle, timeout, f"node {self.node} to become idle")

    def stop(self, grace: float = 10.0) -> None:
        """End every daemon this cluster started, newest first, by its pid."""
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - owned by the child
        env = {**os.environ, **self.env()}
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()

    def _scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [_binary("scontrol"), *args], capture_output=True, text=True, env={**os.environ, **self.env()}
        )

    def _node_idle(self) -> bool:
        out = self._scontrol("show", "node", self.node).stdout
        return "State=IDLE" in out

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} while waiting for {what}:\n{self.log(name)[-2000:]}"
                        f"{(self.root / 'log' / f'{name}.stdout').read_text(errors='replace')[-2000:]}"
                    )
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextlib.contextmanager
def running_cluster(root: str | os.PathLike) -> Iterator[SlurmCluster]:
    """A started cluster, stopped (every daemon, by pid) when the block ends, however it ends."""
    cluster = SlurmCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python tests/slurm_cluster.py up|down DIR", file=sys.stderr)
        return 2
    action, root = argv[0], pathlib.Path(argv[1])
    if action == "up":
        reason = missing_reason()
        if reason:
            print(reason, file=sys.stderr)
            return 1
        cluster = SlurmCluster(root)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        for name, proc in cluster.procs.items():
            (root / "run" / f"{name}.started").write_text(str(proc.pid))
        print(f"export SLURM_CONF={cluster.conf}")
        return 0
    for name in reversed(DAEMONS):  # the pids `up` started, newest first
        pid_file = root / "run" / f"{name}.started"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            pid_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

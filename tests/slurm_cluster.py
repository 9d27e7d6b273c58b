"""Slurm clusters for tests: munged, slurmctld and slurmd from Debian's slurm-wlm and munge packages, configured
and run under one temporary directory, started and stopped by pid.

Nothing system-wide is used or changed: the munge key and seed, Slurm's state, logs and pid files all live under
the directory; the Unix sockets (munge's, and the slurmd spool that holds the job steps') in a short temporary
directory of their own, removed with the cluster. Clients find the cluster through ``SLURM_CONF`` (see
:meth:`SlurmCluster.env`). Needs root (SlurmUser=root, and slurmd starts jobs as their user), no cgroups
(proctrack/linuxproc, task/none).

- One node (:func:`running_cluster`): the daemons talk over loopback (the node's address is 127.0.0.1) on ports
  picked free.
- Two nodes (:func:`running_two_node_cluster`): the namespace test bed of scripts/testbed/hosts.sh, slurmctld on
  its "login" host and one slurmd on each of "hosta" and "hostb" (each in its host's network, hostname and
  /etc/hosts), one munged for all (its socket is a file, which every namespace sees). Jobs on a node see the test
  bed's ~/.ssh, so ``train --hosts slurm`` reaches the other node over ssh as on a cluster.

Also a command line for trying the shipped batch script by hand:
``python tests/slurm_cluster.py up DIR`` prints the ``export SLURM_CONF=...`` to use, ``... down DIR`` stops it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator

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


def _node_line(name: str, address: str) -> str:
    """A node with this machine's CPUs, sockets, cores and threads (`slurmd -C`) as a NodeName line. RealMemory
    is left out so that no memory is reserved or checked."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    fields = out.splitlines()[0].split()
    kept = [f for f in fields if not f.startswith(("NodeName=", "RealMemory="))]
    return " ".join([f"NodeName={name}", *kept, f"NodeAddr={address}", "State=UNKNOWN"])


class SlurmCluster:
    """munged + slurmctld + one slurmd per node under `root`; `start()` waits until every node is idle, `stop()`
    ends each daemon by its pid (SIGTERM, then SIGKILL after a grace period) whatever state the cluster is in.

    `nodes` are (name, address) pairs (default: this machine on loopback); `on(host)` is the command prefix that
    runs a command on a host (default: none, this machine); slurmctld runs on `controller` (default: the first
    node) and :meth:`client` runs Slurm's commands there."""

    def __init__(
        self,
        root: str | os.PathLike,
        nodes: list[tuple[str, str]] | None = None,
        controller: tuple[str, str] | None = None,
        on: Callable[[str], list[str]] | None = None,
        slurmd_prefix: tuple[str, ...] = (),
    ) -> None:
        self.root = pathlib.Path(root).resolve()
        self.conf = self.root / "slurm.conf"
        # Unix socket paths (munge's, slurmstepd's <spool>/<node>_<job>.<step>) may not exceed 108 bytes, and a
        # test's tmp_path can come close on its own (pytest-xdist adds popen-gw<N>/ to it): the sockets live in a
        # short directory of their own, removed by stop().
        self.sockets = pathlib.Path(tempfile.mkdtemp(prefix="mjs-"))
        self.munge_socket = self.sockets / "munge" / "munge.socket"
        self.nodes = nodes or [(socket.gethostname().split(".")[0], "127.0.0.1")]
        self.controller = controller or self.nodes[0]
        self.node = self.nodes[0][0]
        self._on = on or (lambda host: [])
        self._slurmd_prefix = list(slurmd_prefix)
        self.procs: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        """Environment variables that point Slurm's clients (and jobs) at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client(self, *argv: str) -> list[str]:
        """The command line that runs a Slurm client (sbatch, scontrol, ...) on the controller's host."""
        return [*self._on(self.controller[0]), *argv]

    def log(self, daemon: str) -> str:
        """A daemon's log: "munged", "slurmctld" or "slurmd-<node>"."""
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def write_config(self) -> None:
        for sub in ("munge", "state", "log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("munge", *(f"spool/{name}" for name, _ in self.nodes)):
            (self.sockets / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        os.chmod(self.sockets / "munge", 0o700)
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    f"# written by tests/slurm_cluster.py: a {len(self.nodes)}-node cluster under one directory",
                    "ClusterName=mjfleet-test",
                    f"SlurmctldHost={self.controller[0]}({self.controller[1]})",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    f"StateSaveLocation={r}/state",
                    # %n: the node's name, so that several slurmds on one machine keep apart.
                    f"SlurmdSpoolDir={self.sockets}/spool/%n",
                    f"SlurmctldPidFile={r}/run/slurmctld.pid",
                    f"SlurmdPidFile={r}/run/slurmd-%n.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd-%n.log",
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
                    *(_node_line(name, address) for name, address in self.nodes),
                    f"PartitionName=test Nodes={','.join(n for n, _ in self.nodes)} Default=YES MaxTime=INFINITE "
                    "State=UP",
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
        ctl = [*self._on(self.controller[0]), _binary("slurmctld"), "-D", "-i", "-f", str(self.conf)]
        self._spawn("slurmctld", ctl)
        self._wait(lambda: self._scontrol("ping").returncode == 0, timeout, "slurmctld to answer")
        for name, _ in self.nodes:
            self._spawn(
                f"slurmd-{name}",
                [
                    *self._on(name),
                    *self._slurmd_prefix,
                    _binary("slurmd"),
                    "-D",
                    "-f",
                    str(self.conf),
                    "-N",
                    name,
                ],
            )
        for name, _ in self.nodes:
            self._wait(lambda name=name: self._node_idle(name), timeout, f"node {name} to become idle")

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
        shutil.rmtree(self.sockets, ignore_errors=True)

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - owned by the child
        env = {**os.environ, **self.env()}
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        out.close()

    def _scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.client(_binary("scontrol"), *args),
            capture_output=True,
            text=True,
            env={**os.environ, **self.env()},
            timeout=60,
        )

    def _node_idle(self, name: str) -> bool:
        return "State=IDLE" in self._scontrol("show", "node", name).stdout

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


TESTBED = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "testbed" / "hosts.sh"
TESTBED_HOSTS = {"login": "198.18.0.1", "hosta": "198.18.0.2", "hostb": "198.18.0.3"}
"""scripts/testbed/hosts.sh's hosts and their addresses (inside the test bed's namespaces only)."""


def bed_missing_reason() -> str | None:
    """Why a two-node cluster in the namespace test bed cannot run here (on top of :func:`missing_reason`)."""
    reason = missing_reason()
    if reason:
        return reason
    for tool in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed; the namespace test bed needs iproute2, util-linux and openssh"
    if shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"):
        return "sshd is not installed (apt-get install openssh-server)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "`ip netns` is not available here"
    return None


CGROUP_MOUNT = (
    "sh",
    "-c",
    "mount -t tmpfs slurmd-cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd"
    ' && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd && exec "$@"',
    "sh",
)
"""What runs slurmd in a test bed host. `ip netns exec` mounts a sysfs of the namespace's own on /sys, where
/sys/fs/cgroup is a bare directory, and slurmd 22.05 will not start without cgroup v1's layout there ("No
filesystem mounted on /sys/fs/cgroup", then "can't stat /sys/fs/cgroup/systemd/"), even with proctrack/linuxproc
and task/none, which use no cgroup. So, in slurmd's own mount namespace only: a tmpfs there, and in it the
machine's name=systemd hierarchy (an empty new one where there is none), all that it checks; with these
plugins it creates nothing in them."""


_beds = itertools.count()


class HostsBed:
    """The namespace test bed of scripts/testbed/hosts.sh under `root`, with a namespace prefix of its own."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.dir = pathlib.Path(root).resolve() / "bed"
        self.prefix = f"mjs{os.getpid() % 100000}{next(_beds)}"  # several beds may be up at once
        self.env = {"TESTBED_PREFIX": self.prefix, "TESTBED_DIR": str(self.dir)}

    def script(self, action: str) -> None:
        done = subprocess.run(
            [str(TESTBED), action],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"hosts.sh {action} failed: {done.stderr.strip()}")

    def on(self, host: str) -> list[str]:
        """The command prefix that runs a command on `host`."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), str(TESTBED), "exec", host]

    def sshd_pid(self, host: str) -> int:
        return int((self.dir / f"sshd-{host}.pid").read_text())

    def net_namespaces(self) -> dict[int, str]:
        """The inode of each host's network namespace, and the host."""
        return {os.stat(f"/run/netns/{self.prefix}-{h}").st_ino: h for h in TESTBED_HOSTS}


def processes_in_namespaces(inodes: dict[int, str]) -> dict[int, str]:
    """Every process (pid: host) whose network namespace is one of `inodes`: nothing but what a test bed started
    runs there."""
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                inode = os.stat(entry / "ns" / "net").st_ino
            except OSError:
                continue
            if inode in inodes:
                found[int(entry.name)] = inodes[inode]
    return found


def parent_pid(pid: int) -> int | None:
    """The parent of process `pid`, None once it ended."""
    try:
        return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def kill_by_pid(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def running_two_node_cluster(root: str | os.PathLike) -> Iterator[tuple[SlurmCluster, HostsBed]]:
    """The test bed's hosts with slurmctld on "login" and a slurmd on "hosta" and on "hostb". However the block
    ends: the jobs' processes are killed by pid (every process left in the test bed's namespaces that is not a
    daemon: job steps, `train`, agents started over ssh, workers), then the Slurm daemons and the sshds by pid,
    then the namespaces are deleted."""
    bed = HostsBed(root)
    cluster = SlurmCluster(
        pathlib.Path(root).resolve() / "slurm",
        nodes=[("hosta", TESTBED_HOSTS["hosta"]), ("hostb", TESTBED_HOSTS["hostb"])],
        controller=("login", TESTBED_HOSTS["login"]),
        on=bed.on,
        slurmd_prefix=CGROUP_MOUNT,
    )
    inodes: dict[int, str] = {}
    try:
        bed.script("up")
        inodes = bed.net_namespaces()
        cluster.start()
        yield cluster, bed
    finally:
        try:
            sshds = {bed.sshd_pid(h) for h in TESTBED_HOSTS if (bed.dir / f"sshd-{h}.pid").exists()}
            daemons = sshds | {p.pid for p in cluster.procs.values()}
            # Not slurmctld's own child (slurmscriptd): killed under it, slurmctld waits out stop()'s grace.
            kill_by_pid(p for p in processes_in_namespaces(inodes) if not {p, parent_pid(p)} & daemons)
            cluster.stop()
            # A step slurmd started while the first sweep ran.
            kill_by_pid(pid for pid in processes_in_namespaces(inodes) if pid not in sshds)
        finally:
            bed.script("down")


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
        started = "".join(f"{proc.pid}\n" for proc in cluster.procs.values())
        (root / "run" / "started").write_text(started)
        (root / "run" / "sockets").write_text(str(cluster.sockets))
        print(f"export SLURM_CONF={cluster.conf}")
        return 0
    pid_file = root / "run" / "started"
    if pid_file.exists():
        for pid in reversed(pid_file.read_text().split()):  # the pids `up` started, newest first
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
        pid_file.unlink()
    sockets = root / "run" / "sockets"
    if sockets.exists():
        shutil.rmtree(sockets.read_text().strip(), ignore_errors=True)
        sockets.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

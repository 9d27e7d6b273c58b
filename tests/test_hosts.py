"""Several hosts for real: network namespaces as hosts (scripts/testbed/hosts.sh), agents started over real ssh.

The launching host ("login") and the hosts ("hosta", "hostb") each have their own network stack, hostname,
/etc/hosts and sshd; no address outside the namespaces is used. The same filesystem is visible everywhere (the
run directory and the warp kernel cache are shared, as on a cluster with a shared home). Needs root, `ip netns`
and OpenSSH (.ci/run installs it); skipped with the reason otherwise, failed under CI=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from helpers import require_infrastructure

# Real daemons and many processes: `.ci/run` runs these in its second step, as root.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / "scripts" / "testbed" / "hosts.sh"
BIN = Path(sys.executable).parent
SECRET = "fake-wandb-key-7f3a9c"
HOSTS = ("login", "hosta", "hostb")
LOOPBACK = ("127.0.0.1:", "[::1]:")
TINY = ["Cartpole-Balance", "--gpu-ids", "None", "--num-envs", "8", "--agent.num-steps-per-env", "8"]
TINY += ["--agent.ppo.gradient-reducer", "all-reduce", "--seed", "3"]
NO_HANG_S = 300
"""A hang guard, not a timing: how long a stopped or failed run, or its leftover processes, may take to end before
the test calls it a hang. Minutes, so that a loaded 2-core machine never trips it; still half the workers' 600 s
collective timeout (launch/launcher.py's worker_timeout), so a fault reported by the launcher is told apart from
one that merely timed out."""
STARTUP_NO_HANG_S = 400
"""A hang guard for a long run's first iteration: agents started over ssh, warp kernels maybe compiled cold."""


def _why_not() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (apt-get install openssh-server)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True)
    if probe.returncode != 0:
        return "`ip netns` is not available here"
    return None


class Bed:
    def __init__(self, directory: Path) -> None:
        self.prefix = f"mjt{os.getpid() % 100000}"
        self.dir = directory
        self.env = {**os.environ, "TESTBED_PREFIX": self.prefix, "TESTBED_DIR": str(directory / "bed")}

    def script(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([str(TESTBED), *args], env=self.env, capture_output=True, text=True, **kw)

    def on(self, host: str, *cmd: str) -> list[str]:
        """A command line that runs `cmd` on `host`."""
        bed = [f"TESTBED_PREFIX={self.prefix}", f"TESTBED_DIR={self.dir / 'bed'}"]
        return ["env", *bed, str(TESTBED), "exec", host, *cmd]

    def sessions(self, host: str) -> int:
        """ssh sessions sshd on `host` has started (one per agent started there)."""
        log = self.dir / "bed" / f"sshd-{host}.log"
        return log.read_text().count("Starting session: command") if log.exists() else 0

    def net_inode(self, host: str) -> int:
        return os.stat(f"/run/netns/{self.prefix}-{host}").st_ino

    def listeners(self, host: str, with_pids: bool = False) -> list:
        """The listening TCP sockets in `host`'s network stack, as "address:port" (with the owner's pid)."""
        out = subprocess.run(
            ["ip", "netns", "exec", f"{self.prefix}-{host}", "ss", "-ltnpH"], capture_output=True, text=True
        ).stdout
        found = []
        for line in out.splitlines():
            if not line.strip():
                continue
            address = line.split()[3]
            pid = int(line.split("pid=")[1].split(",")[0]) if "pid=" in line else None
            found.append((address, pid) if with_pids else address)
        return found


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    require_infrastructure(_why_not())
    directory = tmp_path_factory.mktemp("testbed")
    testbed = Bed(directory)
    try:
        up = testbed.script("up", timeout=120)
        assert up.returncode == 0, up.stderr
        yield testbed
    finally:
        down = testbed.script("down", timeout=120)
        assert down.returncode == 0, down.stderr


def run_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUNX", "MJFLEET"))}
    env["WARP_CACHE_PATH"] = os.environ.get("WARP_CACHE_PATH", str(ROOT / ".warp_cache"))
    env |= {"WANDB_API_KEY": SECRET, "MY_SERVICE_TOKEN": SECRET + "-t"} | (extra or {})
    return env


def stop_run(proc: subprocess.Popen, directory: Path) -> None:
    """For a test's `finally`: the launcher killed, then whatever it started that still works in `directory` (agents
    and workers on any host: the namespaces share one process table), so a failed test leaves nothing behind."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=60)
    stop_leftovers(directory)


def stop_leftovers(directory: Path) -> None:
    """Kill whatever still works in `directory` on any host (agents started over ssh, their workers)."""
    for leftover in processes_in(directory):
        with contextlib.suppress(psutil.Error):
            leftover.kill()


def ends_within_no_hang_limit(proc: subprocess.Popen) -> bool:
    """Whether `proc` ends within NO_HANG_S; it is killed (by the caller's `finally`) when it does not."""
    try:
        proc.wait(timeout=NO_HANG_S)
    except subprocess.TimeoutExpired:
        return False
    return True


def run_captured(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """`command` run to its end, its output captured as text; past `timeout` the test fails and what the command
    started in `cwd`, on any host, is stopped."""
    try:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_leftovers(cwd)
        raise


def processes_in(directory: Path) -> list[psutil.Process]:
    """Every process (on any host: the namespaces share one process table) working in `directory`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(directory):
                found.append(proc)
        except (psutil.Error, OSError):
            pass
    return found


def wait_gone(directory: Path, seconds: float = NO_HANG_S) -> list[psutil.Process]:
    """The processes still working in `directory` once none is left or `seconds` passed (the no-hang limit)."""
    deadline = time.monotonic() + seconds
    while (left := processes_in(directory)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


class Watcher(threading.Thread):
    """Samples every process's command line, and the listening sockets of the run's processes (on this machine's
    network stack, or in each test bed host's), while a run goes on."""

    def __init__(self, directory: Path, bed: Bed | None = None) -> None:
        super().__init__(daemon=True)
        self.directory = directory
        self.bed = bed
        self.cmdlines: set[str] = set()
        self.listeners: set[tuple[str, str]] = set()  # (host, "address:port")
        self.sessions = (0, 0)  # ssh sessions started on hosta and hostb during the run
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for proc in psutil.process_iter():
                try:
                    self.cmdlines.add(" ".join(proc.cmdline()))
                except psutil.Error:
                    pass
            pids = {p.pid for p in processes_in(self.directory)}
            if self.bed is None:
                for conn in psutil.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
                        self.listeners.add(("here", f"{conn.laddr.ip}:{conn.laddr.port}"))
            else:
                for host in HOSTS:
                    for address, pid in self.bed.listeners(host, with_pids=True):
                        if pid in pids:
                            self.listeners.add((host, address))
            time.sleep(0.3)


def metrics(run_dir: Path) -> list[dict]:
    drop = ("time", "per_s", "_s", "fps")
    return [
        {k: v for k, v in json.loads(line).items() if not any(k.endswith(d) or d in k for d in drop)}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = max(run_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    state = torch.load(latest, map_location="cpu", weights_only=True)
    return {
        f"{part}.{k}": v for part in ("actor_state_dict", "critic_state_dict") for k, v in state[part].items()
    }


@pytest.fixture(scope="module")
def two_host_run(bed, tmp_path_factory):
    """`train --hosts node-a node-b` from the login host (ssh config aliases); the command lines seen meanwhile."""
    work = tmp_path_factory.mktemp("two_hosts")
    before = (bed.sessions("hosta"), bed.sessions("hostb"))
    watcher = Watcher(work, bed)
    watcher.start()
    try:
        result = run_captured(
            bed.on(
                "login", str(BIN / "train"), *TINY, "--max-iterations", "2", "--hosts", "node-a", "node-b"
            ),
            cwd=work,
            env=run_env(bed.env),
            timeout=600,
        )
        left = wait_gone(work)
    finally:
        watcher.stop.set()
        watcher.join()
        stop_leftovers(work)  # a run that timed out leaves its agents on the hosts otherwise
    watcher.sessions = (bed.sessions("hosta") - before[0], bed.sessions("hostb") - before[1])
    return work, result, watcher, left


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The same training with `--cpu-workers 2` on this machine, watched the same way."""
    work = tmp_path_factory.mktemp("local")
    watcher = Watcher(work)
    watcher.start()
    try:
        result = run_captured(
            [str(BIN / "train"), *TINY, "--max-iterations", "2", "--cpu-workers", "2"],
            cwd=work,
            env=run_env(),
            timeout=600,
        )
    finally:
        watcher.stop.set()
        watcher.join()
        stop_leftovers(work)
    return work, result, watcher


def test_two_hosts_over_ssh_start_one_agent_per_host_through_sshd(two_host_run):
    work, result, watcher, left = two_host_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert watcher.sessions == (1, 1)
    assert left == []


def test_two_hosts_equal_two_cpu_workers_with_the_same_seed_and_reducer(two_host_run, local_run):
    work, result, _, _ = two_host_run
    local_work, local, _ = local_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert local.returncode == 0, local.stderr[-3000:]
    (remote_dir,) = work.glob("logs/*/*")
    (local_dir,) = local_work.glob("logs/*/*")
    assert metrics(remote_dir) == metrics(local_dir)
    a, b = final_parameters(remote_dir), final_parameters(local_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_no_secret_appears_on_any_command_line_of_a_two_host_run(two_host_run):
    _, result, watcher, _ = two_host_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert any("mjfleet.launch.agent" in c for c in watcher.cmdlines)  # the watcher saw the agents
    assert not [c for c in watcher.cmdlines if SECRET in c]


def test_no_secret_appears_on_any_command_line_of_a_two_worker_run(local_run):
    _, result, watcher = local_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert any("mjfleet.launch.agent" in c for c in watcher.cmdlines)
    assert not [c for c in watcher.cmdlines if SECRET in c]


def test_a_two_worker_run_on_one_host_listens_on_loopback_only(local_run):
    _, result, watcher = local_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert watcher.listeners, "no listener seen: the watcher missed the run"
    assert [a for _, a in watcher.listeners if not a.startswith(LOOPBACK)] == []


def test_a_two_host_run_listens_only_on_the_addresses_that_reach_the_other_hosts(bed, two_host_run):
    _, result, watcher, _ = two_host_run
    assert result.returncode == 0, result.stderr[-3000:]
    hosts_seen = {host for host, _ in watcher.listeners}
    assert {"login", "hosta"} <= hosts_seen  # the launcher's listeners; rank 0's store
    own = {"login": "198.18.0.1:", "hosta": "198.18.0.2:", "hostb": "198.18.0.3:"}
    assert [(h, a) for h, a in watcher.listeners if not a.startswith(own[h])] == []


# --- signals, faults and a crafted pickle on a longer two-host run ------------------------------------------

ATTACK = """
import os, pickle, socket, struct, sys

class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[1],))
data = pickle.dumps(Boom())
sent = 0
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    for payload in (struct.pack(">L", len(data)) + data, data):
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=3) as s:
                s.sendall(payload)
                sent += 1
        except OSError:
            pass
print(f"sent {sent} payloads")
"""


def start_long_run(
    bed: Bed, work: Path, launcher: str, hosts: list[str], stderr: Path, *flags: str
) -> subprocess.Popen:
    with stderr.open("w") as err:
        return subprocess.Popen(
            bed.on(
                launcher, str(BIN / "train"), *TINY, "--max-iterations", "100000", "--hosts", *hosts, *flags
            ),
            cwd=work,
            env=run_env(bed.env),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def wait_for_training(
    work: Path, proc: subprocess.Popen, stderr: Path, seconds: float = STARTUP_NO_HANG_S, iterations: int = 1
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(work.glob("logs/*/*/metrics.jsonl"))
        if files and files[0].read_text().count("\n") >= iterations:
            return
        time.sleep(0.5)
    raise AssertionError(f"training never started: {stderr.read_text()[-3000:]}")


def on_host(bed: Bed, host: str, procs: list[psutil.Process]) -> list[psutil.Process]:
    inode = bed.net_inode(host)
    found = []
    for proc in procs:
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == inode:
                found.append(proc)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def interrupted_run(bed, tmp_path_factory):
    """A run from the login host (not one of its hosts) that gets a crafted pickle on every port it listens on,
    then SIGINT."""
    work = tmp_path_factory.mktemp("interrupted")
    stderr = work / "stderr.txt"
    marker = work / "pwned"
    proc = start_long_run(bed, work, "login", ["hosta", "hostb"], stderr)
    try:
        wait_for_training(work, proc, stderr)
        pids = {p.pid for p in processes_in(work)}
        targets = [a for h in HOSTS for a, pid in bed.listeners(h, with_pids=True) if pid in pids]
        targets = [a for a in targets if not a.startswith(LOOPBACK)]
        attack = subprocess.run(
            bed.on("hosta", sys.executable, "-c", ATTACK, str(marker), *targets),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert attack.returncode == 0, attack.stderr
        sent = int(re.search(r"sent (\d+) payloads", attack.stdout).group(1))
        time.sleep(3)
        alive_after_attack = proc.poll() is None
        proc.send_signal(signal.SIGINT)
        stopped = ends_within_no_hang_limit(proc)
        left = wait_gone(work)
    finally:
        stop_run(proc, work)
    return (
        work,
        proc.returncode,
        stderr.read_text(),
        marker,
        (targets, sent),
        alive_after_attack,
        stopped,
        left,
    )


def test_a_crafted_pickle_sent_to_every_port_of_a_run_executes_nothing(interrupted_run):
    work, code, text, marker, (targets, sent), alive, _, _ = interrupted_run
    assert len(targets) >= 3, targets  # the launcher's store, log server, and rank 0's store at least
    assert sent == 2 * len(targets), (sent, targets)  # every port took both payloads
    assert not marker.exists()
    assert alive, text[-3000:]  # the run went on


def test_sigint_on_a_launching_host_outside_the_hosts_stops_every_worker_with_a_checkpoint(interrupted_run):
    work, code, text, _, _, _, stopped, left = interrupted_run
    assert stopped, f"still running {NO_HANG_S} s after SIGINT (the no-hang limit): {text[-3000:]}"
    assert code == 128 + signal.SIGINT, text[-3000:]
    assert "stopped by SIGINT after iteration" in text and "resume with:" in text, text[-3000:]
    iteration = int(text.split("stopped by SIGINT after iteration ")[1].split(";")[0])
    (run_dir,) = work.glob("logs/*/*")
    assert (run_dir / f"model_{iteration}.pt").exists()
    assert left == []


def test_sigint_when_the_launching_host_is_one_of_the_hosts_stops_both_with_a_checkpoint(bed, tmp_path):
    stderr = tmp_path / "stderr.txt"
    proc = start_long_run(bed, tmp_path, "hosta", ["hosta", "hostb"], stderr)
    try:
        before = (bed.sessions("hosta"), bed.sessions("hostb"))
        wait_for_training(tmp_path, proc, stderr)
        after = (bed.sessions("hosta"), bed.sessions("hostb"))
        assert (after[0] - before[0], after[1] - before[1]) == (0, 1)  # hosta's agent runs without ssh
        proc.send_signal(signal.SIGINT)
        assert ends_within_no_hang_limit(proc), (
            f"still running {NO_HANG_S} s after SIGINT (the no-hang limit)"
        )
        text = stderr.read_text()
        assert proc.returncode == 128 + signal.SIGINT, text[-3000:]
        assert "stopped by SIGINT after iteration" in text and "resume with:" in text, text[-3000:]
        assert wait_gone(tmp_path) == []
    finally:
        stop_run(proc, tmp_path)


@pytest.mark.parametrize("fault", ["worker", "agent", "sshd", "stopped worker"])
def test_a_fault_on_a_remote_host_ends_the_run_naming_that_host_and_rank(bed, tmp_path, fault):
    stderr = tmp_path / "stderr.txt"
    # A stopped worker is found by the hang detection (fleet/liveness.py), here with a short timeout.
    flags = ("--hang-timeout-s", "15") if fault == "stopped worker" else ()
    proc = start_long_run(bed, tmp_path, "login", ["hosta", "hostb"], stderr, *flags)
    try:
        wait_for_training(tmp_path, proc, stderr, iterations=3 if fault == "stopped worker" else 1)
        on_b = on_host(bed, "hostb", processes_in(tmp_path))
        if fault in ("worker", "stopped worker"):
            victims = [p for p in on_b if "spawn_main" in " ".join(p.cmdline())]
            victims = [p for p in victims if "resource_tracker" not in " ".join(p.cmdline())]
        elif fault == "agent":
            victims = [p for p in on_b if "mjfleet.launch.agent" in " ".join(p.cmdline())]
        else:  # the sshd process serving the agent's session (the listening sshd stays)
            agent = next(p for p in on_b if "mjfleet.launch.agent" in " ".join(p.cmdline()))
            victims = [agent.parent()]
            assert "sshd" in victims[0].name()
        assert len(victims) == 1, victims
        victims[0].send_signal(signal.SIGSTOP if fault == "stopped worker" else signal.SIGKILL)
        # Reported by the launcher's failure monitoring, not by a collective's timeout: see NO_HANG_S.
        ended = ends_within_no_hang_limit(proc)
        text = stderr.read_text()
        assert ended, (
            f"still running {NO_HANG_S} s after the {fault} died (the no-hang limit): {text[-3000:]}"
        )
        assert proc.returncode != 0, text[-3000:]
        last = [line for line in text.splitlines() if line.startswith("train:")][-1]
        assert last.startswith(("train: error: worker rank 1 on hostb", "train: error: rank 1 on hostb")), (
            text[-3000:]
        )
        if fault == "stopped worker":
            assert "worker rank 1 on hostb made no progress for" in last, text[-3000:]
        assert wait_gone(tmp_path) == []
    finally:
        stop_run(proc, tmp_path)


# --- launches that cannot work fail at once, in one line, leaving nothing --------------------------------------


def test_an_unknown_host_is_one_line_and_leaves_no_run_directory(bed, tmp_path):
    result = run_captured(
        bed.on(
            "login", str(BIN / "train"), *TINY, "--max-iterations", "1", "--hosts", "node-a", "nosuchhost"
        ),
        cwd=tmp_path,
        env=run_env(bed.env),
        timeout=NO_HANG_S,
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("train: error: --hosts: cannot resolve 'nosuchhost'")
    )
    assert list(tmp_path.glob("logs/*/*")) == []


def test_a_host_that_cannot_reach_the_rendezvous_address_fails_at_once_naming_it(bed, tmp_path):
    # "At once": by the check that names the address (below), not after the agents' 60 s connect timeout or a
    # collective's; NO_HANG_S only guards against a hang (subprocess.TimeoutExpired past it).
    result = run_captured(
        bed.on(
            "login",
            str(BIN / "train"),
            *TINY,
            "--max-iterations",
            "1",
            "--hosts",
            "hosta",
            "hostb",
            "--rendezvous-host",
            "127.0.0.1",
        ),
        cwd=tmp_path,
        env=run_env(bed.env),
        timeout=NO_HANG_S,
    )
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr
    assert (
        last.startswith("train: error: rank ") and "cannot reach the launching host at 127.0.0.1" in last
    ), last
    assert list(tmp_path.glob("logs/*/*")) == [] and wait_gone(tmp_path) == []


def test_a_sweep_places_its_two_trials_on_two_hosts_over_ssh(bed, tmp_path):
    """`sweep --hosts node-a node-b` from the login host: one slot per host, each trial `train --hosts <host>`."""
    try:
        import optuna
        from optuna.storages.journal import JournalFileBackend
    except ImportError:
        require_infrastructure("the sweep extra is missing: uv sync --extra sweep")
        raise
    sweep_dir = tmp_path / "sweep"
    before = (bed.sessions("hosta"), bed.sessions("hostb"))
    result = run_captured(
        bed.on(
            "login", str(BIN / "sweep"), "Cartpole-Balance", "--param", "agent.ppo.learning-rate=choice:1e-3,3e-3",
            "--sampler", "grid", "--trials", "2", "--iterations", "2", "--gpu-ids", "None",
            "--hosts", "node-a", "node-b", "--sweep-dir", str(sweep_dir), "--eval-episodes", "4", "--eval-num-envs", "4",
            "--", "--num-envs", "8", "--agent.num-steps-per-env", "8", "--logger", "none",
        ),
        cwd=tmp_path,
        env=run_env(bed.env),
        timeout=NO_HANG_S * 2,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep_dir / "study.journal")))
    trials = optuna.load_study(study_name="sweep", storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert {t.user_attrs["slot"] for t in trials} == {"node-a", "node-b"}
    assert (
        bed.sessions("hosta") > before[0] and bed.sessions("hostb") > before[1]
    )  # each ran its trial's agent
    assert not wait_gone(tmp_path)


def test_a_host_whose_sshd_stops_mid_sweep_retires_its_slot_and_the_other_host_finishes(bed, tmp_path):
    """hostb's sshd stopped (by pid) as the sweep starts its first trials: hostb's trials fail before their first
    iteration, its slot stops after two with one line naming it, and node-a runs every other trial."""
    try:
        import optuna
        from optuna.storages.journal import JournalFileBackend
    except ImportError:
        require_infrastructure("the sweep extra is missing: uv sync --extra sweep")
        raise
    sweep_dir, out, err = tmp_path / "sweep", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    pid_file = bed.dir / "bed" / "sshd-hostb.pid"
    command = bed.on(
        "login", str(BIN / "sweep"), "Cartpole-Balance", "--seeds", "4", "--iterations", "2", "--gpu-ids", "None",
        "--hosts", "node-a", "node-b", "--sweep-dir", str(sweep_dir), "--eval-episodes", "4", "--eval-num-envs", "4",
        "--", "--num-envs", "8", "--agent.num-steps-per-env", "8", "--logger", "none",
    )  # fmt: skip
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(command, cwd=tmp_path, env=run_env(bed.env), stdout=stdout, stderr=stderr)
    stopped = None
    try:
        # The first trials start: their trains are still importing, well before either connects over ssh.
        deadline = time.monotonic() + STARTUP_NO_HANG_S
        while not list(sweep_dir.glob("logs/trial_*.log")) and time.monotonic() < deadline:
            time.sleep(0.05)
        stopped = int(pid_file.read_text())
        os.kill(stopped, signal.SIGTERM)  # the listening sshd (an ssh session would outlive it)
        assert ends_within_no_hang_limit(proc), f"the sweep still runs {NO_HANG_S} s on"
        text = out.read_text() + err.read_text()
        assert proc.returncode == 0, text[-3000:]
        storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep_dir / "study.journal")))
        trials = optuna.load_study(study_name="sweep", storage=storage).get_trials()
        by_slot = {(t.user_attrs["slot"], t.state.name) for t in trials}
        failed = [t for t in trials if t.state.name == "FAIL"]
        assert len(trials) == 4 and by_slot == {("node-a", "COMPLETE"), ("node-b", "FAIL")}, text[-3000:]
        reasons = [t.user_attrs["fail_reason"] for t in failed]
        assert len(failed) == 2 and all(r.startswith("train ") and "on node-b" in r for r in reasons), reasons
        retired = [line for line in text.splitlines() if "takes no more trials" in line]
        assert len(retired) == 1 and retired[0].startswith(
            "sweep: slot node-b takes no more trials: 2 failed before their first iteration (last: train "
        ), text[-3000:]
        assert not wait_gone(tmp_path)
    finally:
        stop_run(proc, tmp_path)
        if stopped is not None:  # hostb's sshd again, as `hosts.sh up` starts it, for the other tests
            restart_sshd(bed, "hostb", stopped)


def restart_sshd(bed: Bed, host: str, stopped: int) -> None:
    """Start `host`'s sshd again once the one stopped (pid `stopped`) is gone; `hosts.sh down` stops it by its pid
    file, as it does the others."""
    conf, log, pid_file = (bed.dir / "bed" / f"sshd-{host}.{ext}" for ext in ("conf", "log", "pid"))
    with contextlib.suppress(psutil.Error):
        psutil.Process(stopped).wait(timeout=30)
    pid_file.unlink(missing_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    subprocess.run(bed.on(host, sshd, "-f", str(conf), "-E", str(log)), env=bed.env, timeout=60, check=True)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.read_text().strip(), f"sshd on {host} did not start again"

"""mjfleet.atomic: a replaced file is the old content or the new, whoever else writes it, and a failed write
leaves no trace; bench's shared --num-envs auto cache keeps every bench's entry."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from mjfleet import atomic

ROUNDS = 150


def leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def start(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*processes: subprocess.Popen) -> None:
    for process in processes:
        try:
            _, err = process.communicate(timeout=120)
        finally:
            process.kill()
        assert process.returncode == 0, err


def test_text_and_bytes_replace_the_file_whole_with_the_permissions_open_would_give(tmp_path):
    target = tmp_path / "report.json"
    atomic.write_text(target, '{"a": 1}\n')
    assert target.read_text() == '{"a": 1}\n'
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    target.chmod(0o640)
    atomic.write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its permissions
    with atomic.open(target, "wb") as f:
        f.write(b"new")
    with atomic.staged(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".report.json.") and tmp.name.endswith(".tmp")
        tmp.write_text("staged")
    assert target.read_text() == "staged"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_writer_that_fails_midway_leaves_the_old_content_and_no_temporary_file(tmp_path, error):
    target = tmp_path / "model_10.pt"
    target.write_text("old")
    with pytest.raises(error):
        with atomic.open(target, "w") as f:
            f.write("half of the ne")
            f.flush()
            raise error("stopped")
    with pytest.raises(error):
        with atomic.staged(target) as tmp:
            tmp.write_text("half")
            raise error("stopped")
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_a_rename_that_fails_removes_the_temporary_file(tmp_path):
    target = tmp_path / "taken"
    (target / "inside").mkdir(parents=True)  # a non-empty directory cannot be replaced by a file
    with pytest.raises(OSError):
        atomic.write_text(target, "text")
    assert leftovers(tmp_path) == []


def test_a_staged_file_is_committed_or_discarded_by_its_owner(tmp_path):
    target = tmp_path / "train_10.mp4"
    video = atomic.staged(target)
    video.path.write_bytes(b"frames")
    assert not target.exists()  # nothing in place until commit
    assert video.commit() == target and target.read_bytes() == b"frames"
    aborted = atomic.staged(target)
    aborted.path.write_bytes(b"half")
    aborted.discard()
    assert target.read_bytes() == b"frames"
    assert leftovers(tmp_path) == []


WRITER = """
import json
import sys
from mjfleet import atomic

target, fill, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(rounds):
    # large enough that a write takes several system calls: a torn file would show
    atomic.write_text(target, json.dumps({"writer": fill, "pad": fill * 200_000}) + "\\n")
"""


def test_two_writers_of_one_file_never_leave_a_torn_file_or_a_temporary_one(tmp_path):
    target = tmp_path / "bench.json"
    complete = {fill: json.dumps({"writer": fill, "pad": fill * 200_000}) + "\n" for fill in "ab"}
    target.write_text(complete["a"])
    writers = [start(WRITER, str(target), fill, str(ROUNDS)) for fill in "ab"]
    reads, seen = 0, set()
    try:
        while any(w.poll() is None for w in writers) or reads == 0:
            text = target.read_text()
            assert text in complete.values(), f"torn read of {len(text)} characters"
            seen.add(json.loads(text)["writer"])
            reads += 1
    finally:
        finish(*writers)
    assert target.read_text() in complete.values()
    assert reads > 10 and seen  # the reader really ran beside the writers
    assert leftovers(tmp_path) == []


STORER = """
import sys
from mjfleet.bench import autotune

tag, count = sys.argv[1], int(sys.argv[2])
for i in range(count):
    autotune.store(f"{tag}-{i}", {"num_envs": i, "sweep": {}, "date": "2026-11-22"})
"""


def test_two_benches_storing_auto_counts_at_once_keep_every_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("MJFLEET_CACHE_DIR", str(tmp_path))
    from mjfleet.bench import autotune

    count = 60
    env = {"MJFLEET_CACHE_DIR": str(tmp_path)}
    started = time.monotonic()
    benches = [start(STORER, tag, str(count), env=env) for tag in ("cartpole", "quadruped")]
    finish(*benches)
    entries = json.loads(autotune.cache_path().read_text())
    assert sorted(entries) == sorted(
        f"{tag}-{i}" for tag in ("cartpole", "quadruped") for i in range(count)
    ), f"entries lost after {time.monotonic() - started:.1f}s"
    assert autotune.load("quadruped-7") == {"num_envs": 7, "sweep": {}, "date": "2026-11-22"}
    assert leftovers(tmp_path) == []

"""Writing a file atomically: a reader sees the old content or the new, never a half-written file.

Every file mjfleet replaces (checkpoints, metrics rewrites, plots, videos, exports, bench's JSON and cache) is
written here, and this is the only module that renames files into place (tests/test_architecture.py checks it).
The new content goes to a temporary file beside the target, named after it and unique to this writer
(`.<name>.<random>.tmp`, so that two writers of one target never share a temporary file), which is flushed to
disk and then renamed over the target (`os.replace`, atomic on POSIX within one filesystem); the directory is
flushed too where the platform allows, so the rename survives a power loss. On any failure, Ctrl-C included, the
temporary file is removed and the target keeps its old content. The new file gets the target's permissions if
it existed, else those a plain `open` would give (0666 less the umask), not mkstemp's 0600.

    atomic.write_text(path, text)             atomic.write_bytes(path, data)
    with atomic.open(path, "wb") as f: ...    a file object (np.savez, shutil.copyfileobj)
    with atomic.staged(path) as tmp: ...      a path, for writers that only take one (torch.save, savefig)

`staged(path)` is also an object with `commit()` and `discard()`, for a writer whose file outlives one block
(`runs.video.Mp4Writer`). The temporary name ends in `.tmp`, not in the target's suffix: a writer that guesses
the format from the name must be told it (`savefig(..., format="png")`).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Replace `path`'s content with `text`, atomically."""
    with open(path, "w", encoding=encoding) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path`'s content with `data`, atomically."""
    with open(path, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def open(path: str | os.PathLike, mode: str = "w", encoding: str | None = None) -> Iterator[IO[Any]]:
    """A new file (mode "w" or "wb") that replaces `path` when the block ends without an exception."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic.open writes a whole new file: mode 'w' or 'wb', not {mode!r}")
    with staged(path) as tmp, builtins.open(tmp, mode, encoding=encoding if mode == "w" else None) as f:
        yield f


class staged:  # lower case: used like a function, `with atomic.staged(path) as tmp`
    """A temporary file beside `target` (created empty) that becomes `target` on `commit()`.

    As a context manager it yields the temporary path and commits when the block ends normally, discards when
    it raises (any exception, KeyboardInterrupt included)."""

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = pathlib.Path(target)
        fd, name = tempfile.mkstemp(dir=self.target.parent, prefix=f".{self.target.name}.", suffix=".tmp")
        os.close(fd)
        self.path = pathlib.Path(name)

    def commit(self) -> pathlib.Path:
        """Flush the temporary file to disk, give it the target's permissions and rename it over the target."""
        try:
            with builtins.open(
                self.path, "rb+"
            ) as f:  # the writer may have closed it without flushing to disk
                os.fsync(f.fileno())
            os.chmod(self.path, _mode_for(self.target))
            os.replace(self.path, self.target)
        except BaseException:
            self.discard()
            raise
        _fsync_directory(self.target.parent)
        return self.target

    def discard(self) -> None:
        """Remove the temporary file; the target keeps its content."""
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> pathlib.Path:
        return self.path

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def _mode_for(target: pathlib.Path) -> int:
    """The permissions the new file should have: the replaced file's, else what `open` would create."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without changing it where Linux shows it (os.umask can only set it, which
    would race with another thread creating a file)."""
    try:
        with builtins.open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory: pathlib.Path) -> None:
    """Flush a directory's entries (the rename) to disk; skipped where directories cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)

"""Durable file writes: the one way the project writes a file that must survive a crash.

A temporary file is written and fsynced, renamed into place (or linked, when
the file must not already exist), and the directory is fsynced, so after a
crash the path holds either nothing (or the old content) or all of the new
content, never a torn or empty file.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tlog.errors import ConfigError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644,
                 exclusive: bool = False) -> None:
    """Write `data` to `path` durably. `exclusive`: fail with FileExistsError if it exists."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # whatever the umask
        if exclusive:
            os.link(tmp, path)  # atomic, and refuses to replace an existing file
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def append_durable(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> None:
    """Append `data` to `path` (created with `mode` if missing) and fsync it before returning:
    a journal line on disk before what it announces happens. One `write` of a file opened for
    appending: writers that each append one short record need no lock."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        created = os.fstat(fd).st_size == 0
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def read_only_sqlite_uri(path: str | os.PathLike[str]) -> str:
    """URI to open a WAL-mode SQLite database in a read-only directory.

    With a -wal file present (after a crash) SQLite must read it, so plain
    mode=ro; without one (after a clean stop) a read-only open needs
    immutable=1, which is right here: nothing can write the file.
    """
    path = Path(path)
    wal = Path(str(path) + "-wal")
    return f"file:{path}?mode=ro" + ("" if wal.exists() and wal.stat().st_size else "&immutable=1")


def lock_dir(path: Path, lock_name: str, holder: str) -> int:
    """One process per data directory: an exclusive flock on `path/lock_name`, held
    until the returned descriptor is closed (or the process dies). ConfigError if
    another process holds it; OSError if the lock file cannot be created."""
    fd = os.open(path / lock_name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            pid = os.pread(fd, 32, 0).decode().strip()
        except (OSError, UnicodeDecodeError):
            pid = ""
        os.close(fd)
        by = f" (pid {pid})" if pid.isdigit() else ""
        raise ConfigError(f"{path} is in use by another {holder} process{by}; one process per data directory") \
            from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # named in the refusal another process gets
    return fd

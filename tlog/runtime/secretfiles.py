"""Files holding secrets (key files, PINs, passphrases, credentials): created 0600 with O_EXCL and
fsynced, never overwritten; read only when neither group nor others can, checked on the open
descriptor. The layer under `tlog.runtime.keyfiles` and `tlog.runtime.pkcs11`."""
from __future__ import annotations

import os
import stat

from tlog.errors import Forbidden, FormatError

MAX_SECRET_FILE = 1 << 20


def write_secret(path: str | os.PathLike[str], text: str) -> None:
    """Create `path` holding `text` with mode 0600; never overwrite.

    O_EXCL makes creation atomic (FileExistsError if it exists: an existing
    key may be the only copy). File and directory are fsynced so the secret
    survives a crash once this returns.
    """
    write_secret_bytes(path, (text + "\n").encode("utf-8"))


def write_secret_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """`write_secret` of bytes (an encrypted key file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # exact mode, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_private_key(path: str | os.PathLike[str]) -> str:
    """Read a key or credentials file, refusing one that group or others could access.

    Checked on the open descriptor (no race with a chmod); raises Forbidden.
    """
    data = read_secret_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("private key file is not UTF-8") from None
    return text.rstrip("\r\n")


def read_secret_bytes(path: str | os.PathLike[str]) -> bytes:
    """A key file's bytes, with `read_private_key`'s checks (regular file, mode 0600 or stricter)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Forbidden(f"private key {os.fspath(path)!r} is not a regular file")
        if st.st_mode & 0o077:
            raise Forbidden(
                f"private key {os.fspath(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; "
                "it must not be readable by group or others (chmod 600)"
            )
        if st.st_size > MAX_SECRET_FILE:
            raise FormatError(f"private key {os.fspath(path)!r} is larger than 1 MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)

"""Private key files: Go's signer-key format (Ed25519 or ML-DSA-44 seeds), mode 0600, never overwritten,
never logged.

The one place the services and CLIs read and write keys. `load_or_create` is the
first-start rule of every service: make the key (O_EXCL, fsynced) if it does not
exist, then read it back through the same checks as any later start.
"""
from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tlog.errors import ConfigError, Forbidden, FormatError
from tlog.formats.keys import CosignatureSigner, Cosigner, MLDSACosigner, Signer, load_cosigner, parse_signer_key

log = logging.getLogger("oap.keys")


def load_or_create(path: Path, make: Callable[[], str], *, what: str) -> str:
    """The key text at `path`; on first use `make()` makes it (written 0600, fsynced).

    `what` names the key in the one log line a creation writes (never the key itself).
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(path, make())
        log.info("generated a new %s in %s", what, path)
    return read_private_key(path)


def write_private_key(path: str | os.PathLike[str], skey_text: str) -> None:
    """Create `path` holding a signer key (Go's format) with mode 0600; never overwrite."""
    parse_signer_key(skey_text)  # never write something we could not load back
    write_secret(path, skey_text)


def write_secret(path: str | os.PathLike[str], text: str) -> None:
    """Create `path` holding `text` with mode 0600; never overwrite.

    O_EXCL makes creation atomic (FileExistsError if it exists: an existing
    key may be the only copy). File and directory are fsynced so the secret
    survives a crash once this returns.
    """
    data = (text + "\n").encode("utf-8")
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
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("private key file is not UTF-8") from None
    return text.rstrip("\r\n")


def bucket_credentials(credentials_file: str | os.PathLike[str] | None) -> tuple[str, str]:
    """An S3-compatible bucket's access key and secret: from `credentials_file` ("<access key>
    <secret key>", mode 0600, never logged) or from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
    (the `bucket_credentials_file` setting of the log and the mirror)."""
    if credentials_file is not None:
        try:
            key_id, secret = read_private_key(credentials_file).split()
        except ValueError:
            raise ConfigError(f"{credentials_file}: expected '<access key> <secret key>'") from None
        return key_id, secret
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not key_id or not secret:
        raise ConfigError("bucket credentials: set bucket_credentials_file, or AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY")
    return key_id, secret


def read_seed(path: str | os.PathLike[str]) -> bytes:
    """The seed of an Ed25519 key file (mode checked by read_private_key)."""
    return Signer.from_skey(read_private_key(path)).export_seed()


COSIGNER_KINDS = ("ed25519", "mldsa44")
"""Cosigning keys a witness or a mirror holds: Ed25519 cosignature/v1 (type 0x04) and
ML-DSA-44 subtree/v1 (type 0x06) (C2SP tlog-cosignature)."""
_COSIGNER_CLASSES: dict[str, type[CosignatureSigner] | type[MLDSACosigner]] = {
    "ed25519": CosignatureSigner, "mldsa44": MLDSACosigner}


def check_cosigner_kinds(kinds: Sequence[str]) -> None:
    """A `cosigners` setting: each of COSIGNER_KINDS at most once, and one at least (ConfigError)."""
    if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= set(COSIGNER_KINDS):
        raise ConfigError(f"cosigners must name each of {', '.join(COSIGNER_KINDS)} at most once, and one at least")


def write_cosigner(path: Path, signer: Cosigner) -> None:
    """Create a cosigning key file (0600; FileExistsError if one exists) and `<name>.vkey` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private_key(path, signer.to_skey())
    path.with_name(path.name.removesuffix(".key") + ".vkey").write_text(signer.vkey + "\n")


def load_or_create_cosigners(paths: Mapping[str, Path], kinds: Sequence[str], name: str, *, who: str,
                             hint: str) -> tuple[Cosigner, ...]:
    """The cosigning keys `kinds` names (of COSIGNER_KINDS, in that order) from `paths`.

    One cosigner, one name: every key file must carry the same key name, and `name` when
    it is set. A key that does not exist yet is generated (0600) with `name`, or the name of
    the cosigner's other key (so an ML-DSA-44 key joins an Ed25519 one); with neither it
    fails with `hint`. `who` ("witness", "mirror") names the cosigner in messages.
    """
    loaded: dict[str, Cosigner] = {}
    for kind in kinds:
        if paths[kind].exists():
            key = load_cosigner(read_private_key(paths[kind]))
            if not isinstance(key, _COSIGNER_CLASSES[kind]):
                raise ConfigError(f"{paths[kind]} does not hold an {kind} key")
            loaded[kind] = key
    names = {s.name for s in loaded.values()}
    if name and names - {name}:
        raise ConfigError(f"the {who} key files are of {who} {sorted(names)[0]!r}, but name {name!r} is configured")
    if len(names) > 1:
        raise ConfigError(f"the {who} key files carry different names: {', '.join(sorted(names))}")
    name = name or (names.pop() if names else "")
    if not name:  # a key file of the cosigner that is not in use names it
        for path in paths.values():
            if path.exists():
                name = load_cosigner(read_private_key(path)).name
                break
    out: list[Cosigner] = []
    for kind in kinds:
        found = loaded.get(kind)
        if found is None:
            if not name:
                raise ConfigError(f"no {who} key at {paths[kind]}: {hint}")
            found = _COSIGNER_CLASSES[kind].generate(name)
            write_cosigner(paths[kind], found)
            log.info("generated a new %s %s key %s", kind, who, found.vkey if kind == "ed25519" else
                     found.vkey[:48] + "...")
        out.append(found)
    return tuple(out)

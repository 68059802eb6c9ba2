"""Private keys: Go's signer-key format (Ed25519 or ML-DSA-44 seeds), mode 0600, never overwritten,
never logged; the same encrypted with a passphrase; or a key inside a PKCS#11 token.

The one place the services and CLIs read and write keys. `load_or_create` is the
first-start rule of every service: make the key (O_EXCL, fsynced) if it does not
exist, then read it back through the same checks as any later start.

`open_key` is how every service and CLI opens a signing key setting, which is one of:

- a key file (the default, and what `make run` uses);
- an encrypted key file: the key file's text in the age format (C2SP age,
  `tlog.formats.age`) with an scrypt passphrase recipient, as `oap-log encrypt-key` or
  `age -p` write it; the passphrase comes from OAP_KEY_PASSPHRASE_FILE (a 0600 file) or
  OAP_KEY_PASSPHRASE, never a command line;
- a `pkcs11:` URI (RFC 7512): the key stays in its token (`tlog.runtime.pkcs11`).

It logs one line saying which of these a key is and where, never the key.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tlog.errors import ConfigError, FormatError
from tlog.formats import age
from tlog.formats.keys import (
    COSIGNATURE_MLDSA44,
    ED25519,
    CosignatureSigner,
    Cosigner,
    MLDSACosigner,
    RawSigner,
    Signer,
    load_cosigner,
    parse_signer_key,
)
from tlog.runtime.secretfiles import read_private_key, read_secret_bytes, write_secret

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


# --- key settings: files, encrypted files, PKCS#11 tokens --------------------------

PASSPHRASE_ENV = "OAP_KEY_PASSPHRASE"
PASSPHRASE_FILE_ENV = "OAP_KEY_PASSPHRASE_FILE"
_KEY_TYPES = {"ed25519": ED25519, "mldsa44": COSIGNATURE_MLDSA44}


def is_token_uri(ref: str | os.PathLike[str]) -> bool:
    """Whether a key setting names a key in a PKCS#11 token (`pkcs11:...`) rather than a file."""
    return os.fspath(ref).startswith("pkcs11:")


def key_exists(ref: str | os.PathLike[str]) -> bool:
    """Whether the key a setting names is there to open (a token key always is: it is never
    made on first start, so a missing one is an error at `open_key`)."""
    return is_token_uri(ref) or Path(ref).exists()


@dataclass(frozen=True, repr=False)
class OpenedKey:
    """A signing key opened from its setting: `key` is a key file's 32-byte seed (never log it)
    or a token's `RawSigner`; `name` the key name a key file carries (None for a token key);
    `source` what it is and where, for the start-up line."""

    key: bytes | RawSigner
    key_type: int
    name: str | None
    source: str

    def __repr__(self) -> str:
        return f"OpenedKey({self.source})"


def passphrase_for(path: str | os.PathLike[str]) -> bytes:
    """The key passphrase, from OAP_KEY_PASSPHRASE_FILE (a 0600 file) or OAP_KEY_PASSPHRASE;
    `path` names the key in the message when there is none."""
    source = os.environ.get(PASSPHRASE_FILE_ENV)
    if source:
        try:
            text = read_private_key(source)
        except OSError as e:
            raise ConfigError(f"{PASSPHRASE_FILE_ENV} {source}: {e.strerror}") from None
    else:
        text = os.environ.get(PASSPHRASE_ENV, "")
    if not text:
        raise ConfigError(f"{os.fspath(path)} is encrypted: give its passphrase in {PASSPHRASE_FILE_ENV} "
                          f"(a 0600 file) or {PASSPHRASE_ENV}")
    return text.encode("utf-8")


def encrypt_key_text(text: str, passphrase: bytes) -> bytes:
    """A key file's text encrypted to `passphrase` (age, scrypt recipient, armored: the file
    stays text)."""
    parse_signer_key(text)  # never encrypt something we could not load back
    try:
        return age.encrypt(text.encode("utf-8"), passphrase)
    except FormatError as e:
        raise ConfigError(e.message) from None


def read_key_text(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """A key file's text, decrypted when it is encrypted (mode checked like every key file);
    (text, whether it was encrypted)."""
    data = read_secret_bytes(path)
    encrypted = age.is_encrypted(data)
    if encrypted:
        try:
            data = age.decrypt(data, passphrase_for(path))
        except FormatError as e:
            raise ConfigError(f"{os.fspath(path)}: cannot decrypt it ({e.message.removeprefix('age: ')})") from None
    try:
        return data.decode("utf-8").rstrip("\r\n"), encrypted
    except UnicodeDecodeError:
        raise FormatError("private key file is not UTF-8") from None


def open_key(ref: str | os.PathLike[str], *, what: str, kind: str = "ed25519",
             make: Callable[[], str] | None = None) -> OpenedKey:
    """The signing key a setting names (a key file, an encrypted key file or a `pkcs11:`
    URI; see the module's docstring), of `kind` ("ed25519" or "mldsa44"). A key file that
    does not exist is made with `make()` (0600, fsynced) when given, as on a service's first
    start. Logs which kind of key `what` is and where; every failure is a ConfigError (or
    the key file's Forbidden/FormatError) at this call, not at the first signature."""
    if kind not in _KEY_TYPES:
        raise ValueError(f"kind must be one of {sorted(_KEY_TYPES)}")
    if is_token_uri(ref):
        from tlog.runtime import pkcs11

        signer = pkcs11.open_signer(ref, algorithm=kind)
        opened = OpenedKey(signer, _KEY_TYPES[kind], None, f"{signer.description} ({kind}, signs inside the token)")
        log.info("%s: %s", what, opened.source)
        return opened
    path = Path(ref)
    if not path.exists() and make is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(path, make())
        log.info("generated a new %s in %s", what, path)
    try:
        text, encrypted = read_key_text(path)
    except FileNotFoundError:
        raise ConfigError(f"{what}: no key file {path}") from None
    name, key_type, seed = parse_signer_key(text)
    if key_type != _KEY_TYPES[kind]:
        raise ConfigError(f"{path} does not hold an {kind} key")
    how = "encrypted key file (age, scrypt passphrase)" if encrypted else "key file"
    opened = OpenedKey(seed, key_type, name, f"{how} {path} ({kind})")
    log.info("%s: %s", what, opened.source)
    return opened


def open_ed25519(ref: str | os.PathLike[str], *, what: str) -> bytes | RawSigner:
    """An Ed25519 signing key for the entry, receipt and record builders (`Ed25519Key`): a
    key file's seed or a token key (`open_key`), e.g. a CLI's --key."""
    return open_key(ref, what=what).key



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
    """The cosigning keys `kinds` names (of COSIGNER_KINDS, in that order) from `paths` (key
    files, encrypted key files or `pkcs11:` URIs: `open_key`).

    One cosigner, one name: every key file must carry the same key name, and `name` when
    it is set. A key file that does not exist yet is generated (0600) with `name`, or the name
    of the cosigner's other key (so an ML-DSA-44 key joins an Ed25519 one); with neither it
    fails with `hint`. A token key carries no name: it takes `name` or its key files' name.
    `who` ("witness", "mirror") names the cosigner in messages.
    """
    loaded: dict[str, OpenedKey] = {}
    for kind in kinds:
        if key_exists(paths[kind]):
            loaded[kind] = open_key(paths[kind], what=f"{who} {kind} cosigning key", kind=kind)
    names = {k.name for k in loaded.values() if k.name is not None}
    if name and names - {name}:
        raise ConfigError(f"the {who} key files are of {who} {sorted(names)[0]!r}, but name {name!r} is configured")
    if len(names) > 1:
        raise ConfigError(f"the {who} key files carry different names: {', '.join(sorted(names))}")
    name = name or (names.pop() if names else "")
    if not name:  # a key file of the cosigner that is not in use names it
        for path in paths.values():
            if not is_token_uri(path) and path.exists():
                name = load_cosigner(read_key_text(path)[0]).name
                break
    out: list[Cosigner] = []
    for kind in kinds:
        found = loaded.get(kind)
        if found is not None:
            if not name:
                raise ConfigError(f"the {who}'s {kind} key is in a token, which stores no key name: set name")
            out.append(_COSIGNER_CLASSES[kind](name, found.key))
            continue
        if not name:
            raise ConfigError(f"no {who} key at {paths[kind]}: {hint}")
        made = _COSIGNER_CLASSES[kind].generate(name)
        write_cosigner(paths[kind], made)
        log.info("generated a new %s %s key %s", kind, who, made.vkey if kind == "ed25519" else
                 made.vkey[:48] + "...")
        log.info("%s %s cosigning key: key file %s (%s)", who, kind, paths[kind], kind)
        out.append(made)
    return tuple(out)

"""The witness's keys, as Go-format signer key files (0600, never overwritten).

- `witness.key`: the Ed25519 cosigning key (cosignature/v1, type 0x04). Its
  vkey is what log operators put in their witness policy.
- `witness-mldsa44.key`: the ML-DSA-44 cosigning key (subtree/v1, type 0x06),
  held when `cosigners` names "mldsa44"; same key name as the Ed25519 one (one
  witness, two keys). Each key's vkey is written beside it (`.vkey`).
- `identity.key`: an Ed25519 key whose did:key is the witness's OAP identity,
  used only to sign conformance receipts (`witness.peer`). Kept apart so the
  cosigning keys never sign anything but cosignatures.

Each setting (`key_file`, `mldsa_key_file`, `identity_key_file`) may also name an
encrypted key file or a key in a PKCS#11 token (`tlog.runtime.keyfiles.open_key`).
Writing and reading go through `tlog.runtime.keyfiles` (O_EXCL, fsync, mode checks).
"""
from __future__ import annotations

import logging
from pathlib import Path

from tlog.errors import ConfigError
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import CosignatureSigner, Cosigner, Ed25519Key, MLDSACosigner, Signer, ed25519_signer
from tlog.runtime.keyfiles import (
    key_exists,
    load_or_create_cosigners,
    open_ed25519,
    open_key,
    write_cosigner,
    write_private_key,
)

from .config import WitnessConfig

log = logging.getLogger("oap.witness")


def identity_key_name(name: str) -> str:
    return f"{name}/identity"


def create_keys(key_path: Path, identity_path: Path, name: str) -> tuple[CosignatureSigner, Ed25519Key]:
    """Make the Ed25519 cosigning key and, unless it exists, the identity key; return both.

    Raises FileExistsError if the cosigning key exists (never overwrite a key:
    it may be the only copy, and logs already trust it).
    """
    signer = CosignatureSigner.generate(name)
    write_cosigner(key_path, signer)
    if not identity_path.exists():
        identity_path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(identity_path, Signer.generate(identity_key_name(name)).to_skey())
    return signer, read_identity(identity_path)


def create_mldsa_key(path: Path, name: str) -> MLDSACosigner:
    """Make the ML-DSA-44 cosigning key (FileExistsError if it exists)."""
    signer = MLDSACosigner.generate(name)
    write_cosigner(path, signer)
    return signer


def read_identity(path: Path) -> Ed25519Key:
    """The identity key: a key file's seed, an encrypted key file's, or a token key
    (`tlog.runtime.keyfiles.open_key`); the conformance helpers sign with either."""
    return open_ed25519(path, what="witness identity key")


def did_of(seed: Ed25519Key) -> str:
    return did_key_from_public(ed25519_signer(seed).public)


def _extra_cosigners(cfg: WitnessConfig, name: str) -> tuple[Cosigner, ...]:
    """`extra_key_files`: Ed25519 keys that cosign beside the witness's key during its key
    rotation; one witness, one name (C2SP tlog-cosignature: the key name names the cosigner)."""
    out: list[Cosigner] = []
    for ref in cfg.extra_key_files:
        opened = open_key(ref, what="extra witness ed25519 cosigning key")
        if opened.name is not None and opened.name != name:
            raise ConfigError(f"extra key {ref} is of cosigner {opened.name!r}, not of this witness {name!r}: "
                              f"make the new key with `oap-witness keygen --name {name} --out <file>`")
        out.append(CosignatureSigner(name, opened.key))
    return tuple(out)


def load_or_create_keys(cfg: WitnessConfig) -> tuple[tuple[Cosigner, ...], Ed25519Key]:
    """The cosigning keys `cfg.cosigners` names, in that order (`load_or_create_cosigners`:
    generated on first start, one name for all), and the identity key."""
    signers = load_or_create_cosigners(cfg.cosigner_key_paths, cfg.cosigners, cfg.name, who="witness",
                                       hint="run `oap-witness keygen --name <name>` or set name")
    signers = (*signers, *_extra_cosigners(cfg, signers[0].name))
    if len({s.vkey for s in signers}) != len(signers):
        raise ConfigError("extra_key_files names a key the witness already cosigns with: each key signs once")
    identity_path = cfg.identity_key_path
    if not key_exists(identity_path):
        identity_path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(identity_path, Signer.generate(identity_key_name(signers[0].name)).to_skey())
        log.info("generated a new identity key for %s", signers[0].name)
    return signers, read_identity(identity_path)

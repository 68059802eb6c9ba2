"""The witness's two keys, as Go-format signer key files (0600, never overwritten).

- `witness.key`: the Ed25519 cosigning key (cosignature/v1, type 0x04). Its
  vkey is what log operators put in their witness policy.
- `identity.key`: an Ed25519 key whose did:key is the witness's OAP identity,
  used only to sign conformance receipts (`witness.peer`). Kept apart so the
  cosigning key never signs anything but cosignatures.

Writing and reading go through `tlog.service.keyfiles.write_private_key` /
`read_private_key` (O_EXCL, fsync, mode checks).
"""
from __future__ import annotations

import logging
from pathlib import Path

from tlog.errors import ConfigError
from tlog.formats import ed25519
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.service.keyfiles import read_private_key, read_seed, write_private_key

from .config import WitnessConfig

log = logging.getLogger("oap.witness")


def identity_key_name(name: str) -> str:
    return f"{name}/identity"


def create_keys(key_path: Path, identity_path: Path, name: str) -> tuple[CosignatureSigner, bytes]:
    """Make whichever of the two keys does not exist yet; return both.

    Raises FileExistsError if the cosigning key exists (never overwrite a key:
    it may be the only copy, and logs already trust it).
    """
    key_path.parent.mkdir(parents=True, exist_ok=True)
    signer = CosignatureSigner.generate(name)
    write_private_key(key_path, signer.to_skey())
    key_path.with_name(key_path.name.removesuffix(".key") + ".vkey").write_text(signer.vkey + "\n")
    if not identity_path.exists():
        identity_path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(identity_path, Signer.generate(identity_key_name(name)).to_skey())
    return signer, read_identity(identity_path)


def read_identity(path: Path) -> bytes:
    # Signer keeps the seed private; the conformance helpers sign with the raw seed
    # (the same access `tlog.cli.main` uses for receipt entries).
    return read_seed(path)


def did_of(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


def load_or_create_keys(cfg: WitnessConfig) -> tuple[CosignatureSigner, bytes]:
    """The cosigning key (checked against `cfg.name`) and the identity seed.

    On first start with a `name` configured, both keys are generated (0600);
    without a name and without a key there is nothing sensible to do, so it
    fails with a hint to run `oap-witness keygen`.
    """
    key_path, identity_path = cfg.key_path, cfg.identity_key_path
    if not key_path.exists():
        if not cfg.name:
            raise ConfigError(f"no witness key at {key_path}: run `oap-witness keygen --name <name>` or set name")
        signer, seed = create_keys(key_path, identity_path, cfg.name)
        log.info("generated a new witness key %s", signer.vkey)
        return signer, seed
    signer = CosignatureSigner.from_skey(read_private_key(key_path))
    if cfg.name and signer.name != cfg.name:
        raise ConfigError(f"{key_path} is the key of witness {signer.name!r}, but name {cfg.name!r} is configured")
    if not identity_path.exists():
        write_private_key(identity_path, Signer.generate(identity_key_name(signer.name)).to_skey())
        log.info("generated a new identity key for %s", signer.name)
    return signer, read_identity(identity_path)

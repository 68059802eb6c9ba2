"""The witness's keys, as Go-format signer key files (0600, never overwritten).

- `witness.key`: the Ed25519 cosigning key (cosignature/v1, type 0x04). Its
  vkey is what log operators put in their witness policy.
- `witness-mldsa44.key`: the ML-DSA-44 cosigning key (subtree/v1, type 0x06),
  held when `cosigners` names "mldsa44"; same key name as the Ed25519 one (one
  witness, two keys). Each key's vkey is written beside it (`.vkey`).
- `identity.key`: an Ed25519 key whose did:key is the witness's OAP identity,
  used only to sign conformance receipts (`witness.peer`). Kept apart so the
  cosigning keys never sign anything but cosignatures.

Writing and reading go through `tlog.runtime.keyfiles.write_private_key` /
`read_private_key` (O_EXCL, fsync, mode checks).
"""
from __future__ import annotations

import logging
from pathlib import Path

from tlog.errors import ConfigError
from tlog.formats import ed25519
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import CosignatureSigner, Cosigner, MLDSACosigner, Signer, load_cosigner
from tlog.runtime.keyfiles import read_private_key, read_seed, write_private_key

from .config import WitnessConfig

log = logging.getLogger("oap.witness")


def identity_key_name(name: str) -> str:
    return f"{name}/identity"


def _write_cosigner(path: Path, signer: Cosigner) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private_key(path, signer.to_skey())
    path.with_name(path.name.removesuffix(".key") + ".vkey").write_text(signer.vkey + "\n")


def create_keys(key_path: Path, identity_path: Path, name: str) -> tuple[CosignatureSigner, bytes]:
    """Make the Ed25519 cosigning key and, unless it exists, the identity key; return both.

    Raises FileExistsError if the cosigning key exists (never overwrite a key:
    it may be the only copy, and logs already trust it).
    """
    signer = CosignatureSigner.generate(name)
    _write_cosigner(key_path, signer)
    if not identity_path.exists():
        identity_path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(identity_path, Signer.generate(identity_key_name(name)).to_skey())
    return signer, read_identity(identity_path)


def create_mldsa_key(path: Path, name: str) -> MLDSACosigner:
    """Make the ML-DSA-44 cosigning key (FileExistsError if it exists)."""
    signer = MLDSACosigner.generate(name)
    _write_cosigner(path, signer)
    return signer


def read_identity(path: Path) -> bytes:
    # Signer keeps the seed private; the conformance helpers sign with the raw seed
    # (the same access `tlog.server.cli` uses for receipt entries).
    return read_seed(path)


def did_of(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


def load_or_create_keys(cfg: WitnessConfig) -> tuple[tuple[Cosigner, ...], bytes]:
    """The cosigning keys `cfg.cosigners` names, in that order, and the identity seed.

    A key that does not exist yet is generated (0600) with the configured name, or the
    name of the witness's other key; without either there is nothing sensible to do,
    so it fails with a hint to run `oap-witness keygen`. All keys must carry one name.
    """
    paths = {"ed25519": cfg.key_path, "mldsa44": cfg.mldsa_key_path}
    kinds = {"ed25519": CosignatureSigner, "mldsa44": MLDSACosigner}
    loaded: dict[str, Cosigner] = {}
    for kind in cfg.cosigners:
        if paths[kind].exists():
            key = load_cosigner(read_private_key(paths[kind]))
            if not isinstance(key, kinds[kind]):
                raise ConfigError(f"{paths[kind]} does not hold an {kind} key")
            loaded[kind] = key
    names = {s.name for s in loaded.values()}
    if cfg.name and names - {cfg.name}:
        raise ConfigError(f"the witness key files are of witness {sorted(names)[0]!r}, but name {cfg.name!r} "
                          "is configured")
    if len(names) > 1:
        raise ConfigError(f"the witness key files carry different names: {', '.join(sorted(names))}")
    name = cfg.name or (names.pop() if names else "")
    if not name and cfg.key_path.exists():
        name = load_cosigner(read_private_key(cfg.key_path)).name
    out: list[Cosigner] = []
    for kind in cfg.cosigners:
        found = loaded.get(kind)
        if found is not None:
            signer: Cosigner = found
        else:
            if not name:
                raise ConfigError(f"no witness key at {paths[kind]}: run `oap-witness keygen --name <name>` "
                                  "or set name")
            if kind == "mldsa44":
                signer = create_mldsa_key(paths[kind], name)
            else:
                signer, _ = create_keys(paths[kind], cfg.identity_key_path, name)
            log.info("generated a new %s witness key %s", kind, signer.vkey if kind == "ed25519" else
                     signer.vkey[:48] + "...")
        out.append(signer)
    identity_path = cfg.identity_key_path
    if not identity_path.exists():
        write_private_key(identity_path, Signer.generate(identity_key_name(name)).to_skey())
        log.info("generated a new identity key for %s", name)
    return tuple(out), read_identity(identity_path)

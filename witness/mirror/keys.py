"""The mirror's cosigning key file (Go signer-key format, 0600, never overwritten or logged).

The mirror is a cosigner of its own, distinct from any witness (C2SP tlog-mirror: a
witness service beside a mirror "MUST be a distinct cosigner ... with a distinct
name"; tlog-cosignature: "A given tuple MUST imply a single set of statements"). Its key
signs cosignature/v1 (Ed25519, type 0x04) today; `load_cosigner` is the one place that
knows key-file types, so an ML-DSA-44 (0x06) key joins here when the formats module
loads one.
"""
from __future__ import annotations

import logging
from pathlib import Path

from tlog.errors import ConfigError
from tlog.formats.keys import CosignatureSigner
from tlog.runtime.keyfiles import read_private_key, write_private_key

from .config import MirrorConfig
from .core import Cosigner

log = logging.getLogger("oap.mirror")


def load_cosigner(text: str) -> Cosigner:
    """A cosigner from its key file: an Ed25519 (0x01) key file cosigns as cosignature/v1."""
    return CosignatureSigner.from_skey(text)


def create_key(path: Path, name: str) -> Cosigner:
    """Make a new key file (0600; FileExistsError if one exists) and `<name>.vkey` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    signer = CosignatureSigner.generate(name)
    write_private_key(path, signer.to_skey())
    path.with_name(path.name.removesuffix(".key") + ".vkey").write_text(signer.vkey + "\n")
    return signer


def load_or_create_key(cfg: MirrorConfig) -> Cosigner:
    """The mirror's key, checked against `cfg.name`; made on first start when a name is set."""
    path = cfg.key_path
    if not path.exists():
        if not cfg.name:
            raise ConfigError(f"no mirror key at {path}: run `oap-mirror keygen --name <name>` or set name")
        signer = create_key(path, cfg.name)
        log.info("generated a new mirror key %s", signer.vkey)
        return signer
    signer = load_cosigner(read_private_key(path))
    if cfg.name and signer.name != cfg.name:
        raise ConfigError(f"{path} is the key of mirror {signer.name!r}, but name {cfg.name!r} is configured")
    return signer

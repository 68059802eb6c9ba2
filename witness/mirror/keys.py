"""The mirror's cosigning key files (Go signer-key format, 0600, never overwritten or logged).

The mirror is a cosigner of its own, distinct from any witness (C2SP tlog-mirror: a
witness service beside a mirror "MUST be a distinct cosigner ... with a distinct
name"; tlog-cosignature: "A given tuple MUST imply a single set of statements").

- `mirror.key`: Ed25519, cosignature/v1 (type 0x04);
- `mirror-mldsa44.key`: ML-DSA-44, subtree/v1 (type 0x06), held when `cosigners` names
  "mldsa44"; same key name (one mirror, two keys). With it the mirror also answers
  `sign-subtree`.

Loading and first-start creation are the witness's (`tlog.runtime.keyfiles.load_or_create_cosigners`).
"""
from __future__ import annotations

from pathlib import Path

from tlog.formats.keys import CosignatureSigner, Cosigner, MLDSACosigner
from tlog.runtime.keyfiles import load_or_create_cosigners, write_cosigner

from .config import MirrorConfig


def create_key(path: Path, name: str, *, mldsa: bool = False) -> Cosigner:
    """Make a new key file (0600; FileExistsError if one exists) and `<name>.vkey` beside it."""
    signer: Cosigner = MLDSACosigner.generate(name) if mldsa else CosignatureSigner.generate(name)
    write_cosigner(path, signer)
    return signer


def load_or_create_keys(cfg: MirrorConfig) -> tuple[Cosigner, ...]:
    """The mirror's keys (`cfg.cosigners`, in that order), checked against `cfg.name`; made on
    first start when a name is set (or the mirror's other key names it)."""
    return load_or_create_cosigners(cfg.cosigner_key_paths, cfg.cosigners, cfg.name, who="mirror",
                                    hint="run `oap-mirror keygen --name <name>` or set name")

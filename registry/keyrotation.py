"""Rotating the registry's key in place (docs/architecture.md §3.9, §6). Pure: no I/O.

A registry's identity is the key named in its genesis (`registry.json`); the key that
signs its anchors and status answers may change. Each change is a rotation statement,
committed to the registry's history as `key-rotations/<number>.json` (RFC 8785 bytes):

    {"type": "oap-registry-key-rotation", "registry": <genesis did:key>, "number": n,
     "previous": <did:key signing until now>, "key": <did:key signing from now on>,
     "seq": <the commit that adds the statement>, "epoch": <the first status epoch the new key
     signs>, "issued_at": <RFC 3339 UTC>,
     "signature": <previous key's>, "countersignature": <new key's>}

Both signatures are Ed25519 over the RFC 8785 form of the statement without
`signature` and `countersignature`: the old key hands over (nobody without it can
make a statement a verifier pinned to it accepts), the new key proves possession (a
key cannot be named without its holder's consent, and a verifier pinned to the new
key trusts the old one as its predecessor).

Which key signs what (`KeyChain.at`): the anchor of commit `s`, and the receipts
anchored with it, are signed by the key in force after commit `s` — the rotation
commit itself is anchored by the new key, the commits before it by the old one, and
the old key's signature on any later commit is refused. Status epochs are numbered; a
retired key's epoch statements count only when their number is below the rotation's
`epoch` (the answers made before the rotation stay good until their `next_update`: the
overlap), never the epochs after it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tlog.errors import FormatError, InvalidInput, OAPError, SignatureError
from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.did import did_key_from_public, public_from_did_key
from tlog.formats.encoding import b64dec, b64enc
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.strict import loads_json
from tlog.formats.times import format_utc, parse_utc

ROTATION_TYPE = "oap-registry-key-rotation"
ROTATION_FILE = "key-rotation.json"
"""A rotation `oap-registry rotate-key` prepared in the data directory; the registry commits
it when it next starts with the new key."""
MAX_ROTATION_BYTES = 4096
MAX_ROTATIONS = 1000
_FIELDS = {"type", "registry", "number", "previous", "key", "seq", "epoch", "issued_at", "signature",
           "countersignature"}


class RotationError(InvalidInput):
    """A rotation statement is malformed, out of order or not signed by the keys it names."""


@dataclass(frozen=True)
class Rotation:
    registry: str  # the registry's identity: its genesis key
    number: int  # 1, 2, ... in order
    previous: str
    key: str
    seq: int  # the commit that adds it; the first commit the new key anchors
    epoch: int  # the first status epoch the new key signs
    issued_at: datetime
    content: bytes  # the canonical statement, as committed and served


def _signing_bytes(doc: dict[str, Any]) -> bytes:
    return jcs({k: v for k, v in doc.items() if k not in ("signature", "countersignature")})


def make_rotation(*, registry: str, number: int, old: Ed25519Key, new: Ed25519Key, seq: int, epoch: int,
                  issued_at: datetime) -> bytes:
    """The statement handing the registry over from `old` to `new`, signed by both."""
    doc: dict[str, Any] = {
        "type": ROTATION_TYPE, "registry": registry, "number": number,
        "previous": did_key_from_public(ed25519_signer(old).public),
        "key": did_key_from_public(ed25519_signer(new).public), "seq": seq, "epoch": epoch,
        "issued_at": format_utc(issued_at)}
    msg = _signing_bytes(doc)
    doc["signature"] = b64enc(ed25519_signer(old).sign(msg))
    doc["countersignature"] = b64enc(ed25519_signer(new).sign(msg))
    data = jcs(doc)
    parse_rotation(data)  # never commit what a verifier would refuse
    return data


def _check_sig(doc: dict[str, Any], field: str, did: str) -> None:
    try:
        sig = b64dec(doc[field], what=field) if isinstance(doc[field], str) else b""
        ed25519.verify(public_from_did_key(did), _signing_bytes(doc), sig)
    except (FormatError, SignatureError, OAPError):
        raise RotationError(f"key rotation: the {field} is not by {did}") from None


def parse_rotation(data: bytes | str | object) -> Rotation:
    """A statement (bytes, or the parsed JSON) whose form and both signatures verify."""
    if isinstance(data, (bytes, str)):
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > MAX_ROTATION_BYTES:
            raise RotationError(f"key rotation: more than {MAX_ROTATION_BYTES} bytes")
        doc = loads_json(raw)
    else:
        doc = data
    if not isinstance(doc, dict) or set(doc) != _FIELDS or doc["type"] != ROTATION_TYPE:
        raise RotationError(f"not an {ROTATION_TYPE} statement")
    number, seq, epoch = doc["number"], doc["seq"], doc["epoch"]
    if type(number) is not int or not 1 <= number <= MAX_ROTATIONS or type(seq) is not int or seq < 1 \
            or type(epoch) is not int or epoch < 1:
        raise RotationError("key rotation: number must be 1.., seq a commit after the genesis and epoch 1..")
    for name in ("registry", "previous", "key"):
        try:
            public_from_did_key(doc[name])
        except OAPError as e:
            raise RotationError(f"key rotation: {name}: {e.message}") from None
    if doc["previous"] == doc["key"]:
        raise RotationError("key rotation: the new key is the old key")
    try:
        issued_at = parse_utc(doc["issued_at"], "issued_at")
    except OAPError as e:
        raise RotationError(f"key rotation: {e.message}") from None
    _check_sig(doc, "signature", doc["previous"])
    _check_sig(doc, "countersignature", doc["key"])
    return Rotation(doc["registry"], number, doc["previous"], doc["key"], seq, epoch, issued_at, jcs(doc))


@dataclass(frozen=True)
class KeyChain:
    """A registry's keys: its genesis key, then each rotation in order."""

    registry: str
    rotations: tuple[Rotation, ...] = ()

    @property
    def current(self) -> str:
        return self.rotations[-1].key if self.rotations else self.registry

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.registry, *(r.key for r in self.rotations))

    def then(self, rotation: Rotation, seq: int | None = None) -> KeyChain:
        """This chain and the next rotation, which must hand over from the current key
        (`seq`: the commit adding it, when replaying history)."""
        if rotation.registry != self.registry:
            raise RotationError(f"key rotation of registry {rotation.registry}, not of {self.registry}")
        if rotation.number != len(self.rotations) + 1:
            raise RotationError(f"key rotation {rotation.number} out of order: expected {len(self.rotations) + 1}")
        if rotation.previous != self.current:
            raise RotationError(f"key rotation {rotation.number} hands over from {rotation.previous}, "
                                f"but the registry's key is {self.current}")
        last = self.rotations[-1] if self.rotations else None
        if last is not None and (rotation.seq <= last.seq or rotation.epoch < last.epoch
                                 or rotation.issued_at < last.issued_at):
            raise RotationError(f"key rotation {rotation.number} is not after rotation {last.number}")
        if seq is not None and rotation.seq != seq:
            raise RotationError(f"key rotation {rotation.number} names commit {rotation.seq}, but commit {seq} adds it")
        return KeyChain(self.registry, (*self.rotations, rotation))

    def at(self, seq: int) -> str:
        """The key that signs the anchor of commit `seq` (and the receipts committed with it)."""
        key = self.registry
        for r in self.rotations:
            if r.seq <= seq:
                key = r.key
        return key

    def retired_at(self, key: str) -> int | None:
        """The first status epoch `key` may not sign (the rotation away from it's); None for the
        current key."""
        for r in self.rotations:
            if r.previous == key:
                return r.epoch
        return None

    def may_sign(self, key: str, epoch: int, pinned: str) -> bool:
        """Whether status epoch number `epoch` may be signed by `key`, for a verifier pinned to
        `pinned`: a key of this chain from the pinned one on, not retired by then."""
        keys = self.keys
        if pinned not in keys or key not in keys[keys.index(pinned):]:
            return False
        retired = self.retired_at(key)
        return retired is None or epoch < retired


def key_chain(registry: str, statements: Sequence[object]) -> KeyChain:
    """The chain of `registry` (its genesis key) through `statements`, each handing over
    from the key before it; RotationError for any gap, reordering or bad signature."""
    if len(statements) > MAX_ROTATIONS:
        raise RotationError(f"more than {MAX_ROTATIONS} key rotations")
    chain = KeyChain(registry)
    for s in statements:
        chain = chain.then(parse_rotation(s))
    return chain


def rotations_document(chain: KeyChain) -> dict[str, Any]:
    """`GET /v1/key-rotations`: the registry's identity and its rotation statements."""
    return {"registry": chain.registry, "key": chain.current,
            "rotations": [loads_json(r.content) for r in chain.rotations]}


def chain_of_document(doc: object, registry: str | None = None) -> KeyChain:
    """A `GET /v1/key-rotations` answer, verified (for `registry` when given)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rotations"), list) \
            or not isinstance(doc.get("registry"), str):
        raise RotationError("not a key-rotations document")
    if registry is not None and doc["registry"] != registry:
        raise RotationError(f"the key rotations are of registry {doc['registry']}, not {registry}")
    return key_chain(doc["registry"], doc["rotations"])

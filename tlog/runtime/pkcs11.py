"""Signing keys inside a PKCS#11 token, named by an RFC 7512 URI (`pkcs11:token=...;object=...`).

A token key is a `tlog.formats.keys.RawSigner` like a key file's seed: the services and CLIs
take either wherever they take a key (`tlog.runtime.keyfiles.open_key`). Ed25519 keys sign
inside the token with CKM_EDDSA; an ML-DSA-44 key signs with CKM_ML_DSA where the token has
it (PKCS#11 3.2) and is refused, with a message saying to keep it in a file, where it has not.
No key of the project signs with ECDSA (ECDSA is only verified: 0x02 log keys, did:web keys),
so an ECDSA token key is refused as the wrong type.

**The URI.** Path attributes `token`, `serial`, `manufacturer`, `model`, `slot-id` choose the
token; `object` (the key's label), `id` and `type=private` the key. Query attributes:
`module-path` (the PKCS#11 library; else OAP_PKCS11_MODULE) and `pin-source` (RFC 7512:
`file:/path`, a file read like a key file: mode 0600 or stricter). Without `pin-source` the PIN
is OAP_PKCS11_PIN. `pin-value` is refused: a PIN in a configuration file or on a command
line is seen by whoever reads either (and by `ps`).

**Everything fails at start**: a missing library, token or object, a wrong PIN, a key of
another type, a token without the mechanism, and a key whose signatures do not verify under
its public key (one check signature over a fixed, domain-separated probe that is no message
any protocol here signs) are one-line `ConfigError`s from `open_signer`.

**Sessions and threads.** python-pkcs11 initializes a library with C_Initialize(NULL), which
tells it (PKCS#11 §5.4) that no two threads call it at once, and SoftHSM2 then turns its own
locking off. So every call into one library holds that library's lock, and its keys on one
token share one logged-in session (PKCS#11 logins are per token and application, so a second
C_Login would fail). The lock is held only around the call, and the call itself runs with the
GIL released: a service signs from worker threads while its event loop goes on. A token signs
one request at a time per process this way; benchmarks/run.py measures what that costs.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from tlog.errors import ConfigError, OAPError, SignatureError, Unavailable
from tlog.formats import ed25519, mldsa
from tlog.runtime.secretfiles import read_private_key

log = logging.getLogger("oap.keys")

URI_SCHEME = "pkcs11:"
PIN_ENV = "OAP_PKCS11_PIN"
MODULE_ENV = "OAP_PKCS11_MODULE"
ALGORITHMS = ("ed25519", "mldsa44")

_TOKEN_ATTRS = ("token", "serial", "manufacturer", "model", "slot-id")
_OBJECT_ATTRS = ("object", "id", "type")
_QUERY_ATTRS = ("module-path", "pin-source", "pin-value", "module-name")
_MAX_URI = 4096
_ED25519_OID = bytes.fromhex("06032b6570")  # DER OID 1.3.101.112 (RFC 8410 id-Ed25519)
_ED25519_NAMES = (_ED25519_OID, b"\x13\x0cedwards25519", b"\x13\x07Ed25519")  # OID, or PrintableString names
_PROBE = b"OAP-PKCS11-KEY-CHECK\x00"  # + 32 random bytes: no note, checkpoint, cosignature, JCS or hash


def is_token_uri(ref: str | os.PathLike[str]) -> bool:
    """Whether a key setting names a token key (a `pkcs11:` URI) rather than a file."""
    return os.fspath(ref).startswith(URI_SCHEME)


@dataclass(frozen=True)
class TokenURI:
    """A parsed RFC 7512 URI naming a private key (the values percent-decoded)."""

    path: dict[str, bytes]
    query: dict[str, bytes]

    def text(self, name: str) -> str | None:
        value = self.path.get(name)
        return None if value is None else value.decode("utf-8", "replace")

    def describe(self) -> str:
        """What and where, for the start-up line and messages: never the PIN."""
        where = ", ".join(f"{k} {self.text(k)!r}" for k in _TOKEN_ATTRS if k in self.path) or "any token"
        what = f"object {self.text('object')!r}" if "object" in self.path else "the one private key"
        if "id" in self.path:
            what += f" id {self.path['id'].hex()}"
        return f"PKCS#11 {where}, {what}"


def parse_uri(text: str) -> TokenURI:
    """Parse `pkcs11:attr=value;...?attr=value&...`; ConfigError for anything else, for an
    attribute given twice or unknown here, and for `pin-value`."""
    if not is_token_uri(text) or len(text) > _MAX_URI:
        raise ConfigError("a PKCS#11 key is a pkcs11: URI (RFC 7512) of at most 4 KiB")
    body = text[len(URI_SCHEME):]
    path_part, _, query_part = body.partition("?")
    path: dict[str, bytes] = {}
    query: dict[str, bytes] = {}
    for part, sep, into, known in ((path_part, ";", path, _TOKEN_ATTRS + _OBJECT_ATTRS),
                                   (query_part, "&", query, _QUERY_ATTRS)):
        for item in part.split(sep) if part else ():
            name, eq, value = item.partition("=")
            if not eq or not name:
                raise ConfigError(f"pkcs11 URI: {item!r} is not attribute=value")
            if name not in known:
                raise ConfigError(f"pkcs11 URI: attribute {name!r} is not supported here "
                                  f"(use {', '.join(known)})")
            if name in into:
                raise ConfigError(f"pkcs11 URI: {name} given twice")
            into[name] = unquote_to_bytes(value)
    if "pin-value" in query:
        raise ConfigError("pkcs11 URI: pin-value puts the PIN where configurations and command lines are read "
                          f"(and ps shows it); use pin-source=file:<a 0600 file> or {PIN_ENV}")
    if "module-name" in query:
        raise ConfigError("pkcs11 URI: module-name is not resolved here; name the library with module-path "
                          f"or {MODULE_ENV}")
    if path.get("type", b"private") != b"private":
        raise ConfigError("pkcs11 URI: a signing key is type=private")
    if "object" not in path and "id" not in path:
        raise ConfigError("pkcs11 URI: name the key with object=<label> (or id=)")
    return TokenURI(path, query)


def _module_path(uri: TokenURI) -> str:
    raw = uri.query.get("module-path")
    path = raw.decode("utf-8", "replace") if raw is not None else os.environ.get(MODULE_ENV, "")
    if not path:
        raise ConfigError(f"{uri.describe()}: name the PKCS#11 library with module-path= in the URI or {MODULE_ENV}")
    return path


def _pin(uri: TokenURI) -> str | None:
    source = uri.query.get("pin-source")
    if source is None:
        return os.environ.get(PIN_ENV)
    text = source.decode("utf-8", "replace")
    path = text.removeprefix("file://") if text.startswith("file://") else text.removeprefix("file:")
    if not path.startswith("/"):
        raise ConfigError(f"{uri.describe()}: pin-source must be file:/<absolute path>")
    try:
        return read_private_key(path)
    except OSError as e:
        raise ConfigError(f"{uri.describe()}: pin-source {path}: {e.strerror}") from None
    except OAPError as e:  # not a regular file, readable by others, not UTF-8
        raise ConfigError(f"{uri.describe()}: pin-source {path}: {e.message}") from None


@dataclass
class _Module:
    """One loaded PKCS#11 library: the lock every call into it holds, and one logged-in
    session per token (slot)."""

    lib: Any
    path: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    sessions: dict[int, tuple[Any, bytes]] = field(default_factory=dict)  # slot id -> (session, PIN digest)


_MODULES: dict[str, _Module] = {}
_MODULES_LOCK = threading.Lock()


def _pkcs11() -> Any:
    try:
        import pkcs11
    except ImportError:
        raise ConfigError("PKCS#11 keys need python-pkcs11: pip install 'oap-tlog[keys]'") from None
    return pkcs11


def _module(path: str) -> _Module:
    pkcs11 = _pkcs11()
    real = os.path.realpath(path)
    with _MODULES_LOCK:
        mod = _MODULES.get(real)
        if mod is None:
            if not os.path.isfile(real):
                raise ConfigError(f"PKCS#11 library {path}: no such file")
            try:
                lib = pkcs11.lib(real)
            except (pkcs11.exceptions.PKCS11Error, RuntimeError, OSError) as e:
                raise ConfigError(f"PKCS#11 library {path}: cannot load it ({type(e).__name__} {e})") from None
            mod = _MODULES[real] = _Module(lib, real)
    return mod


def _token(mod: _Module, uri: TokenURI) -> Any:
    pkcs11 = _pkcs11()
    want = {k: uri.text(k) for k in _TOKEN_ATTRS if k in uri.path}
    found, labels = [], []
    with mod.lock:
        slots = mod.lib.get_slots(token_present=True)
        for slot in slots:
            try:
                token = slot.get_token()
            except (pkcs11.exceptions.TokenNotPresent, pkcs11.exceptions.TokenNotRecognised):
                continue
            serial = token.serial.decode("ascii", "replace") if isinstance(token.serial, bytes) else str(token.serial)
            have = {"token": token.label, "serial": serial, "manufacturer": token.manufacturer_id,
                    "model": token.model, "slot-id": str(slot.slot_id)}
            if token.flags & pkcs11.TokenFlag.TOKEN_INITIALIZED:
                labels.append(token.label)
            if all(have[k] == v for k, v in want.items()):
                found.append(token)
    if not found:
        known = ", ".join(repr(label) for label in labels) or "none"
        raise ConfigError(f"{uri.describe()}: no such token in {mod.path} (tokens there: {known})")
    if len(found) > 1:
        raise ConfigError(f"{uri.describe()}: {len(found)} tokens match; add serial= to the URI")
    return found[0]


def _session(mod: _Module, token: Any, uri: TokenURI) -> Any:
    """The module's logged-in session with `token`, opened (and logged in) on first use."""
    pkcs11 = _pkcs11()
    exc = pkcs11.exceptions
    pin = _pin(uri)
    digest = hashlib.sha256((pin or "").encode("utf-8")).digest()
    slot_id = token.slot.slot_id
    with mod.lock:
        have = mod.sessions.get(slot_id)
        if have is not None:
            if not hmac.compare_digest(have[1], digest):
                raise ConfigError(f"{uri.describe()}: another key of this token was opened with another PIN")
            return have[0]
        if pin is None and token.flags & pkcs11.TokenFlag.LOGIN_REQUIRED:
            raise ConfigError(f"{uri.describe()}: the token needs a PIN: pin-source=file:<a 0600 file> in the URI, "
                              f"or {PIN_ENV}")
        try:
            session = token.open(user_pin=pin)
        except (exc.PinIncorrect, exc.PinInvalid, exc.PinLenRange):
            raise ConfigError(f"{uri.describe()}: the PIN is incorrect") from None
        except exc.PinLocked:
            raise ConfigError(f"{uri.describe()}: the token's PIN is locked") from None
        except exc.PKCS11Error as e:
            raise ConfigError(f"{uri.describe()}: cannot open a session ({type(e).__name__})") from None
        mod.sessions[slot_id] = (session, digest)
        return session


def _one(session: Any, uri: TokenURI, object_class: Any, what: str) -> Any:
    pkcs11 = _pkcs11()
    attrs: dict[Any, Any] = {pkcs11.Attribute.CLASS: object_class}
    if "object" in uri.path:
        attrs[pkcs11.Attribute.LABEL] = uri.path["object"].decode("utf-8", "replace")
    if "id" in uri.path:
        attrs[pkcs11.Attribute.ID] = uri.path["id"]
    found = list(session.get_objects(attrs))
    if not found:
        raise ConfigError(f"{uri.describe()}: no {what} with that label/id in the token")
    if len(found) > 1:
        raise ConfigError(f"{uri.describe()}: {len(found)} {what}s match; add id= to the URI")
    return found[0]


def _ed25519_public(pub: Any, uri: TokenURI) -> bytes:
    pkcs11 = _pkcs11()
    point = bytes(pub[pkcs11.Attribute.EC_POINT])
    # PKCS#11 3.0 §2.3.5: the point is a DER OCTET STRING; some tokens give the 32 bytes bare
    if len(point) == 34 and point[:2] == b"\x04\x20":
        return point[2:]
    if len(point) == 32:
        return point
    raise ConfigError(f"{uri.describe()}: the public key's CKA_EC_POINT is not an Ed25519 key")


class TokenSigner:
    """An Ed25519 or ML-DSA-44 key inside a token: `public` and `sign(message)`, the
    `tlog.formats.keys.RawSigner` every signer here is. Its `repr` names the key, never a PIN."""

    __slots__ = ("_key", "_lock", "_mechanism", "algorithm", "description", "public")

    def __init__(self, key: Any, public: bytes, mechanism: Any, lock: threading.Lock, *, algorithm: str,
                 description: str) -> None:
        self._key, self.public, self._mechanism, self._lock = key, public, mechanism, lock
        self.algorithm, self.description = algorithm, description

    def sign(self, message: bytes) -> bytes:
        pkcs11 = _pkcs11()
        try:
            with self._lock:  # the library's lock (C_Initialize(NULL): one call at a time)
                return bytes(self._key.sign(message, mechanism=self._mechanism))
        except pkcs11.exceptions.PKCS11Error as e:
            log.error("%s: signing failed: %s", self.description, type(e).__name__)
            raise Unavailable(f"the signing key's token failed ({type(e).__name__})") from None

    def __repr__(self) -> str:
        return f"TokenSigner({self.description}, {self.algorithm})"

    def __reduce__(self) -> Any:
        raise TypeError("token keys are not picklable")


def open_signer(uri_text: str | os.PathLike[str], *, algorithm: str = "ed25519") -> TokenSigner:
    """The token key `uri_text` names, checked end to end (module, token, PIN, object, type,
    mechanism, a probe signature verified with the public key); ConfigError on any failure."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}")
    pkcs11 = _pkcs11()
    exc = pkcs11.exceptions
    uri = parse_uri(os.fspath(uri_text))
    mod = _module(_module_path(uri))
    token = _token(mod, uri)
    mechanism = pkcs11.Mechanism.EDDSA if algorithm == "ed25519" else pkcs11.Mechanism.ML_DSA
    with mod.lock:
        mechanisms = token.slot.get_mechanisms()
    if mechanism not in mechanisms:
        if algorithm == "mldsa44":
            raise ConfigError(f"{uri.describe()}: the token does not support ML-DSA (CKM_ML_DSA); keep the "
                              "ML-DSA-44 key in a file (mldsa_key_file = <path>)")
        raise ConfigError(f"{uri.describe()}: the token does not support Ed25519 signing (CKM_EDDSA)")
    session = _session(mod, token, uri)
    try:
        with mod.lock:
            priv = _one(session, uri, pkcs11.ObjectClass.PRIVATE_KEY, "private key")
            pub = _one(session, uri, pkcs11.ObjectClass.PUBLIC_KEY, "public key")
            key_type = priv.key_type
            if algorithm == "ed25519":
                if key_type != pkcs11.KeyType.EC_EDWARDS or bytes(pub[pkcs11.Attribute.EC_PARAMS]) not in \
                        _ED25519_NAMES:
                    raise ConfigError(f"{uri.describe()}: the key is {key_type!s}, "
                                      "not Ed25519")
                public = _ed25519_public(pub, uri)
            else:
                if key_type != pkcs11.KeyType.ML_DSA or \
                        int(pub[pkcs11.Attribute.PARAMETER_SET]) != int(pkcs11.mechanisms.MLDSAParameterSet.ML_DSA_44):
                    raise ConfigError(f"{uri.describe()}: the key is not ML-DSA-44")
                public = bytes(pub[pkcs11.Attribute.VALUE])
    except exc.PKCS11Error as e:
        raise ConfigError(f"{uri.describe()}: cannot read the key ({type(e).__name__})") from None
    signer = TokenSigner(priv, public, mechanism, mod.lock, algorithm=algorithm, description=uri.describe())
    probe = _PROBE + secrets.token_bytes(32)
    try:
        signature = signer.sign(probe)
        (ed25519.verify if algorithm == "ed25519" else mldsa.verify)(public, probe, signature)
    except Unavailable as e:
        raise ConfigError(f"{uri.describe()}: the key cannot sign ({e.message})") from None
    except SignatureError:
        raise ConfigError(f"{uri.describe()}: the key's signature does not verify with its public key "
                          "(a private and a public object that are not one key pair?)") from None
    return signer


def generate_ed25519(uri_text: str | os.PathLike[str]) -> bytes:
    """Make an Ed25519 key pair inside the token the URI names, with its `object` label (and
    `id`, else 8 random bytes): the private key sensitive and never extractable. Refuses a
    label already in use (a key is never replaced). Returns the public key."""
    return _store_ed25519(uri_text, None)


def import_ed25519(uri_text: str | os.PathLike[str], seed: bytes) -> bytes:
    """Put an existing Ed25519 key (a key file's seed) into the token, sensitive and never
    extractable from there on, so a service keeps its public key when its key moves into
    hardware. Refuses a label already in use. Returns the public key."""
    return _store_ed25519(uri_text, seed)


def _store_ed25519(uri_text: str | os.PathLike[str], seed: bytes | None) -> bytes:
    pkcs11 = _pkcs11()
    exc = pkcs11.exceptions
    a = pkcs11.Attribute
    uri = parse_uri(os.fspath(uri_text))
    if "object" not in uri.path:
        raise ConfigError("pkcs11 URI: a new key needs object=<label>")
    mod = _module(_module_path(uri))
    token = _token(mod, uri)
    _session(mod, token, uri)  # logs in (the login is the token's, for every session of this process)
    label = uri.path["object"].decode("utf-8", "replace")
    key_id = uri.path.get("id") or secrets.token_bytes(8)
    try:
        with mod.lock:
            rw = token.open(rw=True)
            try:
                if list(rw.get_objects({a.LABEL: label})):
                    raise ConfigError(f"{uri.describe()}: the token already holds an object with that label; "
                                      "a key is never replaced")
                common = {a.TOKEN: True, a.LABEL: label, a.ID: key_id}
                private = {**common, a.PRIVATE: True, a.SENSITIVE: True, a.EXTRACTABLE: False, a.SIGN: True}
                public_attrs = {**common, a.VERIFY: True, a.EC_PARAMS: _ED25519_OID}
                if seed is None:
                    pub, _ = rw.generate_keypair(pkcs11.KeyType.EC_EDWARDS, store=True, label=label, id=key_id,
                                                 public_template=public_attrs, private_template=private)
                    public = _ed25519_public(pub, uri)
                else:
                    public = ed25519.public_from_seed(seed)
                    kind = {a.KEY_TYPE: pkcs11.KeyType.EC_EDWARDS}
                    rw.create_object({**private, **kind, a.CLASS: pkcs11.ObjectClass.PRIVATE_KEY,
                                      a.EC_PARAMS: _ED25519_OID, a.VALUE: seed})
                    rw.create_object({**public_attrs, **kind, a.CLASS: pkcs11.ObjectClass.PUBLIC_KEY,
                                      a.EC_POINT: b"\x04\x20" + public})
            finally:
                rw.close()
    except exc.PKCS11Error as e:
        raise ConfigError(f"{uri.describe()}: cannot store the key ({type(e).__name__})") from None
    return public

"""Local DID hosts for the tests: an HTTPS did:web server (TLS 1.3, a test CA the
resolver is told to trust) and a PLC directory stub, both real aiohttp servers on
127.0.0.1. Principals made here sign with Ed25519, P-256 or secp256k1 keys."""
from __future__ import annotations

import base64
import datetime
import ssl
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import base58
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tlog.formats.conformance import ALGS
from tlog.formats.conformance import signing_bytes as receipt_signing_bytes
from tlog.formats.diddoc import ED25519, P256, SECP256K1
from tlog.formats.encoding import b64enc
from tlog.formats.times import format_utc

_MULTICODEC = {ED25519: b"\xed\x01", P256: b"\x80\x24", SECP256K1: b"\xe7\x01"}
PLC_WITNESS = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"  # the example DID of the did:plc specification
_CURVE = {P256: ec.SECP256R1(), SECP256K1: ec.SECP256K1()}


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


@dataclass
class Key:
    """A private key of one of the three curves, and its public forms."""

    curve: str = ED25519
    private: Any = None

    def __post_init__(self) -> None:
        if self.private is None:
            self.private = ed25519.Ed25519PrivateKey.generate() if self.curve == ED25519 \
                else ec.generate_private_key(_CURVE[self.curve])

    @property
    def raw_public(self) -> bytes:
        if self.curve == ED25519:
            return self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return self.private.public_key().public_bytes(serialization.Encoding.X962,
                                                      serialization.PublicFormat.CompressedPoint)

    @property
    def multibase(self) -> str:
        return "z" + base58.b58encode(_MULTICODEC[self.curve] + self.raw_public).decode()

    def jwk(self) -> dict[str, str]:
        if self.curve == ED25519:
            return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(self.raw_public)}
        nums = self.private.public_key().public_numbers()
        return {"kty": "EC", "crv": self.curve, "x": _b64url(nums.x.to_bytes(32, "big")),
                "y": _b64url(nums.y.to_bytes(32, "big"))}

    def sign(self, message: bytes) -> bytes:
        if self.curve == ED25519:
            return self.private.sign(message)
        r, s = decode_dss_signature(self.private.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def document(did: str, keys: dict[str, Key], *, style: str = "multikey", assertion: list[str] | None = None) -> dict:
    """A DID document listing `keys` (fragment -> key) as verification methods."""
    methods = []
    for frag, key in keys.items():
        m: dict[str, Any] = {"id": f"{did}#{frag}", "controller": did}
        if style == "jwk":
            m.update(type="JsonWebKey2020", publicKeyJwk=key.jwk())
        elif style == "2018" and key.curve == ED25519:
            m.update(type="Ed25519VerificationKey2018", publicKeyBase58=base58.b58encode(key.raw_public).decode())
        else:
            m.update(type="Multikey", publicKeyMultibase=key.multibase)
        methods.append(m)
    doc: dict[str, Any] = {"@context": ["https://www.w3.org/ns/did/v1"], "id": did, "verificationMethod": methods}
    doc["assertionMethod"] = [f"{did}#{f}" for f in (assertion if assertion is not None else keys)]
    return doc



def did_key(key: Key) -> str:
    """The did:key of an Ed25519 Key."""
    from tlog.formats.did import did_key_from_public

    assert key.curve == ED25519
    return did_key_from_public(key.raw_public)


def receipt_message(receipt: dict) -> bytes:
    """What a receipt signature covers (OAP-CORE-1.0 §19.1, docs/architecture.md §3.6): the
    RFC 8785 form of the receipt without `signatures`, written here with the rfc8785
    package directly, independently of tlog.formats."""
    import rfc8785

    return rfc8785.dumps({k: v for k, v in receipt.items() if k != "signatures"})


def sign_receipt(body: dict, *signers: tuple[str, Key]) -> dict:
    """An OAP receipt (§19.1) with one signature per (by, key), each over its RFC 8785
    form without `signatures`."""
    message = receipt_message(body)
    return {**body, "signatures": [{"by": by, "alg": ALGS[k.curve], "value": b64enc(k.sign(message))}
                                   for by, k in signers]}


def invocation_receipt(agent: str, tool: str, n: int = 0) -> dict:
    """The unsigned body of an invocation receipt naming `agent` and `tool` (§19.1's example)."""
    return {"receipt_id": f"urn:oap:receipt:test-{n}", "type": "invocation", "timestamp": "2026-05-02T10:00:00.215Z",
            "principal_did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "agent_did": agent, "tool_did": tool,
            "action_id": "get_forecast", "action_version": "2.4.1", "input_hash": "sha256:" + "ab" * 32,
            "output_hash": "sha256:" + "cd" * 32, "cost": {"amount": "0.001", "currency": "EUR"}}


def did_receipt(subject: str, key: Key, *, witnesses: tuple[tuple[str, Key], ...] = (), level: str = "L3") -> dict:
    """A conformance receipt self-signed by `subject` (#k) with `key`, and by each witness."""
    issued = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    body = {"id": f"urn:oap:conformance:{uuid.uuid4()}", "subject": subject, "level": level,
            "profile": "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
            "results_digest": "sha256:" + "cd" * 32, "issued_at": format_utc(issued),
            "expires_at": format_utc(issued + datetime.timedelta(days=30))}
    message = receipt_signing_bytes(body)
    sigs = [{"by": f"{subject}#k", "alg": ALGS[key.curve], "value": b64enc(key.sign(message))}]
    sigs += [{"by": w, "alg": ALGS[k.curve], "value": b64enc(k.sign(message))} for w, k in witnesses]
    return {**body, "signatures": sigs}


def make_ca(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A test CA (its certificate written to `directory`) and a TLS 1.3 server context
    for localhost / 127.0.0.1 signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "oap test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert_file, key_file)
    return ca_file, ctx


@dataclass
class DidHosts:
    """A running did:web host (HTTPS) and PLC directory stub (HTTP), on 127.0.0.1.
    `docs` maps URL paths to what they serve; `hits` counts requests per path."""

    web_port: int = 0
    plc_url: str = ""
    ca_file: Path | None = None
    docs: dict[str, Any] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    runners: list[web.AppRunner] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"localhost%3A{self.web_port}"

    def web_did(self, *path: str) -> str:
        return ":".join(["did:web", self.host, *path])

    def publish_web(self, did: str, doc: Any) -> None:
        parts = did.split(":")[3:]
        self.docs["/" + "/".join(parts) + "/did.json" if parts else "/.well-known/did.json"] = doc

    def publish_plc(self, did: str, doc: Any) -> None:
        self.docs["/" + did] = doc

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        doc = self.docs.get(request.path)
        if doc is None:
            return web.Response(status=404)
        if isinstance(doc, web.StreamResponse):
            return doc
        if isinstance(doc, bytes):
            return web.Response(body=doc, content_type="application/json")
        return web.json_response(doc, content_type="application/did+json")

    async def start(self, directory: Path) -> DidHosts:
        self.ca_file, ctx = make_ca(directory)
        for tls in (True, False):
            app = web.Application()
            app.router.add_get("/{tail:.*}", self._serve)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx if tls else None)
            await site.start()
            port = runner.addresses[0][1]
            self.runners.append(runner)
            if tls:
                self.web_port = port
            else:
                self.plc_url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        for r in self.runners:
            await r.cleanup()

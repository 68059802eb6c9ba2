"""A local did:web host for `make run`: the participants' web servers on one machine.

OAP participants publish their DID documents at `https://<their domain>/.well-known/did.json`
(did:web), fetched over TLS 1.3 (OAP-CORE-1.0 §5.1, §28.1). `make run` stands in for those
domains with localhost names (RFC 6761: `witness-1.localhost`, `impl-3f2a.localhost`; the
network's DID resolvers send them to 127.0.0.1, `tlog.didresolver`) served by one HTTPS
server with a local certificate authority:

    ROOT/ca.pem                   the CA certificate the network's services trust (did_ca_file)
    ROOT/ca.key                   its key (0600; never leaves ROOT)
    ROOT/<name>.localhost/...     the files of https://<name>.localhost:<port>/...

so `did:web:witness-1.localhost%3A8088` is ROOT/witness-1.localhost/.well-known/did.json, and
a newcomer publishes a document by writing one there. The certificate for each name is
issued by the CA when a client first asks for it (TLS SNI). Only localhost names are
served; everything else is a 404, and nothing outside ROOT is ever read.
"""
from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import tempfile
import threading
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tlog.didresolver import is_localhost_name
from tlog.runtime.keyfiles import write_secret
from tlog.transport import server_ssl_context

CA_DAYS = 3650
CERT_DAYS = 30
MAX_FILE = 64 * 1024  # what a DID resolver reads at most (tlog.didresolver.MAX_DOCUMENT)


class LocalCA:
    """A certificate authority kept in `directory` (made on first use) that issues TLS
    server certificates for local names."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.cert_file, key_file = directory / "ca.pem", directory / "ca.key"
        if not key_file.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            write_secret(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()).decode())
            self.cert_file.unlink(missing_ok=True)
        loaded = serialization.load_pem_private_key(key_file.read_bytes(), None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        self.key = loaded
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "OAP local CA")])
        if not self.cert_file.exists():
            now = datetime.datetime.now(datetime.UTC)
            usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                  key_encipherment=False, data_encipherment=False, key_agreement=False,
                                  encipher_only=False, decipher_only=False)
            cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                    .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                    .add_extension(usage, critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                    .sign(self.key, hashes.SHA256()))
            self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, names: list[str]) -> tuple[bytes, bytes]:
        """(certificate, private key), PEM, of a TLS server certificate for `names` (DNS
        names or IP addresses), valid for CERT_DAYS."""
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        alt: list[x509.GeneralName] = []
        for n in names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))

    def server_context(self, names: list[str]) -> ssl.SSLContext:
        """A TLS 1.3 server context (§28.1, `tlog.transport`) with a fresh certificate for `names`."""
        cert, key = self.issue(names)
        with tempfile.TemporaryDirectory() as tmp:  # the ssl module loads a chain from files only
            (Path(tmp) / "c.pem").write_bytes(cert)
            (Path(tmp) / "k.pem").write_bytes(key)
            ctx = server_ssl_context(Path(tmp) / "c.pem", Path(tmp) / "k.pem")
        assert ctx is not None
        return ctx


class DidHost:
    """The HTTPS server of the module doc, over `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.ca = LocalCA(self.root)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    @property
    def ca_file(self) -> Path:
        return self.ca.cert_file

    def context(self) -> ssl.SSLContext:
        """The server context: a certificate for localhost and 127.0.0.1, and one issued
        for each localhost name a client asks for (SNI)."""
        ctx = self.ca.server_context(["localhost", "127.0.0.1"])

        def pick(sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None, _ctx: ssl.SSLContext) -> None:
            if name and is_localhost_name(name) and name.lower() != "localhost":
                sslobj.context = self._context_for(name.lower())
        ctx.sni_callback = pick
        return ctx

    def _context_for(self, name: str) -> ssl.SSLContext:
        with self._lock:
            ctx = self._contexts.get(name)
            if ctx is None:
                ctx = self._contexts[name] = self.ca.server_context([name])
            return ctx

    def file_for(self, host: str, path: str) -> Path | None:
        """The file served for https://<host>/<path>, or None."""
        name = host.rpartition(":")[0] if host.count(":") == 1 else host
        name = name.lower()
        if not is_localhost_name(name) or name == "localhost" or "/" in name or name.startswith("."):
            return None
        base = (self.root / name).resolve()
        target = (base / path.lstrip("/")).resolve()
        if base not in target.parents or not target.is_file():
            return None
        return target

    async def serve_file(self, request: web.Request) -> web.Response:
        target = self.file_for(request.host, request.path)
        if target is None or target.stat().st_size > MAX_FILE:
            raise web.HTTPNotFound()
        ctype = "application/did+json" if target.name == "did.json" else "application/json"
        return web.Response(body=target.read_bytes(), content_type=ctype, headers={"Cache-Control": "no-cache"})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.serve_file)
        return app


class RunningHost:
    """A DidHost served on `host:port` from a thread of its own (its event loop); stop() ends it."""

    def __init__(self, did_host: DidHost, host: str, port: int) -> None:
        self.did_host, self.host = did_host, host
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="did-host", daemon=True)
        self._thread.start()
        started.wait(30)
        if self._error is not None:
            raise self._error
        if self._runner is None:
            raise RuntimeError("the local did:web host did not start")

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as e:  # noqa: BLE001 - said to the starting thread
            self._error = e
            started.set()
            return
        started.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        runner = web.AppRunner(self.did_host.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.did_host.context())
        await site.start()
        self.port = runner.addresses[0][1]
        self._runner = runner

    def stop(self) -> None:
        runner = self._runner
        if runner is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._runner = None


def serve(root: Path, host: str = "127.0.0.1", port: int = 0) -> RunningHost:
    """Serve `root` (see the module doc) until `stop()`; `port` 0 picks a free one."""
    return RunningHost(DidHost(root), host, port)

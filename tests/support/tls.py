"""A self-signed certificate for the TLS tests (services serving HTTPS on a test address)."""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def self_signed(tmp_path: Path, ip: str = "127.0.0.1") -> tuple[Path, Path]:
    """(cert.pem, key.pem) in `tmp_path`, for `ip` (its subject alternative name), valid a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return tmp_path / "cert.pem", tmp_path / "key.pem"


class TLSPeers:
    """Two HTTPS servers on 127.0.0.1 with certificates of one test CA (for localhost and
    127.0.0.1; `ca_file` is its certificate), as a client's outbound peers:

    - `modern_url`: an aiohttp server that accepts TLS 1.3 only and answers every request from
      `answers` (path -> (status, JSON body or bytes, headers); 404 otherwise), recording each
      request in `seen` as (method, path, TLS version);
    - `legacy_url`: a server that accepts at most TLS 1.2 (Python's ssl with maximum_version
      TLS 1.2): each handshake that fails is kept in `refused` (OpenSSL's reason), each that
      succeeds in `served` (its version), and the request is answered 200 `{}`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.answers: dict[str, tuple[int, object, dict[str, str]]] = {}
        self.seen: list[tuple[str, str, str]] = []
        self.refused: list[str] = []
        self.served: list[str] = []
        self.modern_url = self.legacy_url = ""
        self.ca_file = directory / "ca.pem"
        self._runner = None
        self._legacy = None

    async def start(self) -> TLSPeers:
        import asyncio
        import ssl

        from aiohttp import web

        from tests.support.didhosts import make_ca

        self.ca_file, modern = make_ca(self.directory)
        self._legacy_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._legacy_ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        self._legacy_ctx.load_cert_chain(self.directory / "cert.pem", self.directory / "key.pem")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=modern)
        await site.start()
        self.modern_url = f"https://127.0.0.1:{self._runner.addresses[0][1]}"
        self._legacy = await asyncio.start_server(self._legacy_connection, "127.0.0.1", 0)
        self.legacy_url = f"https://127.0.0.1:{self._legacy.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._legacy is not None:
            self._legacy.close()
            await self._legacy.wait_closed()

    async def _answer(self, request):
        from aiohttp import web

        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        self.seen.append((request.method, request.path, ssl_object.version() if ssl_object else "none"))
        await request.read()
        status, body, headers = self.answers.get(request.path, (404, {"error": "not_found", "message": "no"}, {}))
        if isinstance(body, bytes):
            return web.Response(status=status, body=body, headers=headers)
        return web.json_response(body, status=status, headers=headers)

    async def _legacy_connection(self, reader, writer) -> None:
        import asyncio
        import ssl

        try:
            await writer.start_tls(self._legacy_ctx)
        except (ssl.SSLError, OSError) as e:
            self.refused.append(str(e))
            writer.transport.abort()
            return
        self.served.append(writer.get_extra_info("ssl_object").version())
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                         b"Connection: close\r\n\r\n{}")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError, asyncio.LimitOverrunError):
            pass
        writer.close()

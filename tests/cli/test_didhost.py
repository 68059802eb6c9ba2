"""`make run`'s did:web host (tlog.cli.didhost) and localhost names in the DID resolver
(RFC 6761 §6.3: never sent to DNS; loopback, so refused unless private networks are allowed)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tlog.cli import didhost
from tlog.didresolver import DidResolver, is_localhost_name
from tlog.errors import InvalidInput, UpstreamError
from tlog.formats import ed25519
from tlog.formats.diddoc import ed25519_document, keys_from_document


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = didhost.serve(tmp_path_factory.mktemp("did-web"))
    yield h
    h.stop()


def publish(host: didhost.RunningHost, name: str, seed: bytes) -> str:
    did = f"did:web:{name}%3A{host.port}"
    where = host.did_host.root / name / ".well-known"
    where.mkdir(parents=True, exist_ok=True)
    (where / "did.json").write_text(json.dumps(ed25519_document(did, {"key-1": ed25519.public_from_seed(seed)})))
    return did


def test_localhost_names():
    assert all(is_localhost_name(n) for n in ("localhost", "a.localhost", "A.b.LOCALHOST", "x.localhost."))
    assert not any(is_localhost_name(n) for n in ("localhost.example", "mylocalhost", "127.0.0.1", "example.org"))


async def test_each_localhost_name_is_a_host_of_its_own_over_tls_13(host):
    """Two participants on one machine, each with its own did:web host name and certificate."""
    a, b = publish(host, "alice.localhost", bytes([1]) * 32), publish(host, "bob.localhost", bytes([2]) * 32)
    resolver = DidResolver(allow_private_networks=True, ca_file=host.did_host.ca_file)
    try:
        for did, seed in ((a, bytes([1]) * 32), (b, bytes([2]) * 32)):
            doc, keys = await resolver.resolve(did)
            assert doc["id"] == did and [k.public for k in keys] == [ed25519.public_from_seed(seed)]
            assert keys == keys_from_document(did, doc)
        missing = f"did:web:carol.localhost%3A{host.port}"
        with pytest.raises(InvalidInput, match="does not resolve"):
            await resolver.resolve(missing)
    finally:
        await resolver.close()


async def test_localhost_names_are_refused_unless_private_networks_are_allowed(host):
    did = publish(host, "dave.localhost", bytes([3]) * 32)
    public = DidResolver(ca_file=host.did_host.ca_file)  # a public server's resolver
    untrusted = DidResolver(allow_private_networks=True)  # no local CA
    try:
        with pytest.raises(InvalidInput, match="not a public address"):
            await public.resolve(did)
        with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusted.resolve(did)
        assert public.fetched == 0  # refused before any connection
    finally:
        await public.close()
        await untrusted.close()


def test_only_files_of_localhost_names_under_the_root_are_served(host):
    root: Path = host.did_host.root
    publish(host, "erin.localhost", bytes([4]) * 32)
    (root / "localhost").mkdir(exist_ok=True)
    (root / "localhost" / "x.json").write_text("{}")
    served = host.did_host.file_for
    assert served(f"erin.localhost:{host.port}", "/.well-known/did.json") == \
        root / "erin.localhost" / ".well-known" / "did.json"
    assert served("ERIN.localhost", "/.well-known/did.json") is not None
    for h, path in [("erin.localhost", "/../ca.key"), ("erin.localhost", "/.well-known/../../ca.pem"),
                    ("example.org", "/.well-known/did.json"), ("localhost", "/x.json"),
                    ("erin.localhost", "/.well-known/none.json"), ("..localhost", "/ca.key")]:
        assert served(h, path) is None, (h, path)
    # the CA key stays in the root, readable by its owner only
    assert stat.S_IMODE(os.stat(root / "ca.key").st_mode) == 0o600

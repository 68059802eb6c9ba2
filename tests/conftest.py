"""Fixtures shared by the test directories: `server`, a real `oap-log serve` process,
`started`, any `tests.support.services.Service`, and `hash_impl`, which runs a
batch-hashing test once per implementation."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tlog.formats import hashing

from tests.support.services import ServerProcess

# xdist workers die with pytest; @pytest.mark.needs(tool) and the switch OAP_REQUIRE_ALL_TOOLS
pytest_plugins = ["tests.support.workers", "tests.support.tools"]

# Property tests assert what holds, never how fast: Hypothesis's per-example deadline and its
# too-slow health check are timing assertions that fail on a busy machine.
settings.register_profile("oap", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("oap")


@pytest.fixture(autouse=True)
def _close_hash_files():
    """Hash files a test filled (tests.support.trees.filled) are closed when it ends."""
    yield
    from tests.support.trees import close_filled

    close_filled()


@pytest.fixture
def server(tmp_path):
    procs: list[ServerProcess] = []

    def start(*extra: str, data: Path | None = None) -> ServerProcess:
        p = ServerProcess(data or tmp_path / "data", *extra).start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()


@pytest.fixture
def started():
    """Start a `tests.support.services.Service` (killed at the end of the test): start(svc) -> svc."""
    services = []

    def start(svc):
        services.append(svc.start())
        return svc

    yield start
    for s in services:
        s.kill()


# --- real PostgreSQL and SeaweedFS, shared by the scale-out tests -------------------------------


class Engines:
    """One PostgreSQL and one SeaweedFS server for the whole session (tlog.cli.engines);
    each test gets its own database and bucket."""

    def __init__(self, root: Path) -> None:
        from tlog.cli.engines import Postgres, Seaweed

        self.root = root
        self.pg = Postgres(root / "pg").start()
        self.weed = Seaweed(root / "weed").start()
        self.creds = root / "bucket.credentials"
        self.creds.write_text(f"{self.weed.access_key} {self.weed.secret_key}\n")
        self.creds.chmod(0o600)
        self._n = 0

    def database(self) -> str:
        """A new, empty database; its DSN."""
        import psycopg

        self._n += 1
        name = f"t{os.getpid()}_{self._n}"
        with psycopg.connect(self.pg.dsn, autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.pg.dsn.replace("dbname=postgres", f"dbname={name}")

    def bucket(self) -> str:
        """A new, empty bucket; its URL."""
        self._n += 1
        name = f"b{os.getpid()}-{self._n}"
        self.weed.create_bucket(name)
        return self.weed.bucket_url(name)

    def bucket_of(self, url: str):
        """A client of the bucket at `url`, with the session's credentials."""
        from tlog.storage.bucket import Bucket

        return Bucket.from_config(url, key_id=self.weed.access_key, secret=self.weed.secret_key)

    def close(self) -> None:
        self.weed.stop()
        self.pg.stop()


@pytest.fixture(scope="session")
def engines():
    import shutil
    import tempfile

    from tests.support.tools import need

    need("postgres")
    need("seaweedfs")
    # Not under pytest's tmp directory: PostgreSQL runs as its own user when the tests run as
    # root, and that user must reach its directory.
    root = Path(tempfile.mkdtemp(prefix="oap-engines-", dir="/tmp"))
    root.chmod(0o755)
    e = Engines(root)
    yield e
    e.close()
    shutil.rmtree(root, ignore_errors=True)


def _go_build(tmp_path_factory, name: str) -> Path:
    """tests/interop/<name>.go built with the Go toolchain `make tools` unpacks into .venv/go
    (Debian's golang and golang.org/x/mod, whose sumdb packages are independent of ours)."""
    import subprocess

    from tests.support.tools import need

    goroot, xmod = need("go")
    work = tmp_path_factory.mktemp("go")
    (work / "src/golang.org/x").mkdir(parents=True)
    (work / "src/golang.org/x/mod").symlink_to(xmod)
    (work / f"src/{name}").mkdir()
    (work / f"src/{name}/main.go").write_text((Path(__file__).parent / f"interop/{name}.go").read_text())
    env = {**os.environ, "GOROOT": str(goroot), "GOPATH": str(work), "GO111MODULE": "off",
           "GOCACHE": str(work / "cache"), "GOFLAGS": ""}
    out = work / name
    subprocess.run([str(goroot / "bin/go"), "build", "-o", str(out), name], env=env, check=True,
                   capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def go_tlogverify(tmp_path_factory) -> Path:
    """tests/interop/tlogverify.go: an independent C2SP tlog client (Go's sumdb/tlog)."""
    return _go_build(tmp_path_factory, "tlogverify")


@pytest.fixture(scope="session")
def go_tlogwrite(tmp_path_factory) -> Path:
    """tests/interop/tlogwrite.go: a static C2SP tlog-tiles log written by Go's sumdb/tlog and note."""
    return _go_build(tmp_path_factory, "tlogwrite")


@pytest.fixture(scope="session")
def go_tlogproof(tmp_path_factory) -> Path:
    """tests/interop/tlogproof.go: a c2sp.org/tlog-proof for an entry of a log tlogwrite wrote, made by Go's sumdb/tlog."""
    return _go_build(tmp_path_factory, "tlogproof")


@pytest.fixture(params=["native", "hashlib"])
def hash_impl(request, monkeypatch):
    """Run a test through the C batch hashing and again through hashlib alone."""
    if request.param == "hashlib":
        monkeypatch.setattr(hashing, "native", None)
    else:
        from tests.support.tools import need

        need("native")
    return request.param

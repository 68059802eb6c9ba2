"""The monitor's state directory: one SQLite database (WAL, synchronous=FULL) and the evidence files.

What a restart needs so that it resumes where the monitor was, never alerts twice and never
skips an entry, each moved in one transaction with what depends on it:

- per log, the verified view: the size, root and signed note of the last checkpoint every
  entry below was read and checked against, and the partial tiles of that tree (the right
  edge, `monitor.tree.TreeCursor`), from which reading resumes;
- checkpoints seen elsewhere (a witness, a mirror, a registry anchor) that are larger than
  the verified view, compared once the view reaches them;
- rescans: when an identity joins the watch list, the entries already read are read again
  for it, up to the view of that moment;
- what the journals (`oap-log add --journal`) list, and how far each was read;
- health incidents (since when a log has been unreachable or behind) and the last verified
  status of every watched DID;
- the alerts and, per alert and sink, its delivery: tries, the next try, delivered or not.

Evidence files (a watched entry's `.tlog-proof`, a split view's `.split.json`) are written
durably into `evidence/` before the alert that names them is committed. One process per
state directory (`monitor.lock`).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlog.storage.durable import lock_dir, write_atomic

SCHEMA = """
CREATE TABLE IF NOT EXISTS views(log TEXT PRIMARY KEY, origin TEXT NOT NULL, size INTEGER NOT NULL,
    root BLOB NOT NULL, note TEXT NOT NULL, read INTEGER NOT NULL, partial BLOB NOT NULL, checked_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ahead(log TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL, note TEXT NOT NULL,
    source TEXT NOT NULL, first_seen REAL NOT NULL, PRIMARY KEY(log, size, root));
CREATE TABLE IF NOT EXISTS rescans(id INTEGER PRIMARY KEY, log TEXT NOT NULL, dids TEXT NOT NULL,
    next INTEGER NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL, note TEXT NOT NULL, partial BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS watched(did TEXT PRIMARY KEY, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS known(key BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journals(path TEXT PRIMARY KEY, ino INTEGER NOT NULL, offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS incidents(kind TEXT NOT NULL, source TEXT NOT NULL, since REAL NOT NULL,
    reason TEXT NOT NULL, alerted INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(kind, source));
CREATE TABLE IF NOT EXISTS statuses(registry TEXT NOT NULL, id TEXT NOT NULL, mark TEXT NOT NULL,
    status TEXT NOT NULL, PRIMARY KEY(registry, id));
CREATE TABLE IF NOT EXISTS registries(url TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS alerts(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL, raised REAL NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries(alert INTEGER NOT NULL, sink TEXT NOT NULL, target TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL, done REAL, error TEXT, mark INTEGER,
    PRIMARY KEY(alert, sink, target));
CREATE INDEX IF NOT EXISTS waiting ON deliveries(sink, done, alert);
"""


@dataclass(frozen=True)
class View:
    """A log's verified view: the latest checkpoint that met the policy and was proven
    consistent with the one before (`size`, `root`, `note`: the signed note as served),
    and how far its entries were read: every entry below `read` was read, hashed and
    parsed, and its leaf hashes make a prefix of that tree (`partial`: the partial tiles
    of the tree of `read` leaves, `monitor.tree.TreeCursor`)."""

    log: str
    origin: str
    size: int
    root: bytes
    note: str
    read: int
    partial: bytes
    checked_at: float


@dataclass(frozen=True)
class Ahead:
    log: str
    size: int
    root: bytes
    note: str
    source: str
    first_seen: float


@dataclass(frozen=True)
class Rescan:
    id: int
    log: str
    dids: frozenset[str]
    next: int  # the next entry to read again
    size: int  # up to the view of when the identities joined
    root: bytes
    note: str
    partial: bytes


@dataclass(frozen=True)
class Delivery:
    alert: int  # the alert's seq
    sink: str
    target: str  # a hook's file name in a hooks_dir sink, else ""
    attempts: int
    mark: int | None  # a file sink: its size before the last try
    doc: dict[str, Any]


@dataclass(frozen=True)
class NewAlert:
    """An alert to raise: its document and the evidence files that go with it (name -> bytes)."""

    doc: dict[str, Any]
    files: tuple[tuple[str, bytes], ...] = ()


class State:
    """The state directory. Every write method commits (one fsync) before it returns."""

    def __init__(self, path: Path) -> None:
        self.dir = Path(path)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.evidence = self.dir / "evidence"
        self.evidence.mkdir(exist_ok=True)
        self._lock = lock_dir(self.dir, "monitor.lock", "oap-monitor")
        try:
            self.db = sqlite3.connect(self.dir / "monitor.db", isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(SCHEMA)
        except BaseException:
            os.close(self._lock)
            raise

    def close(self) -> None:
        self.db.close()
        os.close(self._lock)

    # --- transactions ---------------------------------------------------------------------

    def _tx(self) -> _Tx:
        return _Tx(self.db)

    # --- views ----------------------------------------------------------------------------

    def view(self, log: str) -> View | None:
        row = self.db.execute("SELECT log, origin, size, root, note, read, partial, checked_at FROM views "
                              "WHERE log=?", (log,)).fetchone()
        return View(*row) if row else None

    def advance(self, view: View, alerts: Sequence[NewAlert] = (), sinks: Sequence[tuple[str, str, str]] = (),
                *, settled: Iterable[tuple[int, bytes]] = ()) -> list[str]:
        """Move a log's view and raise the alerts of the entries it covers, in one transaction;
        `settled`: (size, root) of the checkpoints seen ahead that the view now covers. Returns
        the ids of the alerts that are new."""
        self._write_files(alerts)
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO views VALUES (?,?,?,?,?,?,?,?)",
                            (view.log, view.origin, view.size, view.root, view.note, view.read, view.partial,
                             view.checked_at))
            for size, root in settled:
                self.db.execute("DELETE FROM ahead WHERE log=? AND size=? AND root=?", (view.log, size, root))
            return self._insert_alerts(alerts, sinks)

    # --- checkpoints ahead of a view --------------------------------------------------------

    def ahead(self, log: str) -> list[Ahead]:
        rows = self.db.execute("SELECT log, size, root, note, source, first_seen FROM ahead WHERE log=? ORDER BY size",
                               (log,)).fetchall()
        return [Ahead(*r) for r in rows]

    def remember_ahead(self, a: Ahead) -> None:
        with self._tx():
            self.db.execute("INSERT OR IGNORE INTO ahead VALUES (?,?,?,?,?,?)",
                            (a.log, a.size, a.root, a.note, a.source, a.first_seen))
            # bounded: the 64 largest are kept (each is compared when the view reaches it)
            self.db.execute("DELETE FROM ahead WHERE log=? AND rowid NOT IN (SELECT rowid FROM ahead WHERE log=? "
                            "ORDER BY size DESC LIMIT 64)", (a.log, a.log))

    def settle_ahead(self, log: str, size: int, root: bytes) -> None:
        with self._tx():
            self.db.execute("DELETE FROM ahead WHERE log=? AND size=? AND root=?", (log, size, root))

    # --- watch list and rescans -------------------------------------------------------------

    def watched(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.db.execute("SELECT did FROM watched"))

    def watch(self, dids: Iterable[str], rescans: Sequence[tuple[str, View]]) -> None:
        """Record newly watched identities and, per log, a rescan of its view for them."""
        dids = sorted(set(dids))
        now = time.time()
        with self._tx():
            self.db.executemany("INSERT OR IGNORE INTO watched VALUES (?,?)", [(d, now) for d in dids])
            for log, v in rescans:
                self.db.execute("INSERT INTO rescans(log, dids, next, size, root, note, partial) "
                                "VALUES (?,?,?,?,?,?,?)", (log, json.dumps(dids), 0, v.size, v.root, v.note, b""))

    def rescans(self, log: str) -> list[Rescan]:
        rows = self.db.execute("SELECT id, log, dids, next, size, root, note, partial FROM rescans WHERE log=? "
                               "ORDER BY id", (log,)).fetchall()
        return [Rescan(r[0], r[1], frozenset(json.loads(r[2])), *r[3:]) for r in rows]

    def rescan_progress(self, rescan: Rescan, next_index: int, partial: bytes, alerts: Sequence[NewAlert],
                        sinks: Sequence[tuple[str, str, str]]) -> list[str]:
        self._write_files(alerts)
        with self._tx():
            if next_index >= rescan.size:
                self.db.execute("DELETE FROM rescans WHERE id=?", (rescan.id,))
            else:
                self.db.execute("UPDATE rescans SET next=?, partial=? WHERE id=?", (next_index, partial, rescan.id))
            return self._insert_alerts(alerts, sinks)

    # --- journals ---------------------------------------------------------------------------

    def journal_position(self, path: str) -> tuple[int, int]:
        row = self.db.execute("SELECT ino, offset FROM journals WHERE path=?", (path,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def add_known(self, path: str, ino: int, offset: int, keys: Sequence[bytes]) -> None:
        with self._tx():
            self.db.executemany("INSERT OR IGNORE INTO known VALUES (?)", [(k,) for k in keys])
            self.db.execute("INSERT OR REPLACE INTO journals VALUES (?,?,?)", (path, ino, offset))

    def known(self, keys: Iterable[bytes]) -> set[bytes]:
        out = set()
        for k in keys:
            if self.db.execute("SELECT 1 FROM known WHERE key=?", (k,)).fetchone():
                out.add(k)
        return out

    # --- incidents --------------------------------------------------------------------------

    def incident(self, kind: str, source: str) -> tuple[float, str, bool] | None:
        row = self.db.execute("SELECT since, reason, alerted FROM incidents WHERE kind=? AND source=?",
                              (kind, source)).fetchone()
        return (row[0], row[1], bool(row[2])) if row else None

    def open_incident(self, kind: str, source: str, reason: str, now: float) -> float:
        """Start an incident unless one is open; its start time."""
        with self._tx():
            self.db.execute("INSERT OR IGNORE INTO incidents(kind, source, since, reason) VALUES (?,?,?,?)",
                            (kind, source, now, reason))
            self.db.execute("UPDATE incidents SET reason=? WHERE kind=? AND source=?", (reason, kind, source))
        row = self.incident(kind, source)
        assert row is not None
        return row[0]

    def close_incident(self, kind: str, source: str) -> bool:
        """End an incident; whether one was open."""
        with self._tx():
            return self.db.execute("DELETE FROM incidents WHERE kind=? AND source=?", (kind, source)).rowcount > 0

    def incidents(self) -> list[tuple[str, str, float, str, bool]]:
        return [(r[0], r[1], r[2], r[3], bool(r[4])) for r in
                self.db.execute("SELECT kind, source, since, reason, alerted FROM incidents ORDER BY since")]

    def raise_incident_alert(self, kind: str, source: str, alert: NewAlert,
                             sinks: Sequence[tuple[str, str, str]]) -> list[str]:
        self._write_files([alert])
        with self._tx():
            self.db.execute("UPDATE incidents SET alerted=1 WHERE kind=? AND source=?", (kind, source))
            return self._insert_alerts([alert], sinks)

    # --- registry ---------------------------------------------------------------------------

    def status_mark(self, registry: str, status_id: str) -> tuple[str, str] | None:
        row = self.db.execute("SELECT mark, status FROM statuses WHERE registry=? AND id=?",
                              (registry, status_id)).fetchone()
        return (row[0], row[1]) if row else None

    def record_status(self, registry: str, status_id: str, mark: str, status: str,
                      alerts: Sequence[NewAlert], sinks: Sequence[tuple[str, str, str]]) -> list[str]:
        self._write_files(alerts)
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO statuses VALUES (?,?,?,?)", (registry, status_id, mark, status))
            return self._insert_alerts(alerts, sinks)

    def registry_seq(self, url: str) -> int:
        row = self.db.execute("SELECT seq FROM registries WHERE url=?", (url,)).fetchone()
        return row[0] if row else -1

    def set_registry_seq(self, url: str, seq: int, alerts: Sequence[NewAlert] = (),
                         sinks: Sequence[tuple[str, str, str]] = ()) -> list[str]:
        self._write_files(alerts)
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO registries VALUES (?,?)", (url, seq))
            return self._insert_alerts(alerts, sinks)

    # --- alerts and deliveries ----------------------------------------------------------------

    def raise_alerts(self, alerts: Sequence[NewAlert], sinks: Sequence[tuple[str, str, str]]) -> list[str]:
        self._write_files(alerts)
        with self._tx():
            return self._insert_alerts(alerts, sinks)

    def _write_files(self, alerts: Sequence[NewAlert]) -> None:
        for a in alerts:
            for name, data in a.files:
                path = self.evidence / name
                if not path.exists():
                    write_atomic(path, data)

    def _insert_alerts(self, alerts: Sequence[NewAlert], sinks: Sequence[tuple[str, str, str]]) -> list[str]:
        """Insert each alert not raised before, with a delivery row per (sink, target) whose
        kinds it is (`sinks`: (sink name, target, kinds as ',' list or '')); the new ids."""
        new = []
        now = time.time()
        for a in alerts:
            doc = a.doc
            cur = self.db.execute("INSERT OR IGNORE INTO alerts(id, kind, raised, doc) VALUES (?,?,?,?)",
                                  (doc["id"], doc["kind"], now, json.dumps(doc, separators=(",", ":"))))
            if not cur.rowcount:
                continue  # raised before: a stable id is raised once
            seq = cur.lastrowid
            new.append(doc["id"])
            for sink, target, kinds in sinks:
                if not kinds or doc["kind"] in kinds.split(","):
                    self.db.execute("INSERT INTO deliveries(alert, sink, target, next_at) VALUES (?,?,?,?)",
                                    (seq, sink, target, now))
        return new

    def due(self, sink: str, now: float, limit: int = 64) -> list[Delivery]:
        """A sink's next deliveries, in the order the alerts were raised, up to the first that
        must wait (a sink gets its alerts in order: a newer one never overtakes one in backoff)."""
        rows = self.db.execute(
            "SELECT d.alert, d.sink, d.target, d.attempts, d.mark, a.doc, d.next_at FROM deliveries d JOIN alerts a "
            "ON a.seq = d.alert WHERE d.done IS NULL AND d.sink=? ORDER BY d.alert, d.target LIMIT ?",
            (sink, limit)).fetchall()
        out = []
        for r in rows:
            if r[6] > now:
                break
            out.append(Delivery(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])))
        return out

    def next_due(self, sink: str) -> float | None:
        """When the sink's oldest waiting delivery is due (None: nothing waits)."""
        row = self.db.execute("SELECT next_at FROM deliveries WHERE done IS NULL AND sink=? ORDER BY alert, target "
                              "LIMIT 1", (sink,)).fetchone()
        return row[0] if row else None

    def delivered(self, d: Delivery) -> None:
        with self._tx():
            self.db.execute("UPDATE deliveries SET done=?, attempts=attempts+1, error=NULL WHERE alert=? AND sink=? "
                            "AND target=?", (time.time(), d.alert, d.sink, d.target))

    def failed(self, d: Delivery, error: str, next_at: float) -> None:
        with self._tx():
            self.db.execute("UPDATE deliveries SET attempts=attempts+1, error=?, next_at=? WHERE alert=? AND sink=? "
                            "AND target=?", (error[:500], next_at, d.alert, d.sink, d.target))

    def set_mark(self, d: Delivery, mark: int) -> None:
        with self._tx():
            self.db.execute("UPDATE deliveries SET mark=? WHERE alert=? AND sink=? AND target=?",
                            (mark, d.alert, d.sink, d.target))

    def queued(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT sink, COUNT(*) FROM deliveries WHERE done IS NULL GROUP BY sink"))

    def alerts_since(self, seq: int = 0, limit: int = 1000) -> list[tuple[int, dict[str, Any]]]:
        return [(r[0], json.loads(r[1])) for r in
                self.db.execute("SELECT seq, doc FROM alerts WHERE seq>? ORDER BY seq LIMIT ?", (seq, limit))]

    def alert_count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM alerts").fetchone()[0]


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> _Tx:
        self.db.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")

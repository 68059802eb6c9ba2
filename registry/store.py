"""The registry's bare Git repository (dulwich): add-only commits, compare-and-swap refs.

Contract (docs/architecture.md §6):
- `build_commit` writes the blobs, trees and the commit of one batch as a
  single pack (one fsync), on top of a parent, and refuses any path that
  already exists with different bytes (add-only: a record is never modified
  or deleted, a revocation is a new record). It does not move any ref.
- `cas` moves a ref only if it still holds the expected value (dulwich
  `set_if_equals`, a lock file + compare under the lock), so two writers can
  never silently overwrite each other's commits.
- History is linear: every commit but the root has exactly one parent, and a
  commit's `seq` is its distance from the root.

Methods are blocking; services call them from one writer thread. A dulwich
`Repo` is not shared between threads: readers (Git smart HTTP) open their own.
"""
from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from dulwich.diff_tree import tree_changes
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from tlog.errors import Conflict, InvalidInput

if TYPE_CHECKING:  # dulwich's typing names for a ref and a hex object id (both bytes)
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

MAIN: Ref = cast("Ref", b"refs/heads/main")
IDENTITY = b"OAP Registry <registry@oap.invalid>"
FILE_MODE = 0o100644


class AddOnlyViolation(InvalidInput):
    """A commit modifies or deletes a path (or adds something that is not a plain file)."""


@dataclass(frozen=True)
class Added:
    path: str
    blob: str


def _hex(sha: bytes | str) -> str:
    return sha.decode("ascii") if isinstance(sha, bytes) else sha


def _raw(sha: str | bytes) -> ObjectID:
    return cast("ObjectID", sha.encode("ascii") if isinstance(sha, str) else sha)


def _ref(name: bytes) -> Ref:
    return cast("Ref", name)


def commit_message(summary: str, paths: Iterable[str]) -> bytes:
    """Summary line, blank line, then every added path in the order it was validated."""
    return (summary + "\n\n" + "".join(p + "\n" for p in paths)).encode("utf-8")


def message_paths(message: bytes) -> list[str]:
    text = message.decode("utf-8", "replace")
    _, _, body = text.partition("\n\n")
    return [line for line in body.split("\n") if line]


class RegistryRepo:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not (self.path / "HEAD").exists():
            self.path.mkdir(parents=True, exist_ok=True)
            repo = Repo.init_bare(str(self.path))
            repo.refs.set_symbolic_ref(_ref(b"HEAD"), MAIN)
            cfg = repo.get_config()
            cfg.set((b"core",), b"fsyncObjectFiles", True)
            cfg.write_to_path()
            repo.close()
        self.repo = Repo(str(self.path))

    def close(self) -> None:
        self.repo.close()

    def clear_stale_locks(self) -> list[str]:
        """Remove the ref lock files a killed writer left behind, and say which.

        dulwich moves a ref by writing `<ref>.lock` and renaming it over the ref; a kill -9
        in between leaves the lock file, and every later ref update then fails (FileLocked)
        until someone removes it. Only the holder of the data directory's lock may call
        this: it is the one writer, so any lock file it finds is stale. The ref itself still
        holds its old value: the interrupted move is redone by recovery (pending.json)."""
        stale = [p for p in (self.path / "refs").rglob("*.lock") if p.is_file()]
        stale += [p for p in (self.path / "packed-refs.lock",) if p.is_file()]
        for p in stale:
            p.unlink()
        return [str(p.relative_to(self.path)) for p in stale]

    # --- refs -----------------------------------------------------------------------

    def ref(self, name: bytes = MAIN) -> str | None:
        try:
            return _hex(self.repo.refs[_ref(name)])
        except KeyError:
            return None

    def refs_under(self, prefix: bytes) -> dict[str, str]:
        return {_hex(k): _hex(v) for k, v in self.repo.refs.as_dict(_ref(prefix)).items()}

    def set_ref(self, name: bytes, sha: str) -> None:
        """Point `name` at `sha` whatever it held (refs other than main: the mirror's
        upstream and quarantine refs)."""
        self.repo.refs[_ref(name)] = _raw(sha)

    def cas(self, name: bytes, old: str | None, new: str) -> None:
        """Move `name` from `old` (None: must not exist) to `new`, or raise Conflict."""
        ok = self.repo.refs.set_if_equals(_ref(name), _raw(old) if old else None, _raw(new)) if old else \
            self.repo.refs.add_if_new(_ref(name), _raw(new))
        if not ok:
            raise Conflict(f"{name.decode()} moved concurrently (expected {old}, found {self.ref(name)})")

    # --- objects --------------------------------------------------------------------

    def commit(self, cid: str) -> Commit:
        obj = self.repo[_raw(cid)]
        if not isinstance(obj, Commit):
            raise InvalidInput(f"{cid} is not a commit")
        return obj

    def has(self, sha: str) -> bool:
        return _raw(sha) in self.repo.object_store

    def blob(self, sha: str) -> bytes:
        obj = self.repo[_raw(sha)]
        if not isinstance(obj, Blob):
            raise InvalidInput(f"{sha} is not a blob")
        return obj.as_raw_string()

    def read(self, tree: str, path: str) -> bytes | None:
        """Bytes of the file at `path` in `tree`, or None."""
        root = self.repo[_raw(tree)]
        if not isinstance(root, Tree):
            raise InvalidInput(f"{tree} is not a tree")
        try:
            mode, sha = root.lookup_path(self.repo.object_store.__getitem__, path.encode("utf-8"))
        except (KeyError, NotADirectoryError):
            return None
        if not stat.S_ISREG(mode):
            return None
        return self.blob(_hex(sha))

    def tree_path(self, tree: str, path: str) -> list[bytes]:
        """Raw tree objects from `tree` down to the directory holding `path` (a Git path proof)."""
        out: list[bytes] = []
        current = self.repo[_raw(tree)]
        parts = path.encode("utf-8").split(b"/")
        for part in parts[:-1]:
            if not isinstance(current, Tree):
                raise KeyError(path)
            out.append(current.as_raw_string())
            _, sha = current[part]
            current = self.repo[sha]
        if not isinstance(current, Tree):
            raise KeyError(path)
        out.append(current.as_raw_string())
        return out

    def build_commit(self, parent: str | None, files: list[tuple[str, bytes]], summary: str,
                     when: int) -> tuple[str, str, bool]:
        """Write a commit adding `files` on top of `parent`; returns (commit, tree, changed).

        A path already holding the same bytes is skipped (idempotent); holding
        other bytes is a Conflict. `changed` is False when nothing was added.
        """
        base = self.commit(parent).tree if parent else None
        blobs: dict[str, Blob] = {}
        for path, data in files:
            if path in blobs:
                if blobs[path].data != data:
                    raise Conflict(f"{path}: two different files in one batch")
                continue
            blobs[path] = Blob.from_string(data)
        new_objects: list[Tree | Blob | Commit] = []
        nested: dict = {}
        added: list[str] = []
        for path, blob in blobs.items():
            node = nested
            parts = path.split("/")
            for part in parts[:-1]:
                node = node.setdefault(part.encode(), {})
                if not isinstance(node, dict):
                    raise Conflict(f"{path}: a file is in the way")
            node[parts[-1].encode()] = blob
        tree_id = self._update_tree(base, nested, new_objects, added, "")
        if parent and tree_id == base:
            return parent, _hex(tree_id), False
        c = Commit()
        c.tree = tree_id
        c.parents = [_raw(parent)] if parent else []
        c.author = c.committer = IDENTITY
        c.author_time = c.commit_time = when
        c.author_timezone = c.commit_timezone = 0
        order = [p for p, _ in files]
        c.message = commit_message(summary, [p for p in dict.fromkeys(order) if p in added])
        new_objects.append(c)
        self.repo.object_store.add_objects([(o, None) for o in new_objects])
        return _hex(c.id), _hex(tree_id), True

    def _update_tree(self, tree_id: ObjectID | None, changes: dict, out: list, added: list[str],
                     prefix: str) -> ObjectID:
        old = self.repo[tree_id] if tree_id else Tree()
        if not isinstance(old, Tree):
            raise Conflict(f"{prefix}: not a directory")
        tree = Tree()
        for entry in old.iteritems():
            tree.add(entry.path, entry.mode, entry.sha)
        for name, change in changes.items():
            path = prefix + name.decode()
            if isinstance(change, dict):
                sub = None
                if name in old:
                    mode, sub = old[name]
                    if not stat.S_ISDIR(mode):
                        raise Conflict(f"{path}: a file is in the way")
                tree.add(name, stat.S_IFDIR, self._update_tree(sub, change, out, added, path + "/"))
                continue
            if name in old:
                mode, sha = old[name]
                if sha == change.id and mode == FILE_MODE:
                    continue  # identical record already stored
                raise Conflict(f"{path} already exists with different content; the registry is add-only")
            out.append(change)
            tree.add(name, FILE_MODE, change.id)
            added.append(path)
        if tree_id is not None and tree.id == tree_id:
            return tree_id
        out.append(tree)
        return tree.id

    # --- maintenance ----------------------------------------------------------------

    def pack_count(self) -> int:
        return len(self.repo.object_store.packs)

    def compact(self) -> int:
        """Consolidate the one-pack-per-batch packs into one (dulwich repack).

        Removes packs, so readers with their own `Repo` must be kept out meanwhile (`ReadGate`).
        """
        return self.repo.object_store.repack()

    # --- history --------------------------------------------------------------------

    def added(self, parent_tree: str | None, tree: str) -> list[Added]:
        """Files added from `parent_tree` to `tree`; AddOnlyViolation for anything else."""
        bad: list[str] = []
        out: list[Added] = []
        for ch in tree_changes(self.repo.object_store, _raw(parent_tree) if parent_tree else None, _raw(tree)):
            if ch.type != "add":
                old = ch.old.path if ch.old is not None else None
                new = ch.new.path if ch.new is not None else None
                bad.append(f"{ch.type} {(old or new or b'').decode('utf-8', 'replace')}")
                continue
            entry = ch.new
            assert entry is not None  # an add has a new side
            if entry.mode != FILE_MODE:
                bad.append(f"add {entry.path.decode('utf-8', 'replace')} with mode {entry.mode:o}")
                continue
            out.append(Added(entry.path.decode("utf-8"), _hex(entry.sha)))
        if bad:
            raise AddOnlyViolation("not add-only: " + "; ".join(bad[:10]), changes=bad[:100])
        return out

    def chain(self, head: str, stop: str | None) -> list[str]:
        """Commits after `stop` up to `head`, oldest first, following the one parent.

        Raises AddOnlyViolation if history is not linear and Conflict if `stop`
        is not an ancestor of `head` (not a fast-forward: history was rewritten).
        """
        out: list[str] = []
        cur: str | None = head
        while cur is not None and cur != stop:
            c = self.commit(cur)
            if len(c.parents) > 1:
                raise AddOnlyViolation(f"{cur} is a merge; registry history is linear")
            out.append(cur)
            cur = _hex(c.parents[0]) if c.parents else None
        if stop is not None and cur != stop:
            raise Conflict(f"{stop} is not an ancestor of {head}: not a fast-forward", rewritten=True)
        out.reverse()
        return out


class ReadGate:
    """Many Git readers or one compaction, never both (writer-preferring).

    Readers open their own dulwich `Repo`; a compaction deletes the packs they
    may be reading, so it waits for them to finish and holds new ones back.
    """

    def __init__(self) -> None:
        self._readers = 0
        self._writing = False
        self._cond = asyncio.Condition()

    @asynccontextmanager
    async def read(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writing)
            self._writing = True
            await self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._writing = False
                self._cond.notify_all()

"""Trust policy, C2SP tlog-policy draft (SPEC: https://c2sp.org/tlog-policy).

A policy says which logs are trusted and which witness cosignatures make a
checkpoint believable. It is line based; items are separated by ASCII spaces
and tabs only; blank lines and "#" comments are ignored:

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    mirror <name> <vkey> [<url>]
    group <name> <k|all|any> <member>...
    quorum <name|none>
    logs <k>
    registry <did:key> [<url>]

`mirror` is an OAP extension: a cosigner that is a C2SP tlog-mirror, whose cosignature
also says that it stores the log's entries. The draft has no word for it (a mirror is a
cosigner, and tlog-cosignature leaves a cosigner's extra statements out of band), so a
mirror line is a witness line in everything the draft defines: one namespace, the same
duplicate-key rule, and it counts in groups and the quorum exactly as a witness does;
verifiers only report its cosignature as a mirror's. A policy meant for other parsers
lists the mirror on a witness line; only the label is lost.

`logs <k>` is an OAP extension (OAP-CORE-1.0 §19.3: receipts SHOULD be anchored
in at least two logs): an entry counts only when it is proven included in at
least k of the listed logs (`tlog.client.verifier.TrustPolicy.verify_anchored`).
Without it one log suffices, as in the draft.

`registry <did:key> [<url>]` is an OAP extension too: an OAP registry whose key (an
Ed25519 did:key, the key its status answers and its history are signed with) the
relying party pins with the logs it trusts, so that one file pins a network: `oap-registry
status --log-policy` and the explorer check a status answer against it instead of the key
the registry names itself (docs/architecture.md §6). Several may be listed; the same key
twice is refused. tlog-policy parsers that do not know it refuse the line, as they refuse
`mirror` and `logs`.

Several `log` lines may name one log: keys with the same key name (the log's origin) are
the keys of one log during a key rotation's overlap. A checkpoint verifies when any of them
signed it (as with Go's note.Verifiers, which looks a signature up by name and key ID, and
C2SP signed-note, which ignores signatures by keys it does not know); they count once
toward `logs <k>` (docs/architecture.md §3.9).

Witnesses and groups share one namespace; "none" is predefined. A group or
the quorum may only name things defined on *preceding* lines, which makes
cycles impossible and lets `quorum_met` evaluate groups in definition order
without recursion. Each member appears in a group at most once (the draft: "each
witness can contribute to a group ... in only one way"). Through nested groups that
share a witness one key can still meet two members (`group g1 any a b`, `group g2 any
a c`, `group q all g1 g2`: `a` alone meets `q`); that is the draft's definition of a
group (met when k of its members are), which policies such as "2 of these and 3
overall" rely on and other verifiers (Sigsum's) accept, so it is kept: a policy that
needs distinct witnesses per member lists disjoint ones.

One cosigner, one vote. A witness may publish two keys (Ed25519 and ML-DSA-44,
C2SP tlog-cosignature), one `witness` line each; the draft counts lines, so the
two lines would count twice toward a threshold. Cosignatures name their cosigner
(the vkey's key name: "a schema-less URL that identifies the cosigner"), so this
parser refuses any group in which one cosigner could satisfy two members, except
a group whose members are all keys of that one cosigner ("group w1 any w1-ed
w1-pq"), which counts as that cosigner. Wrapping a witness's keys in such a group
is how a policy lists both; the rule only ever makes a quorum harder to reach,
never easier (docs/architecture.md §3.6).

Vkeys stay strings here: this module only checks their shape (to spot two
lines wrapping the same public key, which the draft forbids); parsing them
into verifiers is the caller's job (tlog.formats.keys).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tlog.errors import FormatError, InvalidInput
from tlog.formats.did import public_from_did_key
from tlog.formats.encoding import b64dec

NONE = "none"
MAX_POLICY_BYTES = 64 * 1024
"""The draft asks implementations to support >= 32 logs, witnesses and groups
(a few KiB); 64 KiB is generous and bounds the work an untrusted file causes."""

_WS = re.compile(r"[ \t]+")
_K_RE = re.compile(r"[1-9][0-9]{0,5}", re.ASCII)
_HEX8 = re.compile(r"[0-9a-f]{8}", re.ASCII)
# Allowed: tab, newline, 0x20-0x7E and everything >= 0x80 (tlog-policy "Character set").
_BAD_CHAR = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class PolicyLog:
    vkey: str
    url: str | None = None


@dataclass(frozen=True)
class PolicyWitness:
    name: str
    vkey: str
    url: str | None = None
    mirror: bool = False  # defined by a `mirror` line (see the module doc)


@dataclass(frozen=True)
class PolicyRegistry:
    """A pinned OAP registry: the did:key it signs with (see the module doc)."""

    did: str
    url: str | None = None


@dataclass(frozen=True)
class PolicyGroup:
    """Witnessed iff at least `threshold` of `members` are ("any" = 1, "all" = n)."""

    name: str
    threshold: int
    members: tuple[str, ...]


def _key_material(vkey: str) -> bytes:
    """The public key a vkey wraps, without name, key ID or type byte.

    Two vkeys are duplicates if they wrap the same key "even if they differ by
    key name and key id" (tlog-policy); a witness published as 0x01 and as
    0x04 is the same key, so the type byte is dropped too.
    """
    parts = vkey.split("+", 2)
    if len(parts) != 3 or not parts[0] or not _HEX8.fullmatch(parts[1]):
        raise FormatError(f"malformed vkey {vkey!r}")
    blob = b64dec(parts[2], what="vkey")
    if len(blob) < 2:
        raise FormatError(f"malformed vkey {vkey!r}")
    return blob[1:]


def _check_name(name: str, defined: Mapping[str, object]) -> None:
    if name == NONE:
        raise FormatError("'none' is predefined and cannot be redefined")
    if name in defined:
        raise FormatError(f"name {name!r} defined twice")


def _check_members(members: tuple[str, ...], defined: Mapping[str, object]) -> None:
    if not members:
        raise FormatError("group needs at least one member")
    if len(set(members)) != len(members):
        raise FormatError("a group may list each member only once")
    for m in members:
        if m not in defined:
            raise FormatError(f"group member {m!r} is not defined on a preceding line")


@dataclass(frozen=True)
class Policy:
    """A parsed policy. `groups` is in definition order (members before users).

    Build it with `parse_policy`; the constructor re-checks every invariant so
    a hand-built Policy cannot break `quorum_met` or `to_text`.
    """

    logs: tuple[PolicyLog, ...]
    witnesses: Mapping[str, PolicyWitness]
    groups: Mapping[str, PolicyGroup]
    quorum: str | None = None
    log_quorum: int = 1  # `logs <k>`: in how many of the logs an entry must be anchored
    registries: tuple[PolicyRegistry, ...] = ()  # `registry` lines (see the module doc)

    def __post_init__(self) -> None:
        object.__setattr__(self, "witnesses", MappingProxyType(dict(self.witnesses)))
        object.__setattr__(self, "groups", MappingProxyType(dict(self.groups)))
        seen_keys: set[bytes] = set()
        for log in self.logs:
            _add_key(seen_keys, log.vkey, "log")
        defined: dict[str, object] = {}
        seen_keys = set()
        for name, w in self.witnesses.items():
            if name != w.name:
                raise FormatError(f"witness {w.name!r} filed under {name!r}")
            _check_name(name, defined)
            _add_key(seen_keys, w.vkey, "witness")
            defined[name] = w
        for name, g in self.groups.items():
            if name != g.name:
                raise FormatError(f"group {g.name!r} filed under {name!r}")
            _check_name(name, defined)
            _check_members(g.members, defined)
            if not 1 <= g.threshold <= len(g.members):
                raise FormatError(f"group {name!r}: threshold outside 1..{len(g.members)}")
            defined[name] = g
        _check_one_vote(self.witnesses, self.groups)
        if self.quorum is not None and self.quorum not in defined:
            raise FormatError(f"quorum {self.quorum!r} is not defined")
        if not 1 <= self.log_quorum <= max(1, self.log_count):
            raise FormatError(f"logs {self.log_quorum}: the policy lists {self.log_count} log(s)")
        dids: set[str] = set()
        for r in self.registries:
            _add_registry(dids, r.did)

    @property
    def log_count(self) -> int:
        """How many logs the policy lists: `log` lines with one key name are one log's keys."""
        return len({cosigner_name(log.vkey) for log in self.logs})

    def quorum_met(self, cosigned: set[str] | frozenset[str]) -> bool:
        """True iff the witnesses named in `cosigned` satisfy the quorum.

        `cosigned` holds witness names whose cosignature the caller verified;
        group names or unknown names in it are ignored, so a caller cannot
        satisfy a group by naming it. No quorum ("none") is always met.
        """
        if self.quorum is None:
            return True
        met = {name for name in self.witnesses if name in cosigned}
        for g in self.groups.values():  # definition order: members come first
            if sum(m in met for m in g.members) >= g.threshold:
                met.add(g.name)
        return self.quorum in met

    def to_text(self) -> str:
        """Canonical text: logs, witnesses, groups (definition order), quorum.

        Thresholds are written "all" when k == n, "any" when k == 1 < n, else k.
        """
        out: list[str] = []
        for log in self.logs:
            out.append(_join("log", log.vkey, log.url))
        for r in self.registries:
            out.append(_join("registry", r.did, r.url))
        for w in self.witnesses.values():
            out.append(_join("mirror" if w.mirror else "witness", w.name, w.vkey, w.url))
        for g in self.groups.values():
            n = len(g.members)
            k = "all" if g.threshold == n else "any" if g.threshold == 1 else str(g.threshold)
            out.append(_join("group", g.name, k, *g.members))
        out.append("quorum " + (self.quorum if self.quorum is not None else NONE))
        if self.log_quorum > 1:
            out.append(f"logs {self.log_quorum}")
        return "\n".join(out) + "\n"


def cosigner_name(vkey: str) -> str:
    """The cosigner a witness key belongs to: its vkey's key name (C2SP tlog-cosignature)."""
    return vkey.split("+", 1)[0]


def _check_one_vote(witnesses: Mapping[str, PolicyWitness], groups: Mapping[str, PolicyGroup]) -> None:
    """Refuse a group where one cosigner could count for two members through two of its keys
    (see the module doc). The same witness line reached through two nested groups is left as
    the draft has it: that is one key, not a second vote the draft did not foresee."""
    # per name: cosigner -> the witness lines (keys) of that cosigner it can be met by
    who: dict[str, dict[str, frozenset[str]]] = {
        n: {cosigner_name(w.vkey): frozenset({n})} for n, w in witnesses.items()}
    for g in groups.values():  # definition order: members first
        maps = [who[m] for m in g.members]
        cosigners = {c for m in maps for c in m}
        alias = all(m in witnesses for m in g.members) and len(cosigners) == 1
        merged: dict[str, frozenset[str]] = {}
        for m, keys in zip(g.members, maps):
            for c, lines in keys.items():
                if not alias and c in merged and (merged[c] != lines or len(lines) > 1):
                    raise FormatError(
                        f"group {g.name!r}: member {m!r} and another member can both be met by cosigner {c!r} "
                        f"(keys {', '.join(sorted(merged[c] | lines))}), which would count it twice; list a "
                        "cosigner's keys in one group (group <name> any <key1> <key2>) and use that group")
                merged[c] = merged.get(c, frozenset()) | lines
        who[g.name] = merged


def _join(*items: str | None) -> str:
    return " ".join(i for i in items if i is not None)


def _add_registry(seen: set[str], did: str) -> None:
    try:
        public_from_did_key(did)
    except InvalidInput as e:
        raise FormatError(f"registry {did!r}: {e.message}") from None
    if did in seen:
        raise FormatError(f"duplicate registry {did!r}")
    seen.add(did)


def _add_key(seen: set[bytes], vkey: str, what: str) -> None:
    key = _key_material(vkey)
    if key in seen:
        raise FormatError(f"duplicate {what} key {vkey!r}")
    seen.add(key)


def parse_policy(text: str | bytes) -> Policy:
    """Parse a policy file; every error is a FormatError naming the line.

    Deviation from the draft, on purpose: a missing quorum line means
    "quorum none" (the draft requires exactly one). A second quorum line is
    an error.
    """
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_POLICY_BYTES:
            raise FormatError("policy larger than 64 KiB")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("policy is not valid UTF-8") from None
    if not isinstance(text, str):
        raise FormatError("policy must be text")
    if len(text) > MAX_POLICY_BYTES:
        raise FormatError("policy larger than 64 KiB")

    logs: list[PolicyLog] = []
    log_keys: set[bytes] = set()
    witness_keys: set[bytes] = set()
    witnesses: dict[str, PolicyWitness] = {}
    groups: dict[str, PolicyGroup] = {}
    defined: dict[str, object] = {}  # the shared witness/group namespace
    quorum: str | None = None
    quorum_seen = False
    log_quorum: int | None = None
    registries: list[PolicyRegistry] = []
    registry_dids: set[str] = set()

    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        try:
            if _BAD_CHAR.search(raw):
                raise FormatError("control character")
            line = raw.strip(" \t")
            if not line or line.startswith("#"):
                continue
            kw, *args = _WS.split(line)
            if kw == "log":
                if len(args) not in (1, 2):
                    raise FormatError("expected 'log <vkey> [<url>]'")
                _add_key(log_keys, args[0], "log")
                logs.append(PolicyLog(args[0], args[1] if len(args) == 2 else None))
            elif kw in ("witness", "mirror"):
                if len(args) not in (2, 3):
                    raise FormatError(f"expected '{kw} <name> <vkey> [<url>]'")
                name = args[0]
                _check_name(name, defined)
                _add_key(witness_keys, args[1], kw)
                w = PolicyWitness(name, args[1], args[2] if len(args) == 3 else None, kw == "mirror")
                witnesses[name] = defined[name] = w
            elif kw == "group":
                if len(args) < 3:
                    raise FormatError("expected 'group <name> <k|all|any> <member>...'")
                name, k_text, members = args[0], args[1], tuple(args[2:])
                _check_name(name, defined)
                _check_members(members, defined)
                if k_text == "all":
                    k = len(members)
                elif k_text == "any":
                    k = 1
                elif _K_RE.fullmatch(k_text):
                    k = int(k_text)
                    if k > len(members):
                        raise FormatError(f"threshold {k} exceeds {len(members)} members")
                else:
                    raise FormatError(f"bad threshold {k_text!r}")
                groups[name] = defined[name] = PolicyGroup(name, k, members)
            elif kw == "quorum":
                if len(args) != 1:
                    raise FormatError("expected 'quorum <name|none>'")
                if quorum_seen:
                    raise FormatError("more than one quorum line")
                quorum_seen = True
                if args[0] != NONE:
                    if args[0] not in defined:
                        raise FormatError(f"quorum {args[0]!r} is not defined on a preceding line")
                    quorum = args[0]
            elif kw == "logs":
                if len(args) != 1 or not _K_RE.fullmatch(args[0]):
                    raise FormatError("expected 'logs <k>' (k >= 1)")
                if log_quorum is not None:
                    raise FormatError("more than one logs line")
                log_quorum = int(args[0])
            elif kw == "registry":
                if len(args) not in (1, 2):
                    raise FormatError("expected 'registry <did:key> [<url>]'")
                _add_registry(registry_dids, args[0])
                registries.append(PolicyRegistry(args[0], args[1] if len(args) == 2 else None))
            else:
                raise FormatError(f"unknown keyword {kw!r}")
        except FormatError as e:
            raise FormatError(f"policy line {lineno}: {e.message}", line=lineno) from None
    if (witnesses or groups) and not quorum_seen:
        # A forgotten quorum line must not silently mean "no witnesses needed".
        raise FormatError("policy names witnesses but has no quorum line (write 'quorum none' to require none)")
    origins = len({cosigner_name(log.vkey) for log in logs})
    if log_quorum is not None and log_quorum > origins:
        raise FormatError(f"logs {log_quorum}: the policy lists only {origins} log(s) (keys with one name are "
                          "one log's)")
    return Policy(tuple(logs), witnesses, groups, quorum, log_quorum or 1, tuple(registries))

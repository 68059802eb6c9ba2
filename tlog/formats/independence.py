"""When a peer witness (or an auditor) is independent of the implementation it vouches for
(OAP-CORE-1.0 §31: L4 "independent peer-witness signature", L5 "independent peer-witness
signatures" and "independent third-party security audit"; docs/architecture.md §5).

Independence is decided mechanically, from facts anyone can check again: the two
principals' DIDs, the DID documents that were used to check their signatures, and the
registry's key events. A witness W is *not* independent of a subject S when

1. W is S;
2. a registry key event (`add_controller`, `rotate`) of S names W, or one of W names S,
   or one controller is named by key events of both (whoever holds it speaks for both);
3. S's DID document names W (as a verification method, in any verification
   relationship, as a controller or in `alsoKnownAs`), W's names S, or both name the
   same DID or URI;
4. W holds key material S's document lists (or the reverse): the same public key under
   two names is one party;
5. both are did:web on the same host (any port), or one host is a subdomain of the
   other (`a.example.com` and `example.com`): whoever runs the parent's DNS and web
   server controls the child's document. Siblings (`a.example.com`, `b.example.com`) are
   not related by this rule, because without the Public Suffix List a string rule cannot
   tell `a.github.io` / `b.github.io` (different people) from them, and a list that
   changes over time would make two replays of one registry history disagree.

The same rules decide when two witnesses are one party (`parties`): §31 asks for "at least
three independent peer-witness signatures", so witnesses that are not independent of each
other (one key under two names, two did:web names on one host, one naming the other) count
as one toward a level's number.

The facts of one principal are a `Principal`. The registry builds them from everything it
holds (all stored versions of the documents, every verification method in them, key
events); a log or a peer witness from what it can check offline (the DIDs and the
signing keys of resolved documents), which covers rules 1, 4 and 5.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tlog.errors import InvalidInput
from tlog.formats.did import public_from_did_key
from tlog.formats.diddoc import ED25519, UNCHECKED, VerificationKey, key_material, normal_public, split_did_url

__all__ = ["Principal", "names_in_document", "parties", "principal", "relation", "web_host"]

RELATIONSHIPS = ("verificationMethod", "authentication", "assertionMethod", "keyAgreement",
                 "capabilityInvocation", "capabilityDelegation")
MAX_ITEMS = 64  # per list read from a document (documents are at most 64 KiB anyway)


@dataclass(frozen=True)
class Principal:
    """What is known about one principal: its DID, the DIDs/URIs its documents name, the
    key material it holds, and the controllers registry key events gave it."""

    did: str
    names: frozenset[str] = field(default_factory=frozenset)
    keys: frozenset[tuple[str, bytes]] = field(default_factory=frozenset)
    controllers: frozenset[str] = field(default_factory=frozenset)


def web_host(did: str) -> str | None:
    """The host of a did:web, lowercased, without its port; None for other DIDs."""
    if not did.startswith("did:web:"):
        return None
    host = unquote(split_did_url(did)[0][len("did:web:"):].split(":")[0]).lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


def _items(value: Any) -> list[Any]:
    return (value if isinstance(value, list) else [value])[:MAX_ITEMS]


def _did_of(ref: object, did: str) -> str | None:
    if not isinstance(ref, str) or not ref:
        return None
    if ref.startswith("#"):
        return did
    return split_did_url(ref)[0]


def names_in_document(did: str, document: object) -> set[str]:
    """The DIDs and URIs a DID document names: its id and controllers, the DIDs of its
    verification methods (by reference or embedded) and their controllers, `alsoKnownAs`."""
    if not isinstance(document, dict):
        return set()
    out = {did}
    refs: list[object] = [document.get("id"), *_items(document.get("controller"))]
    for rel in RELATIONSHIPS:
        for m in _items(document.get(rel)):
            if isinstance(m, dict):
                refs += [m.get("id"), *_items(m.get("controller"))]
            else:
                refs.append(m)
    out.update(d for d in (_did_of(r, did) for r in refs) if d is not None)
    out.update(a for a in _items(document.get("alsoKnownAs")) if isinstance(a, str) and a)
    return out


def _keys_in_document(document: object) -> set[tuple[str, bytes]]:
    out: set[tuple[str, bytes]] = set()
    if not isinstance(document, dict):
        return out
    for rel in RELATIONSHIPS:
        for m in _items(document.get(rel)):
            got = key_material(m)
            if got is not None:
                out.add(got)
    return out


def principal(did: str, *, documents: Iterable[object] = (), keys: Iterable[VerificationKey] = (),
              controllers: Iterable[str] = ()) -> Principal:
    """The facts of `did`: its did:key's own key, and whatever the given documents, checked
    signing keys and registry controllers add (keys of unchecked lookups are skipped)."""
    names: set[str] = {did}
    material: set[tuple[str, bytes]] = set()
    if did.startswith("did:key:"):
        try:
            material.add((ED25519, public_from_did_key(did)))
        except InvalidInput:
            pass
    for doc in documents:
        names |= names_in_document(did, doc)
        material |= _keys_in_document(doc)
    for k in keys:
        if k.curve != UNCHECKED:
            try:
                material.add((k.curve, normal_public(k.curve, k.public)))
            except ValueError:
                continue
    return Principal(did, frozenset(names), frozenset(material), frozenset(controllers))


def _hosts(p: Principal) -> set[str]:
    return {h for h in (web_host(n) for n in (p.did, *p.names, *p.controllers)) if h}


def _within(child: str, parent: str) -> bool:
    return child.endswith("." + parent)


def relation(subject: Principal, other: Principal, *, name: str = "the subject") -> str | None:
    """Why `other` is not independent of `subject` (one sentence naming the rule, with
    `subject` called `name`), or None."""
    s, o = subject.did, other.did
    if o == s:
        return f"it is {name} itself"
    if o in subject.controllers:
        return f"it is a controller of {name} (a registry key event names it)"
    if s in other.controllers:
        return f"{name} is a controller of it (a registry key event names {name})"
    common = sorted(subject.controllers & other.controllers)
    if common:
        return f"it and {name} have the same controller {common[0]} (registry key events)"
    if o in subject.names:
        return f"{name}'s DID document names it (verification method, relationship, controller or alsoKnownAs)"
    if s in other.names:
        return f"its DID document names {name}"
    shared = sorted(subject.names & other.names)
    if shared:
        return f"its DID document and {name}'s both name {shared[0]}"
    if subject.keys & other.keys:
        return f"it holds a key that {name}'s DID document lists (the same public key)"
    for hs in sorted(_hosts(subject)):
        for ho in sorted(_hosts(other)):
            if hs == ho:
                return f"it is a did:web on {name}'s host {hs}"
            if _within(ho, hs):
                return f"its did:web host {ho} is a subdomain of {name}'s host {hs}"
            if _within(hs, ho):
                return f"its did:web host {ho} is a parent domain of {name}'s host {hs}"
    return None


def parties(members: list[Principal]) -> tuple[list[list[str]], list[tuple[str, str, str]]]:
    """`members` (witnesses) grouped into independent parties: two are one party when
    `relation` holds between them, and so is whoever is one party with either of them.
    Returns the parties (DIDs, in the order given) and each related pair (a, b, why b is
    not independent of a, calling a "the witness <a>")."""
    root = list(range(len(members)))

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    why: list[tuple[str, str, str]] = []
    for j, b in enumerate(members):
        for i in range(j):
            a = members[i]
            rule = relation(a, b, name=f"the witness {a.did}")
            if rule is not None:
                why.append((a.did, b.did, rule))
                root[find(j)] = find(i)
    groups: dict[int, list[str]] = {}
    for i, m in enumerate(members):
        groups.setdefault(find(i), []).append(m.did)
    return list(groups.values()), why

"""Trust answers that must fail safe (OAP-CORE-1.0 §22, §22.1, §22.3, §28.5, §31;
docs/architecture.md §6.1), in-process: records validated and indexed as the writer does, at
chosen commit times (`tests.registry.test_standing.Registry`), answers read from
`registry.standing` and the status producer's `known` set.

- a credential's status is scoped by its issuer: a revoked credential asked for by its bare id
  never answers `good` (the id is refused, and never `known`);
- a did:web witness or auditor that signed with a key revoked for compromise (a `kind=key`
  revocation of the key's did:key, §28.5) does not count, as a did:key witness would not.
"""
from __future__ import annotations

import pytest

from registry.client import make_revocation
from registry.records import sign_record
from registry.standing import standing
from registry.statusverify import status_id_of
from tlog.errors import InvalidInput
from tlog.formats.ed25519 import generate_seed

from tests.registry.test_standing import Registry
from tests.support.registry import did


def credential_revocation(issuer: bytes, cred: str, index: int, r: Registry, **kw) -> dict:
    body = make_revocation(issuer, kind="vc", subject=cred, effective_at=r.t(0), **kw)
    body["status_list_index"] = index
    return sign_record(body, issuer)


# --- a credential asked for without its issuer ----------------------------------------------


def test_a_revoked_credential_asked_for_by_its_bare_id_is_never_good():
    issuer, cred = generate_seed(), "https://issuer.example/cred/9"
    r = Registry()
    rec = r.submit(credential_revocation(issuer, cred, 9, r, reason="key_compromise"), 0)
    assert standing(r.index, rec.status_keys()[0], r.at(1)).status == "revoked"
    # the bare id is not a status id the registry knows (it would answer `good`) ...
    assert cred not in r.index.known and rec.status_keys()[0] in r.index.known
    # ... and asking for it is refused, saying how to ask
    with pytest.raises(InvalidInput, match=r"\?issuer="):
        status_id_of(cred)
    assert status_id_of(cred, did(issuer)) == rec.status_keys()[0]


@pytest.mark.parametrize("sid", ["did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
                                 "did:web:a.example#oauth_grants", "urn:oap:conformance:1"])
def test_dids_token_classes_and_receipt_ids_are_asked_for_without_an_issuer(sid):
    assert status_id_of(sid) == sid

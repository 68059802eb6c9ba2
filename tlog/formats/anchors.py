"""One entry's proofs from several logs in one file (OAP-CORE-1.0 §19.3: receipt
hashes SHOULD be anchored in at least two logs; §8.3 `anchored_in` names them).

A `.anchors.json` file is a JSON object:

    {"type": "oap-anchors/v1",
     "anchored_in": ["<origin>", ...],          the logs' origins, in the order below
     "bundles": ["c2sp.org/tlog-proof@v1\\n...", ...]}

Each bundle is a complete C2SP tlog-proof (`tlog.formats.proofbundle`), so any
one of them can be cut out and verified alone by a tlog-proof tool. This module
only parses and serialises; `tlog.client.verifier.TrustPolicy.verify_anchored`
checks the bundles against a policy (and its `logs <k>` rule). A single plain
tlog-proof is accepted wherever an anchors file is: one log's anchor.
"""
from __future__ import annotations

import json

from tlog.errors import FormatError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import parse_note
from tlog.formats.proofbundle import HEADER, MAX_BUNDLE_BYTES, ProofBundle, parse_proof_bundle

ANCHORS_TYPE = "oap-anchors/v1"
MAX_LOGS = 32  # the tlog-policy draft asks for >= 32 logs; more proves nothing new
MAX_ANCHORS_BYTES = 4 * MAX_BUNDLE_BYTES


def anchors_text(bundles: list[str]) -> str:
    """The anchors file for these tlog-proof texts (one per log), sorted by origin so
    that the same anchors give the same file."""
    if not 1 <= len(bundles) <= MAX_LOGS:
        raise FormatError(f"an anchors file holds 1 to {MAX_LOGS} bundles")
    parsed = sorted((_origin(parse_proof_bundle(b)), b) for b in bundles)
    return json.dumps({"type": ANCHORS_TYPE, "anchored_in": [o for o, _ in parsed],
                       "bundles": [b for _, b in parsed]}, indent=1) + "\n"


def parse_anchors(data: str | bytes) -> list[ProofBundle]:
    """The bundles of an anchors file, or of a single tlog-proof; FormatError otherwise.
    `anchored_in` must name each bundle's checkpoint origin, in order."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_ANCHORS_BYTES:
            raise FormatError(f"anchors file larger than {MAX_ANCHORS_BYTES} bytes")
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("anchors file is not UTF-8") from None
    if len(data) > MAX_ANCHORS_BYTES:
        raise FormatError(f"anchors file larger than {MAX_ANCHORS_BYTES} bytes")
    if data.startswith(HEADER):
        return [parse_proof_bundle(data)]
    try:
        obj = json.loads(data)
    except ValueError:
        raise FormatError("neither a tlog-proof nor an anchors file (JSON)") from None
    if not isinstance(obj, dict) or obj.get("type") != ANCHORS_TYPE or set(obj) != {"type", "anchored_in", "bundles"}:
        raise FormatError(f"an anchors file is {{type: {ANCHORS_TYPE!r}, anchored_in, bundles}}")
    texts, names = obj["bundles"], obj["anchored_in"]
    if not isinstance(texts, list) or not isinstance(names, list) or not 1 <= len(texts) <= MAX_LOGS \
            or len(names) != len(texts) or not all(isinstance(t, str) for t in texts):
        raise FormatError(f"anchors file: 1 to {MAX_LOGS} bundles, each named in anchored_in")
    bundles = []
    for i, (text, name) in enumerate(zip(texts, names)):
        try:
            b = parse_proof_bundle(text)
        except FormatError as e:
            raise FormatError(f"anchors file: bundle {i}: {e.message}") from None
        if _origin(b) != name:
            raise FormatError(f"anchors file: anchored_in[{i}] is not the origin of bundle {i}")
        bundles.append(b)
    return bundles


def _origin(b: ProofBundle) -> str:
    return parse_checkpoint(parse_note(b.checkpoint).text).origin

"""The Python verdicts stored in tests/ui/js/fixtures/{records,status}.json, computed again
from the inputs those files hold, with today's Python code: `records.check_record(now=None)`
and `statusverify.verify_status`. tests/ui/test_lib.py asserts the stored verdicts are these
(a fixture made by older code fails there instead of testing the browser against it);
`python -m tests.ui.fixture_verdicts` writes them back after a deliberate change of a reason.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from registry.records import check_record
from registry.statusverify import verify_status
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError
from tlog.formats.times import parse_utc

FIXTURES = Path(__file__).resolve().parent / "js" / "fixtures"


def _verdict(fn) -> dict[str, Any]:
    try:
        return {"ok": True, "result": fn()}
    except OAPError as e:
        return {"ok": False, "error": type(e).__name__, "message": e.message}


def record_verdict(record: object) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        r = check_record(record, now=None)
        return {"type": r.type, "id": r.id, "path": r.path, "subject": r.subject, "issued_by": r.issued_by,
                "kind": r.kind}
    return _verdict(run)


def status_verdict(doc: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    o = case["options"]
    now: datetime = parse_utc(doc["now"], "now") + timedelta(days=o.get("now_plus_days", 0))
    policy = None if o.get("policy") is False else TrustPolicy.for_log(doc["log_vkey"])
    resp = json.loads(o["text"]) if "text" in o else case["response"]

    def run() -> dict[str, Any]:
        v = verify_status(resp, registry=o.get("registry", doc["registry"]), status_id=o.get("status_id"), policy=policy, now=now,
                          allow_stale=bool(o.get("allow_stale")))
        return {"id": v.id, "status": v.status, "epoch": v.epoch, "log_checked": v.log_checked, "reason": v.reason}
    return _verdict(run)


def current() -> dict[str, dict[str, Any]]:
    """Each fixture with its expectations as today's Python code computes them."""
    records = json.loads((FIXTURES / "records.json").read_text())
    for c in records["cases"]:
        c["expect"] = record_verdict(c["record"])
    status = json.loads((FIXTURES / "status.json").read_text())
    for c in status["cases"]:
        c["expect"] = status_verdict(status, c)
    return {"records.json": records, "status.json": status}


def stale() -> list[str]:
    """The cases whose stored expectation is not today's verdict."""
    out = []
    for name, doc in current().items():
        stored = json.loads((FIXTURES / name).read_text())["cases"]
        for new, old in zip(doc["cases"], stored, strict=True):
            if new["expect"] != old["expect"]:
                out.append(f"{name}: {old.get('name') or old['expect']}: stored {old['expect']}, now {new['expect']}")
    return out


if __name__ == "__main__":
    for name, doc in current().items():
        (FIXTURES / name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print("\n".join(stale()) or "the stored verdicts are today's", file=sys.stderr)

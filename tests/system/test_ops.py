"""ops/: every metric named in the alert rules and the dashboard exists on the
services' /metrics; the rules pass promtool; the systemd units pass
systemd-analyze verify."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.services import BIN, Service, log_service, registry_service, witness_service
from tests.support.tools import need

pytestmark = pytest.mark.slow
OPS = Path(__file__).resolve().parents[2] / "ops"
SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def referenced_metrics() -> set[str]:
    text = (OPS / "prometheus" / "alerts.yml").read_text()
    dash = json.loads((OPS / "grafana" / "oap-dashboard.json").read_text())
    text += "\n".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    names = set()
    for n in re.findall(r"\boap_[a-z0-9_]+", text):
        for s in SUFFIXES:
            if n.endswith(s):
                n = n[: -len(s)]
        names.add(n)
    return names


def test_every_referenced_metric_exists(tmp_path, engines):
    from tests.system.test_scaleout import Frontends

    log = log_service(tmp_path / "log").start()
    w = witness_service(tmp_path / "w", log.vkey).start()
    reg = registry_service(tmp_path / "reg", log.url).start()
    scale = Frontends(engines, tmp_path / "scale")
    frontend = scale.start("frontend")  # the scale-out metrics: integrator, lag, bucket
    (tmp_path / "monitor.toml").write_text(f'metrics = "127.0.0.1:0"\n[[logs]]\nurl = "{log.url}"\n'
                                           f'policy = "{tmp_path / "log" / "log.policy"}"\n')
    monitor = Service("monitor", [str(BIN / "oap-monitor"), "run", "--config", str(tmp_path / "monitor.toml")]).start()
    try:
        exposed = ""
        for svc in (log, w, reg, frontend, monitor):
            with urllib.request.urlopen(svc.url + "/metrics", timeout=10) as r:
                exposed += r.read().decode()
    finally:
        for svc in (monitor, reg, w, log, frontend):
            svc.kill()
    declared = set(re.findall(r"^# TYPE (oap_[a-z0-9_]+) ", exposed, re.M))
    declared |= {n[: -len("_total")] for n in declared if n.endswith("_total")}
    names = referenced_metrics()
    assert len(names) >= 25
    missing = sorted(n for n in names if n not in declared and n.removesuffix("_total") not in declared)
    assert missing == []


def test_alert_rules_pass_promtool():
    promtool = need("promtool")
    r = subprocess.run([promtool, "check", "rules", str(OPS / "prometheus" / "alerts.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    rules = sum(1 for line in (OPS / "prometheus" / "alerts.yml").read_text().splitlines()
                if line.strip().startswith("- alert:"))
    assert rules >= 20 and f"SUCCESS: {rules} rules found" in r.stdout  # promtool read every rule we wrote


@pytest.mark.parametrize("unit", ["oap-log.service", "oap-log-frontend@.service", "oap-witness@.service", "oap-mirror@.service",
                                  "oap-registry.service", "oap-monitor.service"])
def test_systemd_units_verify(tmp_path, unit):
    analyze = need("systemd-analyze")
    text = (OPS / "systemd" / unit).read_text().replace("/opt/oap/.venv/bin/", str(Path(sys.executable).parent) + "/")
    assert "ProtectSystem=strict" in text and "NoNewPrivileges=yes" in text and "CapabilityBoundingSet=\n" in text
    name = unit.replace("@.", "@1.")
    (tmp_path / name).write_text(text)
    r = subprocess.run([analyze, "verify", str(tmp_path / name)], capture_output=True, text=True)
    problems = [l for l in (r.stdout + r.stderr).splitlines() if name in l or "Failed" in l]
    assert r.returncode == 0 and problems == [], r.stdout + r.stderr

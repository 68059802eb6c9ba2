"""The README's five-minute tour and its conformance ladder run as written, against `make
run`'s local network (on free ports: the README's 8080-8090 are rewritten)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.localnet import localnet

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def tour_script() -> str:
    section = README.read_text().split("## Five-minute tour", 1)[1].split("### Anchor in two logs", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the tour is one shell block"
    return blocks[0]


def fenced(text: str) -> list[tuple[str, str]]:
    """(info string, body) of each fenced code block, in order."""
    out, info, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if info is None:
                info, body = line[3:].strip(), []
            else:
                out.append((info, "\n".join(body)))
                info = None
        elif info is not None:
            body.append(line)
    return out


def sample_output() -> tuple[str, str]:
    """Patterns of the add line and the verify line the tour says it prints. The index
    and tree size are what the log holds when it runs (the README says they vary), so
    they match any number, captured in that order."""
    section = README.read_text().split("## Five-minute tour", 1)[1].split("### Anchor in two logs", 1)[0]
    plain = [body for info, body in fenced(section) if info == ""]
    add, verify = plain[0].strip(), plain[1].strip().splitlines()[0]
    add_parts = re.split(r'(?<="index": )\d+|(?<="tree_size": )\d+', add)
    verify_parts = re.split(r"(?<=index )\d+|(?<=at size )\d+", verify)
    assert len(add_parts) == len(verify_parts) == 3, "the samples show an index and a size"
    add_pattern = r"(\d+)".join(map(re.escape, add_parts))
    verify_pattern = r"(\d+)".join(map(re.escape, verify_parts))
    # at least two of the three witnesses (w1 also by its ML-DSA-44 key), in name order
    verify_pattern = verify_pattern.replace(re.escape("w1, w1-mldsa44 (ML-DSA-44), w2, w3"),
                                            r"w[123](-mldsa44 \(ML-DSA-44\))?(, w[123](-mldsa44 \(ML-DSA-44\))?)+")
    verify_pattern = verify_pattern.replace(re.escape("z6Mk..."), r"z6Mk\w+")
    return add_pattern, verify_pattern


def ladder_script() -> tuple[str, list[str]]:
    """The ladder's shell block, and the lines it says it prints."""
    section = README.read_text().split("### Climb the conformance ladder", 1)[1].split("\n### ", 1)[0]
    blocks = fenced(section)
    assert [info for info, _ in blocks] == ["sh", ""], "the ladder is one shell block, then its sample output"
    return blocks[0][1] + "\n", blocks[1][1].splitlines()


def python_example() -> str:
    section = README.read_text().split("### From Python", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def ports(script: str, base: int) -> str:
    for old, new in (("8090", base + 9), ("8080", base), ("8081", base + 1), ("8082", base + 2), ("8083", base + 3),
                     ("8084", base + 4), ("8088", base + 8)):
        script = script.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}").replace(f"%3A{old}", f"%3A{new}")
    return script


def test_readme_tour_runs_as_written_twice_in_a_scratch_directory(tmp_path):
    """A fake checkout (`.venv/bin` and `data/` as `make run` leaves them) runs the tour
    from its top directory; the tour's files go to a scratch directory each time."""
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    (repo / ".venv").mkdir(parents=True)
    (repo / ".venv" / "bin").symlink_to(BIN)
    scratch.mkdir()
    with localnet("./data", cwd=repo) as net:
        base = net.base
        before = sorted(p.name for p in repo.iterdir())
        script = ports(tour_script(), base)
        env = {**os.environ, "OAP_LOG_URL": net.log, "OAP_REGISTRY_URL": net.registry, "TMPDIR": str(scratch),
               "PATH": "/usr/bin:/bin"}
        add_pattern, verify_pattern = sample_output()
        outputs = []
        for _ in range(2):
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=repo, env=env,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            outputs.append(r.stdout + r.stderr)
        _first, _second = outputs
        # each run prints what the README shows, with the index and size the log had then
        indices = []
        for out in outputs:
            added = re.search(add_pattern, out)
            assert added, out[:2000]
            index, size = int(added.group(1)), int(added.group(2))
            assert 0 <= index < size
            verified = re.search(verify_pattern, out)
            assert verified, out[:3000]
            assert (int(verified.group(1)), int(verified.group(2))) == (index, size)
            assert out.count("1 verified, 0 failed") == 3  # step 3's two bundles, and step 8's alert
            # step 8: the monitor of `make run` alerted to the thief's entry only, and said how to check it
            assert out.count("(watched); check it with: oap-log verify") == 1, out[-3000:]
            indices.append(index)
        assert indices[1] > indices[0]  # run again: new entries
        # nothing left in the checkout; each run had its own scratch directory
        assert sorted(p.name for p in repo.iterdir()) == before
        runs = [d for d in scratch.iterdir() if d.is_dir()]
        assert len(runs) == 2
        alerts = [json.loads(line) for line in (repo / "data" / "monitor" / "alerts.jsonl").read_text().splitlines()]
        for d in runs:
            me = (d / "watched.key.did").read_text().strip()
            theirs = [a for a in alerts if a["kind"] == "watched_entry" and a["evidence"]["signer"] == me]
            # one alert, the thief's entry; the owner's (anchored with --journal) is none
            stolen = int(re.search(r"^index (\d+)$", (d / "stolen.tlog-proof").read_text(), re.M).group(1))
            assert [a["evidence"]["index"] for a in theirs] == [stolen], alerts
            assert (d / "privileged.tlog-proof.salt.json").exists()
            assert '"revoked"' in (d / "status.json").read_text()
            assert (d / "registry-clone" / ".git").exists()

        # the conformance ladder, as written: a newcomer climbs L0 -> L5 through the CLIs
        ladder, sample = ladder_script()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", ports(ladder, base)], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        signed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"witness"')]
        assert [w["signed_as"] for w in signed] == [
            f"did:web:witness-{i}.localhost%3A{base + 8}#key-1" for i in (1, 1, 2, 3)], r.stdout
        assert [w["witness"] for w in signed] == [f"http://127.0.0.1:{base + i}" for i in (1, 1, 2, 3)]
        assert json.loads(sample[0]).keys() == signed[0].keys()
        registered = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"type": "conformance"')]
        assert [x["status"] for x in registered] == ["good"] * 6, r.stdout
        assert sample[1].split("urn:")[0] + "urn:oap:conformance:" + registered[-1]["id"].split(":", 3)[3] \
            in r.stdout, r.stdout[-2000:]
        assert sorted(p.name for p in repo.iterdir()) == before

        # the Python example, as written, from the checkout
        r = subprocess.run([sys.executable, "-c", ports(python_example(), base)], cwd=repo,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        index, size = map(int, r.stdout.split())
        assert 0 <= index < size

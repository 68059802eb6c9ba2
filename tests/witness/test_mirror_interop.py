"""The mirror against implementations that are not ours: Go's golang.org/x/mod/sumdb/tlog client
verifies the copy from its tiles alone (and the mirror's cosignature, from the spec's
message format), and the mirror follows a log written by Go's sumdb/tlog and sumdb/note."""
from __future__ import annotations

import subprocess

import pytest

from tlog.formats.keys import Signer, parse_vkey
from tlog.formats.note import open_note
from tlog.formats.tiles import entries_for_size, tiles_for_size

from tests.support.mirror import BIN, EntryLog, cosigner, cosigner_key, http, mirror_service, origin_hash
from tests.support.staticlog import serve_directory

pytestmark = pytest.mark.slow

OCTETS = {"Content-Type": "application/octet-stream"}


def test_go_verifies_the_copy_from_the_mirror_tiles_alone(go_tlogverify, started, tmp_path):
    lg = EntryLog().grow(70_000 // 100)  # 700 entries: two full bundles and a partial one
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    prefix = f"{m.url}/{origin_hash(lg.origin)}"
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 700))[0] == 200
    assert http(m.url + "/add-entries", lg.body(0, 700), OCTETS)[0] == 200
    out = subprocess.run([str(go_tlogverify), prefix, lg.vkey, "50", cosigner().vkey], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("OK size=700 checked=50 cosigned="), out.stdout + out.stderr
    # and it fails for a cosigner the checkpoint does not carry
    other = Signer("other-mirror.example", bytes(32)).vkey
    out = subprocess.run([str(go_tlogverify), prefix, lg.vkey, "1", other], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1 and "no cosignature" in out.stderr


def test_the_mirror_follows_a_log_written_by_go(go_tlogwrite, go_tlogverify, started, tmp_path):
    signer = Signer("go.example/sumdb-written-log", bytes(range(7, 39)))
    log_dir = tmp_path / "golog"
    out = subprocess.run([str(go_tlogwrite), str(log_dir), signer.to_skey(), "700"], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout == "OK size=700\n", out.stderr
    with serve_directory(log_dir) as url:
        m = started(mirror_service(tmp_path / "m", [(signer.name, signer.vkey, url)]))
        prefix = f"{m.url}/{origin_hash(signer.name)}"
        for sizes, size in ((["700"], 700), (["700", "1000", "70000"], 70_000)):
            out = subprocess.run([str(go_tlogwrite), str(log_dir), signer.to_skey(), *sizes], capture_output=True,
                                 text=True, timeout=300)
            assert out.returncode == 0, out.stderr
            follow = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once",
                                     "--log-key", signer.vkey, "--mirror-key", cosigner().vkey],
                                    capture_output=True, text=True, timeout=600)
            assert follow.returncode == 0 and f"cosigned size {size}" in follow.stdout, follow.stdout + follow.stderr
            _status, _, note = http(prefix + "/checkpoint")
            open_note(note, [parse_vkey(signer.vkey)])  # Go's signature, verified here
            open_note(note, [cosigner_key()])
            # the copy holds Go's bytes: every bundle and tile of the tree, as Go wrote them
            for t in (tiles_for_size(size) + entries_for_size(size))[-300:]:
                assert http(f"{prefix}/{t.path}")[2] == (log_dir / t.path).read_bytes(), t.path
            check = subprocess.run([str(go_tlogverify), prefix, signer.vkey, "20", cosigner().vkey],
                                   capture_output=True, text=True, timeout=300)
            assert check.returncode == 0 and check.stdout.startswith(f"OK size={size} "), check.stdout + check.stderr

"""A mirror that also publishes its copy to an S3-compatible bucket (SeaweedFS, started here):
readers and Go's sumdb/tlog client verify the copy from the bucket alone, anonymously."""
from __future__ import annotations

import gzip
import subprocess

import pytest

from tlog.formats.tiles import entries_for_size, tiles_for_size

from tests.support.mirror import EntryLog, cosigner, http, mirror_service, origin_hash, wait_for

pytestmark = pytest.mark.slow

OCTETS = {"Content-Type": "application/octet-stream"}


def decoded(url: str) -> bytes:
    """An object of the bucket as a reader gets it: entry bundles may be stored gzip-compressed
    (Content-Encoding: gzip, sent with no negotiation, as tlog-tiles allows)."""
    status, headers, body = http(url)
    assert status == 200, url
    return gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body


def test_the_bucket_serves_the_copy_with_no_mirror_running(engines, started, tmp_path, go_tlogverify):
    url = engines.bucket()
    lg = EntryLog().grow(1100)
    settings = f'bucket_url = "{url}"\nbucket_credentials_file = "{engines.creds}"\n'
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")], settings=settings))
    prefix = f"{url}/{origin_hash(lg.origin)}"
    size = 0
    for new in (300, 700, 1100):  # each cosigned size is published with its partial tiles
        assert http(m.url + "/add-checkpoint", lg.add_checkpoint(size, new))[0] == 200
        assert http(m.url + "/add-entries", lg.body(size, new), OCTETS)[0] == 200
        size = new
        wait_for("the bucket's checkpoint", lambda s=size: (r := http(prefix + "/checkpoint"))[0] == 200
                 and r[2].split(b"\n")[1] == str(s).encode(), timeout=60, every=0.1)
    mirrored = {t.path: http(f"{m.url}/{origin_hash(lg.origin)}/{t.path}")[2]
                for t in tiles_for_size(size) + entries_for_size(size)}
    m.stop()
    for path, data in mirrored.items():
        assert decoded(f"{prefix}/{path}") == data, path  # anonymous, as any static reader
    out = subprocess.run([str(go_tlogverify), prefix, lg.vkey, "30", cosigner().vkey], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("OK size=1100 checked=30 cosigned="), out.stdout + out.stderr
    # a second mirror process resumes from the bucket's checkpoint and keeps publishing
    m2 = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")], settings=settings))
    lg.grow(200)
    assert http(m2.url + "/add-checkpoint", lg.add_checkpoint(1100, 1300))[0] == 200
    assert http(m2.url + "/add-entries", lg.body(1100, 1300), OCTETS)[0] == 200
    wait_for("the bucket's checkpoint", lambda: http(prefix + "/checkpoint")[2].split(b"\n")[1] == b"1300",
             timeout=60, every=0.1)
    for t in (tiles_for_size(1300) + entries_for_size(1300)):
        assert decoded(f"{prefix}/{t.path}") == http(f"{m2.url}/{origin_hash(lg.origin)}/{t.path}")[2], t.path

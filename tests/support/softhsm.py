"""A real SoftHSM2 token store for the PKCS#11 tests: Debian's libsofthsm2.so and softhsm2-util,
unpacked into .venv/softhsm by `make tools`, and a softhsm2.conf pointing at a token directory
under the test's tmp dir (SOFTHSM2_CONF, set for this process and the processes it starts).

SoftHSM2 reads its configuration once, when the library is initialized in a process, so one
`SoftHSM` serves a whole test process: every token it will need is made before the first key
is opened."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

ROOT = Path(sys.executable).parent.parent / "softhsm"
PIN, SO_PIN = "1234-softhsm", "5678-softhsm"


def library() -> Path | None:
    found = sorted(ROOT.glob("usr/lib/*/softhsm/libsofthsm2.so")) + sorted(ROOT.glob("usr/lib/softhsm/libsofthsm2.so"))
    return found[0] if found else None


def util() -> Path | None:
    path = ROOT / "usr/bin/softhsm2-util"
    return path if path.exists() else None


class SoftHSM:
    def __init__(self, root: Path, tokens: tuple[str, ...]) -> None:
        lib, tool = library(), util()
        assert lib is not None and tool is not None, "SoftHSM2 is not unpacked in .venv/softhsm (make tools)"
        self.lib, self.tool, self.root = lib, tool, root
        (root / "tokens").mkdir(parents=True, exist_ok=True)
        self.conf = root / "softhsm2.conf"
        self.conf.write_text(f"directories.tokendir = {root / 'tokens'}\nobjectstore.backend = file\n"
                             "log.level = ERROR\nslots.removable = false\n")
        os.environ["SOFTHSM2_CONF"] = str(self.conf)
        self.pin_file = root / "user.pin"
        self.pin_file.write_text(PIN + "\n")
        self.pin_file.chmod(0o600)
        for label in tokens:
            subprocess.run([str(tool), "--module", str(lib), "--init-token", "--free", "--label", label,
                            "--pin", PIN, "--so-pin", SO_PIN], check=True, capture_output=True, timeout=60)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process that opens keys in these tokens."""
        return {**os.environ, "SOFTHSM2_CONF": str(self.conf)}

    def uri(self, token: str, obj: str, *, pin_file: Path | None = None, module: bool = True) -> str:
        """pkcs11:token=<token>;object=<obj>?module-path=<libsofthsm2.so>&pin-source=file:<pin file>."""
        query = []
        if module:
            query.append(f"module-path={quote(str(self.lib))}")
        query.append(f"pin-source=file:{quote(str(pin_file or self.pin_file))}")
        return f"pkcs11:token={quote(token)};object={quote(obj)}?" + "&".join(query)

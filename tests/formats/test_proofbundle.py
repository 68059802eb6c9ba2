"""tlog-proof bundles: spec vectors V12, reject cases and round-trip properties."""
from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import FormatError
from tlog.formats.encoding import b64dec
from tlog.formats.hashing import node_hash
from tlog.formats.proofbundle import HEADER, ProofBundle, parse_proof_bundle

H1 = "rzFuy5Go7nrpkhBwKy1HWPMM3eO/YePY54fXRoH5Cm4="
H2 = "5784L25ZFbP4hhm4ZiI+vx1RxMUyHMzeLp/3AKMlkIY="

V12_ACCEPT_1 = f"c2sp.org/tlog-proof@v1\nindex 5\n{H1}\n{H2}\n\ntest checkpoint\n"
V12_ACCEPT_2 = f"c2sp.org/tlog-proof@v1\nextra ZXh0cmEgaW5mb3JtYXRpb24=\nindex 10\n{H1}\n\ncheckpoint data\n"
V12_ACCEPT_3 = "c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n"

V4_ORIGIN = "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562"
V4_CP5 = (
    f"{V4_ORIGIN}\n5\nQrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=\n\n"
    f"— {V4_ORIGIN} UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww=\n"
)
V12_VERIFIABLE = (
    "c2sp.org/tlog-proof@v1\nindex 1\n"
    "KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
    "+fUDV+k970B4I3uKrqJM4aP1lloPZP8mvr2Z4wRw2LI=\n"
    "KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n" + V4_CP5
)


def test_v12_accept_two_hashes() -> None:
    b = parse_proof_bundle(V12_ACCEPT_1)
    assert b.index == 5 and b.extra is None
    assert b.proof == (b64dec(H1), b64dec(H2))
    assert b.checkpoint == "test checkpoint\n"
    assert b.to_text() == V12_ACCEPT_1


def test_v12_accept_extra() -> None:
    b = parse_proof_bundle(V12_ACCEPT_2)
    assert b.extra == b"extra information"
    assert b.index == 10 and b.proof == (b64dec(H1),)
    assert b.checkpoint == "checkpoint data\n"
    assert b.to_text() == V12_ACCEPT_2


def test_v12_accept_empty_proof() -> None:
    b = parse_proof_bundle(V12_ACCEPT_3)
    assert b == ProofBundle(index=0, proof=(), checkpoint="checkpoint\n")
    assert b.to_text() == V12_ACCEPT_3


def test_v12_verifiable_bundle_parses() -> None:
    b = parse_proof_bundle(V12_VERIFIABLE)
    assert b.index == 1 and len(b.proof) == 3 and b.extra is None
    assert b.checkpoint == V4_CP5
    assert b.to_text() == V12_VERIFIABLE
    assert parse_proof_bundle(V12_VERIFIABLE.encode()) == b
    # sanity of the vector itself: the path recomputes the size-5 root
    leaf = b64dec("KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    root = node_hash(node_hash(node_hash(b.proof[0], leaf), b.proof[1]), b.proof[2])
    assert base64.b64encode(root).decode() == V4_CP5.split("\n")[2]


HASH64 = base64.b64encode(bytes(range(64))).decode()

REJECT = [
    "wrong-header\nindex 0\n\ncheckpoint\n",                             # V12
    "c2sp.org/tlog-proof@v1\nextra !!notbase64!!\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\n\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex notanumber\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex -5\n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex 0\n{HASH64}\n\ncheckpoint\n",
    # more malformations
    "c2sp.org/tlog-proof@v1 \nindex 0\n\ncheckpoint\n",
    "C2SP.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v2\nindex 0\n\ncheckpoint\n",
    "\nc2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\r\nindex 0\r\n\r\ncheckpoint\r\n",
    "c2sp.org/tlog-proof@v1\nindex 05\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 00\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex +5\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex  5\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 5 \n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex \n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex \u0665\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 1_0\n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex {1 << 63}\n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex {'9' * 5000}\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nextra \nindex 0\n\ncheckpoint\n",          # empty extra
    "c2sp.org/tlog-proof@v1\nextra ZXh0cmF=\nindex 0\n\ncheckpoint\n",  # non-canonical base64
    "c2sp.org/tlog-proof@v1\nextra ZXh0cmE\nindex 0\n\ncheckpoint\n",   # no padding
    "c2sp.org/tlog-proof@v1\nextra  ZXh0cmE=\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nextra ZXh0cmE=\nextra ZXh0cmE=\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 0\nextra ZXh0cmE=\n\ncheckpoint\n",  # wrong order
    "c2sp.org/tlog-proof@v1\nindex 0\nindex 0\n\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 0\n",                                # no blank line
    "c2sp.org/tlog-proof@v1\nindex 0\n\n",                              # no checkpoint
    "c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint",                    # no final newline
    "c2sp.org/tlog-proof@v1\nindex 0\n\n\ncheckpoint\n",                # empty origin
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1}",
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1}\n",
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1[:-4]}\n\ncheckpoint\n",       # 30 bytes
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1} \n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex 0\n {H1}\n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1.replace('=', '')}\n\ncheckpoint\n",
    f"c2sp.org/tlog-proof@v1\nindex 0\n{H1}\n \ncheckpoint\n",
    "c2sp.org/tlog-proof@v1\nindex 0\n" + f"{H1}\n" * 64 + "\ncheckpoint\n",
    "c2sp.org/tlog-proof@v1",
    "",
]


@pytest.mark.parametrize("text", REJECT)
def test_rejects(text: str) -> None:
    with pytest.raises(FormatError):
        parse_proof_bundle(text)
    with pytest.raises(FormatError):
        parse_proof_bundle(text.encode())


def test_63_hashes_is_the_maximum() -> None:
    text = "c2sp.org/tlog-proof@v1\nindex 0\n" + f"{H1}\n" * 63 + "\ncheckpoint\n"
    b = parse_proof_bundle(text)
    assert len(b.proof) == 63 and b.to_text() == text


def test_max_index() -> None:
    text = f"c2sp.org/tlog-proof@v1\nindex {(1 << 63) - 1}\n\ncp\n"
    assert parse_proof_bundle(text).index == (1 << 63) - 1


def test_rejects_bad_utf8_and_oversize() -> None:
    with pytest.raises(FormatError, match="UTF-8"):
        parse_proof_bundle(V12_ACCEPT_3.encode() + b"\xff\n")
    with pytest.raises(FormatError, match="UTF-8"):
        parse_proof_bundle(V12_ACCEPT_3[:-1] + "\udc80\n")
    big = V12_ACCEPT_3 + "x" * (1 << 20) + "\n"
    with pytest.raises(FormatError, match="1 MiB"):
        parse_proof_bundle(big)
    with pytest.raises(FormatError, match="1 MiB"):
        parse_proof_bundle(big.encode())
    # multi-byte characters count as bytes, not characters
    wide = V12_ACCEPT_3 + "—" * ((1 << 20) // 3) + "\n"
    assert len(wide) < 1 << 20
    with pytest.raises(FormatError, match="1 MiB"):
        parse_proof_bundle(wide)
    with pytest.raises(FormatError):
        parse_proof_bundle(12)  # type: ignore[arg-type]


def test_checkpoint_is_verbatim() -> None:
    cp = "origin\n7\nroot\n\n— origin c2lnbmF0dXJl\n— witness d2l0bmVzcw==\n"
    b = parse_proof_bundle(f"{HEADER}\nindex 3\n\n{cp}")
    assert b.checkpoint == cp  # blank line inside the note is kept


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(index=-1, proof=(), checkpoint="c\n"),
        dict(index=1 << 63, proof=(), checkpoint="c\n"),
        dict(index=0, proof=(b"\x00" * 31,), checkpoint="c\n"),
        dict(index=0, proof=(b"\x00" * 32,) * 64, checkpoint="c\n"),
        dict(index=0, proof=(), checkpoint="c"),
        dict(index=0, proof=(), checkpoint=""),
        dict(index=0, proof=(), checkpoint="\nc\n"),
        dict(index=0, proof=(), checkpoint="c\n", extra=b""),
        # malformed types: each used to build a bundle that could not be written or read back
        dict(index=True, proof=(), checkpoint="c\n"),
        dict(index=1.0, proof=(), checkpoint="c\n"),
        dict(index=0, proof=("x" * 32,), checkpoint="c\n"),
        dict(index=0, proof=[b"\x00" * 32], checkpoint="c\n"),
        dict(index=0, proof=(), checkpoint=b"c\n"),
        dict(index=0, proof=(), checkpoint="c\n", extra="entry"),
    ],
)
def test_constructor_rejects_unserialisable(kwargs: dict) -> None:
    """With the project's error type (a bundle's fields often come from a server's answer)."""
    with pytest.raises(FormatError):
        ProofBundle(**kwargs)


# --- properties -------------------------------------------------------------

_line = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), min_size=1, max_size=40)
_checkpoint = st.builds(
    lambda first, rest: first + "\n" + "".join(r + "\n" for r in rest),
    _line,
    st.lists(st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=40), max_size=6),
)
bundles = st.builds(
    ProofBundle,
    index=st.integers(min_value=0, max_value=(1 << 63) - 1),
    proof=st.lists(st.binary(min_size=32, max_size=32), max_size=63).map(tuple),
    checkpoint=_checkpoint,
    extra=st.none() | st.binary(min_size=1, max_size=100),
)


@given(bundles)
def test_round_trip_bundle(b: ProofBundle) -> None:
    text = b.to_text()
    assert parse_proof_bundle(text) == b
    assert parse_proof_bundle(text.encode()) == b
    assert parse_proof_bundle(text).to_text() == text


@settings(max_examples=300)
@given(st.one_of(st.text(), st.binary(), st.text().map(lambda s: f"{HEADER}\n{s}"),
                 st.text(alphabet="c2sp.org/tlog-proof@v1\nindexra 0123456789=+AB") ))
def test_arbitrary_input_only_format_error(text: str | bytes) -> None:
    try:
        b = parse_proof_bundle(text)
    except FormatError:
        return
    src = text.decode() if isinstance(text, bytes) else text
    assert b.to_text() == src  # accepted text round-trips exactly


@settings(max_examples=300)
@given(bundles, st.data())
def test_mutated_bundles_only_format_error(b: ProofBundle, data: st.DataObject) -> None:
    text = b.to_text()
    i = data.draw(st.integers(min_value=0, max_value=len(text)))
    j = data.draw(st.integers(min_value=i, max_value=min(len(text), i + 3)))
    junk = data.draw(st.text(alphabet="\n =+/Aa0-\r", max_size=3))
    mutated = text[:i] + junk + text[j:]
    try:
        got = parse_proof_bundle(mutated)
    except FormatError:
        return
    assert got.to_text() == mutated

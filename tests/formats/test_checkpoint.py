"""C2SP tlog-checkpoint v1.0.0 parsing (vectors V3-V6, V13) and the cosignature/v1 message (C2SP tlog-cosignature)."""
from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tlog.errors import FormatError
from tlog.formats.checkpoint import (
    MAX_TREE_SIZE,
    Checkpoint,
    cosignature_message,
    parse_checkpoint,
)
from tlog.formats.hashing import EMPTY_ROOT

ROOT = "vt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ="
V3_TEXT = f"go.sum database tree\n35225469\n{ROOT}\n"
V4_ORIGIN = "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562"
V4_CP1 = f"{V4_ORIGIN}\n1\nKgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"


def test_v3_real_checkpoint_parses_and_round_trips() -> None:
    cp = parse_checkpoint(V3_TEXT)
    assert cp.origin == "go.sum database tree"
    assert cp.size == 35225469
    assert cp.root == base64.b64decode(ROOT)
    assert cp.extensions == ()
    assert cp.to_text() == V3_TEXT


def test_v4_v5_v6_checkpoints() -> None:
    cp = parse_checkpoint(V4_CP1)
    assert (cp.origin, cp.size, cp.root) == (V4_ORIGIN, 1, bytes([0x2A]) + bytes(31))
    v5 = parse_checkpoint(
        "transparency.dev/armored-witness/firmware_transparency/ci/3\n59\n"
        "kOFMkeamIdrYFLx5zbWFhflak6dlEEDOU++fxYEZMBw=\n"
    )
    assert v5.size == 59
    v6 = parse_checkpoint(
        "developers.google.com/android/binary_transparency/0\n611\n"
        "2GZ1zmS5VkfUZmn2ZyR4KZXwHLD+xnwBIWzql/cD50w=\n"
    )
    assert v6.origin == "developers.google.com/android/binary_transparency/0"


def test_bytes_input_and_extensions_round_trip() -> None:
    text = f"example.com/log\n0\n{base64.b64encode(EMPTY_ROOT).decode()}\next one\n— ext two\n"
    cp = parse_checkpoint(text.encode())
    assert cp.size == 0 and cp.root == EMPTY_ROOT
    assert cp.extensions == ("ext one", "— ext two")
    assert cp.to_text() == text


@pytest.mark.parametrize(
    "text",
    [
        "Log\n123\nYmFuYW5hcw==\n",  # V13: 7-byte hash
        f"\n9944\n{ROOT}\n",  # V13: empty origin
        f"Log\n-34\n{ROOT}\n",  # V13: negative size
        f"Log\n+34\n{ROOT}\n",
        f"Log\n034\n{ROOT}\n",  # leading zero
        f"Log\n00\n{ROOT}\n",
        f"Log\n 34\n{ROOT}\n",
        f"Log\n34 \n{ROOT}\n",
        f"Log\n3_4\n{ROOT}\n",
        f"Log\n0x10\n{ROOT}\n",
        f"Log\n\u0663\u0664\n{ROOT}\n",  # Arabic-Indic digits: int() would accept them
        f"Log\n\n{ROOT}\n",
        f"Log\n{2**64}\n{ROOT}\n",  # over uint64
        f"Log\n{'9' * 5000}\n{ROOT}\n",  # over Python's int-conversion limit
        f"Log\n34\n{ROOT}",  # no final newline
        f"Log\n34\n{ROOT}\n\n",  # empty extension line
        f"Log\n34\n{ROOT}\n\nx\n",
        "Log\n34\n",  # too few lines
        "",
        "\n",
        f"Log\n34\n{ROOT[:-1]}\n",  # bad base64 length
        f"Log\n34\n{ROOT[:-2]}R=\n",  # non-canonical base64 (another spelling of a root)
        f"Log\n34\n{base64.b64encode(bytes(33)).decode()}\n",
        f"Log\n34\n{base64.b64encode(bytes(31)).decode()}\n",
        f"Log\n34\n {ROOT}\n",
        f"Lo\tg\n34\n{ROOT}\n",  # control character
        f"Log\r\n34\n{ROOT}\n",
        "x" * 256 + f"\n1\n{ROOT}\n",  # V13: 256-byte origin
        "é" * 128 + f"\n1\n{ROOT}\n",  # 128 characters but 256 bytes
    ],
)
def test_rejects(text: str) -> None:
    with pytest.raises(FormatError):
        parse_checkpoint(text)


def test_rejects_invalid_utf8_bytes() -> None:
    with pytest.raises(FormatError):
        parse_checkpoint(b"Lo\xffg\n1\n" + ROOT.encode() + b"\n")


@pytest.mark.parametrize("origin", ["x", "x" * 255, "é" * 127 + "x", "go.sum database tree"])
def test_origin_of_1_to_255_bytes_accepted(origin: str) -> None:
    assert parse_checkpoint(f"{origin}\n1\n{ROOT}\n").origin == origin


def test_largest_uint64_size_accepted() -> None:
    assert parse_checkpoint(f"Log\n{MAX_TREE_SIZE}\n{ROOT}\n").size == 2**64 - 1


@pytest.mark.parametrize(
    "args",
    [
        ("", 1, EMPTY_ROOT),
        ("a\nb", 1, EMPTY_ROOT),
        ("log", -1, EMPTY_ROOT),
        ("log", 2**64, EMPTY_ROOT),
        ("log", True, EMPTY_ROOT),
        ("log", 1, EMPTY_ROOT[:31]),
        ("log", 1, EMPTY_ROOT, ("",)),
        ("log", 1, EMPTY_ROOT, ["list"]),
        ("x" * 256, 1, EMPTY_ROOT),
    ],
)
def test_constructor_refuses_what_would_not_parse(args: tuple) -> None:
    with pytest.raises(FormatError):
        Checkpoint(*args)


def test_cosignature_message_exact_bytes() -> None:
    # C2SP tlog-cosignature: header line, time line, then the full checkpoint text.
    msg = cosignature_message(V4_CP1, 1700000000)
    assert msg == b"cosignature/v1\ntime 1700000000\n" + V4_CP1.encode()
    assert cosignature_message(V4_CP1.encode(), 0).startswith(b"cosignature/v1\ntime 0\n")


@pytest.mark.parametrize("ts", [-1, 2**63, True, 1.0])
def test_cosignature_message_timestamp_range(ts: object) -> None:
    with pytest.raises(FormatError):
        cosignature_message(V4_CP1, ts)  # type: ignore[arg-type]


def test_cosignature_message_needs_final_newline() -> None:
    with pytest.raises(FormatError):
        cosignature_message(V4_CP1[:-1], 1)


# --- properties -------------------------------------------------------------

_line_chars = st.characters(blacklist_categories=("Cs", "Cc"))
checkpoints = st.builds(
    Checkpoint,
    origin=st.text(_line_chars, min_size=1, max_size=60),
    size=st.integers(0, MAX_TREE_SIZE),
    root=st.binary(min_size=32, max_size=32),
    extensions=st.lists(st.text(_line_chars, min_size=1, max_size=20), max_size=3).map(tuple),
)


@given(checkpoints)
def test_round_trip(cp: Checkpoint) -> None:
    assert parse_checkpoint(cp.to_text()) == cp
    assert parse_checkpoint(cp.to_text().encode()) == cp


@given(st.text())
def test_arbitrary_text_raises_only_format_error(text: str) -> None:
    try:
        parse_checkpoint(text)
    except FormatError:
        pass


@given(st.binary())
def test_arbitrary_bytes_raise_only_format_error(data: bytes) -> None:
    try:
        parse_checkpoint(data)
    except FormatError:
        pass


@given(
    st.lists(
        st.one_of(st.sampled_from(["Log", "0", "1", "01", "-1", ROOT, "", "é" * 200]), st.text(max_size=50)),
        max_size=6,
    ),
    st.booleans(),
)
def test_near_valid_text_raises_only_format_error(lines: list[str], final_newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    try:
        cp = parse_checkpoint(text)
    except FormatError:
        return
    assert cp.to_text() == text  # whatever parses has exactly one spelling

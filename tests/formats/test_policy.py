"""tlog-policy: parsing, rejects with line numbers, quorum evaluation, round trips."""
from __future__ import annotations

import hashlib
import re
from itertools import chain, combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import FormatError
from tlog.formats.did import did_key_from_public
from tlog.formats.encoding import b64enc
from tlog.formats.policy import Policy, PolicyGroup, PolicyLog, PolicyRegistry, PolicyWitness, parse_policy

# V5 real keys; the 0x04 form wraps the same Ed25519 key as the 0x01 form.
LOG = "transparency.dev-aw-ftlog-ci-3+3f689522+Aa1Eifq6rRC8qiK+bya07yV1fXyP156pEMsX7CFBC6gg"
RAIN = "ArmoredWitness-weathered-rain+ea3d386d+AWLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S"
RAIN04 = "ArmoredWitness-weathered-rain+0a78df20+BGLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S"
SKY = "ArmoredWitness-floral-sky+504ec40f+AekCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm"


def vk(name: str, seed: int, typ: int = 1) -> str:
    """A well-formed synthetic vkey with a distinct key per seed."""
    pub = hashlib.sha256(seed.to_bytes(8, "big")).digest()
    kid = hashlib.sha256(name.encode() + b"\n" + bytes([typ]) + pub).digest()[:4]
    return f"{name}+{kid.hex()}+{b64enc(bytes([typ]) + pub)}"


SPEC_EXAMPLE = "\n".join(
    [
        f"log {LOG}",
        "",
        *(f"witness X{i} {vk(f'x{i}', i)}" for i in (1, 2, 3)),
        "group X-witnesses 2 X1 X2 X3",
        "",
        *(f"witness Y{i} {vk(f'y{i}', 10 + i)}" for i in (1, 2, 3)),
        "group Y-witnesses any Y1 Y2 Y3",
        "",
        "group X-and-Y all X-witnesses Y-witnesses",
        "quorum X-and-Y",
    ]
) + "\n"


def test_spec_example_parses() -> None:
    p = parse_policy(SPEC_EXAMPLE)
    assert p.logs == (PolicyLog(LOG, None),)
    assert list(p.witnesses) == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert p.groups["X-witnesses"] == PolicyGroup("X-witnesses", 2, ("X1", "X2", "X3"))
    assert p.groups["Y-witnesses"].threshold == 1
    assert p.groups["X-and-Y"].threshold == 2
    assert p.quorum == "X-and-Y"


@pytest.mark.parametrize(
    "cosigned, met",
    [
        ({"X1", "X2", "Y3"}, True),
        ({"X1", "X3", "Y1", "Y2"}, True),
        ({"X1", "X2", "X3", "Y1", "Y2", "Y3"}, True),
        ({"X1", "Y1", "Y2", "Y3"}, False),   # only one X
        ({"X1", "X2", "X3"}, False),         # no Y
        ({"Y1", "Y2", "Y3"}, False),
        (set(), False),
        ({"X-witnesses", "Y-witnesses"}, False),  # group names do not count
        ({"X-and-Y"}, False),
        ({"X1", "X2", "Y-witnesses"}, False),
        ({"X1", "X2", "Z9", "Y2"}, True),   # unknown names ignored
    ],
)
def test_nested_groups(cosigned: set[str], met: bool) -> None:
    assert parse_policy(SPEC_EXAMPLE).quorum_met(cosigned) is met


def _policy(groups: str, quorum: str, n: int = 4) -> Policy:
    ws = "".join(f"witness w{i} {vk(f'w{i}', i)}\n" for i in range(1, n + 1))
    return parse_policy(f"log {LOG}\n{ws}{groups}quorum {quorum}\n")


def test_k_of_n() -> None:
    p = _policy("group g 3 w1 w2 w3 w4\n", "g")
    assert p.groups["g"].threshold == 3
    for subset in chain.from_iterable(combinations(["w1", "w2", "w3", "w4"], r) for r in range(5)):
        assert p.quorum_met(set(subset)) is (len(subset) >= 3), subset


def test_all_and_any() -> None:
    p_all = _policy("group g all w1 w2 w3\n", "g")
    assert p_all.quorum_met({"w1", "w2", "w3"})
    assert not p_all.quorum_met({"w1", "w2", "w4"})
    p_any = _policy("group g any w1 w2 w3\n", "g")
    assert p_any.quorum_met({"w3"})
    assert not p_any.quorum_met({"w4"})
    assert not p_any.quorum_met(set())


def test_single_witness_quorum() -> None:
    p = _policy("", "w2")
    assert p.quorum_met({"w2"}) and not p.quorum_met({"w1", "w3"})


def test_quorum_none_and_missing() -> None:
    p = _policy("group g all w1 w2\n", "none")
    assert p.quorum is None
    assert p.quorum_met(set()) and p.quorum_met({"w1"})
    # Witnesses without a quorum line are refused: silence must not mean "none".
    with pytest.raises(FormatError, match="no quorum line"):
        parse_policy(f"log {LOG}\nwitness a {RAIN}\n")
    explicit = parse_policy(f"log {LOG}\nwitness a {RAIN}\nquorum none\n")
    assert explicit.quorum is None and explicit.quorum_met(set())
    missing = parse_policy(f"log {LOG}\n")  # no witnesses: no quorum line needed
    assert missing.quorum is None and missing.to_text().endswith("quorum none\n")
    assert parse_policy("quorum none\n") == Policy((), {}, {}, None)


def test_deep_nesting_no_recursion_limit() -> None:
    lines = [f"witness w {RAIN}", "group g0 any w"]
    lines += [f"group g{i} all g{i - 1}" for i in range(1, 3000)]
    lines.append("quorum g2999")
    p = parse_policy("\n".join(lines))
    assert p.quorum_met({"w"}) and not p.quorum_met(set())


def test_whitespace_comments_and_urls() -> None:
    text = (
        "# a comment\n"
        "   # indented comment\n"
        " \t \n"
        f"\tlog  {LOG}\thttps://log.example/  \n"
        f"witness\t rain {RAIN} https://rain.example/add\n"
        f"witness sky {SKY}\n"
        "group  both \t all rain sky \n"
        "quorum both"  # no final newline
    )
    p = parse_policy(text)
    assert p.logs == (PolicyLog(LOG, "https://log.example/"),)
    assert p.witnesses["rain"] == PolicyWitness("rain", RAIN, "https://rain.example/add")
    assert p.witnesses["sky"].url is None
    assert p.quorum_met({"rain", "sky"}) and not p.quorum_met({"rain"})
    assert parse_policy(text.encode()) == p


def test_names_are_opaque() -> None:
    # "K" and the Kelvin sign are different names; no Unicode folding.
    p = parse_policy(f"witness K {RAIN}\nwitness \u212a {SKY}\ngroup g all K \u212a\nquorum g\n")
    assert set(p.witnesses) == {"K", "\u212a"}
    assert not p.quorum_met({"K"})
    # non-ASCII whitespace is part of a name, not a separator
    p2 = parse_policy(f"witness a\u00a0b {RAIN}\nquorum a\u00a0b\n")
    assert p2.quorum == "a\u00a0b"


BAD = [
    ("frobnicate x\n", 1, "unknown keyword"),
    (f"witness a {RAIN}\nwitness a {SKY}\n", 2, "defined twice"),
    (f"witness a {RAIN}\ngroup a any a\n", 2, "defined twice"),
    (f"witness none {RAIN}\n", 1, "predefined"),
    (f"witness a {RAIN}\ngroup none any a\n", 2, "predefined"),
    (f"witness a {RAIN}\ngroup g any a none\n", 2, "not defined"),
    (f"witness a {RAIN}\ngroup g any b\n", 2, "not defined"),
    (f"witness a {RAIN}\ngroup g any g\n", 2, "not defined"),                       # self cycle
    (f"witness a {RAIN}\ngroup g any a h\ngroup h any a g\n", 2, "not defined"),   # forward ref / cycle
    (f"witness a {RAIN}\ngroup g any a a\n", 2, "only once"),
    (f"witness a {RAIN}\ngroup g any\n", 2, "group"),
    (f"witness a {RAIN}\ngroup g\n", 2, "group"),
    (f"witness a {RAIN}\ngroup g 0 a\n", 2, "threshold"),
    (f"witness a {RAIN}\ngroup g 2 a\n", 2, "exceeds"),
    (f"witness a {RAIN}\ngroup g 01 a\n", 2, "threshold"),
    (f"witness a {RAIN}\ngroup g -1 a\n", 2, "threshold"),
    (f"witness a {RAIN}\ngroup g +1 a\n", 2, "threshold"),
    (f"witness a {RAIN}\ngroup g ALL a\n", 2, "threshold"),
    (f"witness a {RAIN}\ngroup g 99999999999999999999999 a\n", 2, "threshold"),
    (f"witness a {RAIN}\nquorum a\nquorum a\n", 3, "more than one quorum"),
    ("quorum a\n", 1, "not defined"),
    (f"quorum a\nwitness a {RAIN}\n", 1, "not defined"),
    ("quorum\n", 1, "quorum"),
    (f"witness a {RAIN}\nquorum a a\n", 2, "quorum"),
    (f"log {LOG} https://x extra\n", 1, "log"),
    ("log\n", 1, "log"),
    (f"witness a {RAIN} https://x extra\n", 1, "witness"),
    ("witness a\n", 1, "witness"),
    (f"log {LOG}\nlog {LOG}\n", 2, "duplicate log"),
    (f"witness a {RAIN}\nwitness b {RAIN04}\n", 2, "duplicate witness"),  # same key, other type/ID
    (f"witness a {RAIN}\nwitness b {RAIN.replace('ArmoredWitness-weathered-rain+ea3d386d', 'other+00000000')}\n", 2, "duplicate witness"),
    ("log notakey\n", 1, "vkey"),
    ("log name+1234567+AQ==\n", 1, "vkey"),
    ("log name+ABCDEF12+AQID\n", 1, "vkey"),
    ("log +12345678+AQID\n", 1, "vkey"),
    ("log name+12345678+AQ==\n", 1, "vkey"),          # type byte only
    ("log name+12345678+AQI\n", 1, "vkey"),           # unpadded base64
    (f"# ok\n\nwitness a {RAIN}\r\n", 3, "control"),
    (f"witness a\x00 {RAIN}\n", 1, "control"),
    (f"witness a\x7f {RAIN}\n", 1, "control"),
    (f"witness a\x0b {RAIN}\n", 1, "control"),
    ("# comment with \x1b escape\n", 1, "control"),
    ("Log x\n", 1, "unknown keyword"),
    ("logs x\n", 1, "expected 'logs <k>'"),
    ("nologs x\n", 1, "unknown keyword"),
    ("log " + LOG + "\nlogs 1\nlogs 1\n", 3, "more than one logs line"),
]


@pytest.mark.parametrize("text, line, what", BAD)
def test_rejects_with_line_number(text: str, line: int, what: str) -> None:
    with pytest.raises(FormatError) as e:
        parse_policy(text)
    assert f"line {line}:" in str(e.value)
    assert what in str(e.value)
    assert e.value.data["line"] == line


def test_log_and_witness_may_share_a_key() -> None:
    # The draft forbids duplicate logs and duplicate witnesses, not a key in both roles.
    p = parse_policy(f"log {RAIN}\nwitness a {RAIN04}\nquorum a\n")
    assert p.logs[0].vkey == RAIN and p.witnesses["a"].vkey == RAIN04


def test_rejects_bytes_and_size() -> None:
    with pytest.raises(FormatError, match="UTF-8"):
        parse_policy(b"quorum none\n\xff\n")
    with pytest.raises(FormatError, match="64 KiB"):
        parse_policy("#" * (64 * 1024 + 1))
    with pytest.raises(FormatError, match="64 KiB"):
        parse_policy(b"#" * (64 * 1024 + 1))
    with pytest.raises(FormatError):
        parse_policy(None)  # type: ignore[arg-type]


def test_constructor_revalidates() -> None:
    w = PolicyWitness("a", RAIN)
    with pytest.raises(FormatError, match="not defined"):
        Policy((), {"a": w}, {"g": PolicyGroup("g", 1, ("b",))}, "g")
    with pytest.raises(FormatError, match="threshold"):
        Policy((), {"a": w}, {"g": PolicyGroup("g", 2, ("a",))}, "g")
    with pytest.raises(FormatError, match="not defined"):
        Policy((), {"a": w}, {}, "b")
    with pytest.raises(FormatError, match="filed under"):
        Policy((), {"b": w}, {}, None)
    with pytest.raises(FormatError, match="duplicate log"):
        Policy((PolicyLog(LOG), PolicyLog(LOG)), {}, {}, None)
    p = Policy((), {"a": w}, {}, "a")
    with pytest.raises(TypeError):
        p.witnesses["b"] = w  # type: ignore[index]


def test_canonical_text() -> None:
    p = parse_policy(SPEC_EXAMPLE)
    text = p.to_text()
    assert "group X-witnesses 2 X1 X2 X3\n" in text
    assert "group Y-witnesses any Y1 Y2 Y3\n" in text
    assert "group X-and-Y all X-witnesses Y-witnesses\n" in text
    assert text.endswith("quorum X-and-Y\n")
    assert parse_policy(text) == p
    assert parse_policy(text).to_text() == text


# --- properties -------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    nw = draw(st.integers(min_value=0, max_value=8))
    names = [f"w{i}" for i in range(nw)]
    witnesses = {
        n: PolicyWitness(n, vk(n, i, draw(st.sampled_from([1, 4]))), draw(st.none() | st.just(f"https://{n}.example/")))
        for i, n in enumerate(names)
    }
    defined = list(names)
    groups: dict[str, PolicyGroup] = {}
    for gi in range(draw(st.integers(min_value=0, max_value=6)) if defined else 0):
        members = tuple(draw(st.lists(st.sampled_from(defined), min_size=1, max_size=len(defined), unique=True)))
        k = draw(st.integers(min_value=1, max_value=len(members)))
        groups[f"g{gi}"] = PolicyGroup(f"g{gi}", k, members)
        defined.append(f"g{gi}")
    quorum = draw(st.none() | st.sampled_from(defined)) if defined else None
    logs = tuple(PolicyLog(vk(f"log{i}", 100 + i), draw(st.none() | st.just("https://l.example/"))) for i in range(draw(st.integers(0, 3))))
    registries = tuple(PolicyRegistry(did_of(200 + i), draw(st.none() | st.just("https://r.example")))
                       for i in range(draw(st.integers(0, 2))))
    return Policy(logs, witnesses, groups, quorum, registries=registries)


def did_of(seed: int) -> str:
    return did_key_from_public(hashlib.sha256(seed.to_bytes(8, "big")).digest())


def naive_met(p: Policy, name: str | None, cosigned: set[str]) -> bool:
    """Reference: recursive definition straight from the draft."""
    if name is None:
        return True
    if name in p.witnesses:
        return name in cosigned
    g = p.groups[name]
    return sum(naive_met(p, m, cosigned) for m in g.members) >= g.threshold


@settings(max_examples=200)
@given(policies())
def test_round_trip_policy(p: Policy) -> None:
    text = p.to_text()
    q = parse_policy(text)
    assert q == p
    assert q.to_text() == text


@settings(max_examples=200)
@given(policies(), st.data())
def test_quorum_matches_naive_and_is_monotone(p: Policy, data: st.DataObject) -> None:
    universe = sorted(p.witnesses) + sorted(p.groups) + ["stranger"]
    cosigned = set(data.draw(st.lists(st.sampled_from(universe), unique=True)))
    met = p.quorum_met(cosigned)
    assert met == naive_met(p, p.quorum, cosigned & set(p.witnesses))
    assert p.quorum_met(cosigned | set(p.witnesses)) is True  # everyone cosigned
    if met:
        extra = set(data.draw(st.lists(st.sampled_from(universe), unique=True)))
        assert p.quorum_met(cosigned | extra)


_KEYS = [LOG, RAIN, SKY, vk("w", 7)]


@settings(max_examples=400)
@given(st.one_of(
    st.text(),
    st.binary(),
    st.lists(st.sampled_from(["log", "witness", "group", "quorum", "#", "a", "b", "none", "any", "all", "registry",
                               "2", "0", " ", "\t", "\n", *_KEYS, "did:key:z6MkqpHzEmf9zFzkZa4WkcN18VoaFt9VTajLCwo6sUy4UR81"])).map(" ".join),
))
def test_arbitrary_input_only_format_error(text: str | bytes) -> None:
    try:
        p = parse_policy(text)
    except FormatError:
        return
    assert parse_policy(p.to_text()) == p


def test_logs_k_demands_anchoring_in_k_logs_and_round_trips() -> None:
    """`logs <k>` (OAP-CORE-1.0 §19.3): an OAP extension; one log suffices without it."""
    other = "other.example/log+" + LOG.split("+", 1)[1].replace("Aa1E", "Ab1E")
    p = parse_policy(f"log {LOG}\nlog {other} https://other.example\nlogs 2\n")
    assert p.log_quorum == 2 and parse_policy(p.to_text()) == p and "logs 2" in p.to_text()
    assert parse_policy(f"log {LOG}\n").log_quorum == 1 and "logs" not in parse_policy(f"log {LOG}\n").to_text()
    with pytest.raises(FormatError, match="lists only 1 log"):
        parse_policy(f"log {LOG}\nlogs 2\n")
    with pytest.raises(FormatError, match="lists 1 log"):
        Policy((PolicyLog(LOG),), {}, {}, None, 3)


def test_registry_lines_pin_registry_keys_and_round_trip() -> None:
    """`registry <did:key> [<url>]`: an OAP extension pinning a registry's key beside the logs."""
    a, b = did_of(1), did_of(2)
    p = parse_policy(f"log {LOG}\nregistry {a} https://registry.example\nregistry {b}\nquorum none\n")
    assert p.registries == (PolicyRegistry(a, "https://registry.example"), PolicyRegistry(b))
    assert p.to_text() == f"log {LOG}\nregistry {a} https://registry.example\nregistry {b}\nquorum none\n"
    assert parse_policy(p.to_text()) == p and parse_policy(f"log {LOG}\n").registries == ()
    for text, why in ((f"registry {a}\nregistry {a}\n", "policy line 2: duplicate registry"),
                      ("registry did:web:registry.example\n", "policy line 1: registry 'did:web:registry.example': "
                                                               "expected an Ed25519 did:key"),
                      (f"registry {a[:-3]}\n", "policy line 1: registry"),
                      ("registry\n", "policy line 1: expected 'registry <did:key> [<url>]'"),
                      (f"registry {a} u v\n", "policy line 1: expected 'registry")):
        with pytest.raises(FormatError, match=re.escape(why)):
            parse_policy(text)
    with pytest.raises(FormatError, match="duplicate registry"):
        Policy((PolicyLog(LOG),), {}, {}, None, registries=(PolicyRegistry(a), PolicyRegistry(a, "https://x")))


# --- one cosigner, one vote (a witness with an Ed25519 and an ML-DSA-44 key) --------


def test_two_keys_of_one_cosigner_must_share_a_group_to_count():
    from tlog.formats.keys import MLDSACosigner

    pq = MLDSACosigner("w1.example", bytes(32)).vkey  # same key name as the Ed25519 line
    ed = vk("w1.example", 1)
    other = vk("w2.example", 2)
    # listed as two members of a 2-of-3 group: w1.example alone could meet it -> refused
    bad = f"log {LOG}\nwitness a {ed}\nwitness b {pq}\nwitness c {other}\ngroup g 2 a b c\nquorum g\n"
    with pytest.raises(FormatError, match="count it twice"):
        parse_policy(bad)
    # nested: the two keys reach the quorum group through two different member groups -> refused
    nested = (f"log {LOG}\nwitness a {ed}\nwitness b {pq}\nwitness c {other}\ngroup x any a c\ngroup y any b c\n"
              "group g all x y\nquorum g\n")
    with pytest.raises(FormatError, match="cosigner"):
        parse_policy(nested)
    # wrapped in one group of its own keys, the cosigner counts once
    good = f"log {LOG}\nwitness a {ed}\nwitness b {pq}\nwitness c {other}\ngroup w1 any a b\ngroup g 2 w1 c\nquorum g\n"
    p = parse_policy(good)
    assert not p.quorum_met({"a", "b"})  # both keys of one witness: one vote of the two needed
    assert p.quorum_met({"b", "c"}) and p.quorum_met({"a", "c"})
    # "all" of one cosigner's keys is allowed too (both must cosign), and a lone key as quorum
    assert parse_policy(f"log {LOG}\nwitness a {ed}\nwitness b {pq}\ngroup w1 all a b\nquorum w1\n").quorum_met({"a", "b"})
    assert parse_policy(f"log {LOG}\nwitness b {pq}\nquorum b\n").quorum_met({"b"})


def test_one_key_in_two_nested_groups_counts_for_each_as_the_draft_defines():
    """A group is met when k of its members are (tlog-policy): "2 of the EU witnesses and 3
    overall" shares members between groups, and one EU witness counts in both. Other
    verifiers (Sigsum's) accept such policies; only two keys of one cosigner are refused."""
    ws = "".join(f"witness w{i} {vk(f'w{i}.example', i)}\n" for i in range(1, 6))
    p = parse_policy(f"log {LOG}\n{ws}group eu 2 w1 w2 w3\ngroup all5 3 w1 w2 w3 w4 w5\n"
                     "group q all eu all5\nquorum q\n")
    assert p.quorum_met({"w1", "w2", "w4"})  # 2 EU, 3 in all
    assert not p.quorum_met({"w1", "w4", "w5"})  # 3 in all, 1 EU
    assert not p.quorum_met({"w1", "w2"})  # 2 EU, 2 in all
    # the module doc's example: a alone meets q, as written
    nested = parse_policy(f"log {LOG}\n{ws}group g1 any w1 w2\ngroup g2 any w1 w3\ngroup q all g1 g2\nquorum q\n")
    assert nested.quorum_met({"w1"}) and not nested.quorum_met({"w2"})

"""The one JSON body reader (apps.core.body): each refusal's code and field path. Pure, no database."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.core import body
from apps.core.body import read_json, text_problem
from apps.core.errors import ForestError

LIMIT = 1 << 20


def _refusal(raw) -> tuple[str, str | None, int]:
    with pytest.raises(ForestError) as exc:
        read_json(raw, max_bytes=LIMIT)
    return exc.value.code, exc.value.field, exc.value.status


@pytest.mark.parametrize(("raw", "code", "field"), [
    (b"[" * 10_000 + b"]" * 10_000, "nesting_too_deep", None),
    (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "nesting_too_deep", None),
    (b"[" * 65 + b"]" * 65, "nesting_too_deep", None),
    (b'{"a": {"b": 1, "b": 2}}', "duplicate_key", "a.b"),
    (b'{"x": [1, {"k": 1, "k": 1}]}', "duplicate_key", "x[1].k"),
    (b'{"token": "fet_\\u0000abc.def"}', "nul_character", "token"),
    (b'{"log_tail": ["ok", "bad\\u0000"]}', "nul_character", "log_tail[1]"),
    (b'{"k\\u0000": 1}', "nul_character", None),
    (b'{"version": "\\ud800"}', "invalid_unicode", "version"),
    (b'{"version": "\\udfff tail"}', "invalid_unicode", "version"),
    (b'{"n": 1000000000000000000000000000000}', "out_of_range", "n"),
    (b'{"n": -9223372036854775809}', "out_of_range", "n"),
    (b'{"n": ' + b"9" * 5000 + b"}", "out_of_range", "n"),
    (b'{"n": [1e400]}', "out_of_range", "n[0]"),
    (b'{"n": NaN}', "malformed_json", None),
    (b'{"n": -Infinity}', "malformed_json", None),
    (b'{"name": "\xff"}', "malformed_json", None),
    (b"{not json", "malformed_json", None),
    (b"", "malformed_json", None),
])
def test_hostile_bodies_are_refused_with_a_code_and_path(raw, code, field):
    assert _refusal(raw)[:2] == (code, field)


def test_limits_and_what_stays_accepted():
    assert read_json(b"[" * 64 + b"]" * 64, max_bytes=LIMIT) == json.loads("[" * 64 + "]" * 64)
    # Brackets inside strings are not nesting; escaped quotes do not end a string.
    assert read_json(b'{"s": "[[[[\\"{{{{", "t": "\\\\"}', max_bytes=LIMIT) == {"s": '[[[["{{{{', "t": "\\"}
    assert read_json('\ufeff{"emoji": "\\ud83d\\ude00", "n": 9223372036854775807}'.encode(), max_bytes=LIMIT) == {
        "emoji": "😀", "n": 2**63 - 1}
    with pytest.raises(ForestError) as exc:
        read_json(b"[1, 2, 3]", max_bytes=4)
    assert exc.value.code == "payload_too_large" and exc.value.status == 413


def test_the_fast_paths_decide_as_the_full_checks_would():
    """The reader skips its slow checks when the text cannot need them (few brackets, no ``\\u`` escape,
    no long number): each skip is taken only when it is safe."""
    siblings = "[" + ",".join(["[1]"] * 200) + "]"  # 201 brackets, two deep
    assert read_json(siblings.encode(), max_bytes=LIMIT) == json.loads(siblings)
    quoted = '{"s": "' + "[" * 100 + '", "t": [[1]]}'  # brackets in a string are not nesting
    assert read_json(quoted.encode(), max_bytes=LIMIT)["s"] == "[" * 100
    assert _refusal(b'{"s": "' + b"[" * 100)[0] == "malformed_json"  # unterminated: never "too deep"
    assert _refusal(b'{"a": "x", ' + b'"b": [' * 70 + b"]" * 70 + b"}")[0] == "nesting_too_deep"
    assert _refusal('{"version": "\ud800"}')[:2] == ("invalid_unicode", "version")  # a str body, raw surrogate
    assert read_json('{"name": "ünïcode ✓"}', max_bytes=LIMIT) == {"name": "ünïcode ✓"}


def test_text_rules_serve_urls_too():
    assert text_problem("fine/ünïcode") is None
    assert text_problem("a\x00b")[0] == "nul_character"
    assert text_problem("\ud800")[0] == "invalid_unicode"


_KEYS = st.sampled_from(["a", "b", ":", ": x", "[", "k]", " :", "é", "\\"])
_SCALARS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from(
    ["1e400", "1.5e-7", "2E+300", "NaN", "-Infinity", "true", "null", '"x"', '"[{"', '":"', '"\\u0000"', '" :"']))


def _encoded(value, space: str) -> str:
    """A JSON text from (kind, items) trees; objects keep their pairs as drawn, repeats included."""
    if isinstance(value, tuple):
        kind, items = value
        if kind == "list":
            return "[" + f",{space}".join(_encoded(item, space) for item in items) + "]"
        return "{" + f",{space}".join(f"{json.dumps(key)}{space}:{space}{_encoded(item, space)}"
                                      for key, item in items) + "}"
    return value if isinstance(value, str) else str(value)


_TREES = st.recursive(_SCALARS, lambda children: st.one_of(
    st.tuples(st.just("list"), st.lists(children, max_size=4)),
    st.tuples(st.just("object"), st.lists(st.tuples(_KEYS, children), max_size=4))), max_leaves=30)


def _answer(read, text: str):
    try:
        return "value", read(text)
    except ForestError as error:
        return "refused", error.code, error.field


@settings(max_examples=400, deadline=None)
@given(tree=_TREES, space=st.sampled_from(["", " ", "\n"]), depth=st.integers(min_value=2, max_value=8))
def test_the_plain_parse_answers_as_the_checking_parse(tree, space, depth):
    """The body reader's C-speed paths (the depth check by peeling pairs, the plain parse with the key
    count) answer every body exactly as the walk and the checking parse do: the same value, or the same
    refusal code and field (repeated keys, numbers out of range, NaN, NUL, brackets and colons in strings)."""
    text = _encoded(tree, space)
    assert body._depth_exceeds(text, depth) == body._depth_walk(text, depth)
    # (30 leaves never nest as deep as the reader's limit.)
    assert _answer(lambda t: read_json(t.encode(), max_bytes=LIMIT), text) == _answer(body._parse_checked, text)

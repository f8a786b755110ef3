"""The one reader of JSON request bodies for the whole API. Pure: no Django.

Every JSON body Host accepts — the DRF parser (staff/CI API and the Grove wire views) and any plain
Django view — goes through :func:`read_json`, which refuses, with a 400, a stable code and the field
path, anything PostgreSQL or Python would otherwise turn into a 500:

- more than ``max_bytes`` (413 ``payload_too_large``);
- bytes that are not UTF-8 or text that is not JSON (``malformed_json``);
- nesting deeper than ``max_depth`` (``nesting_too_deep``), measured by a linear scan *before*
  ``json.loads`` recurses, so 10,000 ``[`` never reach the C parser's recursion limit;
- the same key twice in one object (``duplicate_key``): parsers disagree on which copy wins, so a
  body that two components may read differently is refused rather than guessed at;
- ``NaN``/``Infinity`` (not JSON; PostgreSQL ``jsonb`` refuses them: ``malformed_json``) and numbers
  outside what a 64-bit column or a double holds (``out_of_range``, with the field path);
- U+0000 in any key or string (``nul_character``): PostgreSQL ``text`` and ``jsonb`` cannot store it;
- a lone UTF-16 surrogate (``\\ud800`` escapes) in any key or string (``invalid_unicode``): it cannot
  be encoded as UTF-8 for the database.

The same text rules serve query strings and path segments (:func:`text_problem`).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from apps.core.errors import PayloadTooLarge, ValidationFailed

DEFAULT_MAX_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what a PostgreSQL bigint holds
# Longer integer literals are never converted: Python refuses >4300 digits itself, and slowly.
_MAX_INT_DIGITS = 20

# A lone surrogate is any surrogate code point: valid pairs were already combined by json.loads.
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> tuple[str, str] | None:
    """(code, sentence) when ``value`` holds a character PostgreSQL text cannot store, else None."""
    if "\x00" in value:
        return "nul_character", "contains a NUL (U+0000) character, which Host cannot store."
    if _SURROGATE.search(value):
        return "invalid_unicode", "contains a lone UTF-16 surrogate, which is not valid Unicode."
    return None


# A JSON string (an unterminated one runs to the end of the text), and anything that is not a bracket.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))


def _may_hold_unstorable(text: str) -> bool:
    """Whether a parsed string could hold a NUL or a lone surrogate: only through a ``\\u`` escape, a raw
    NUL, or (a ``str`` body) a raw surrogate. Substring tests in C; without any, the walk over every
    value (``_check_values``) has nothing to find."""
    if "\\u" in text or "\x00" in text:
        return True
    return not text.isascii() and _SURROGATE.search(text) is not None


def _depth_exceeds(text: str, limit: int) -> bool:
    """True when brackets nest deeper than ``limit``, string contents aside. Linear, and in C for the
    common case: a body with no more brackets than ``limit`` cannot nest deeper; otherwise strings are
    cut out and only the brackets are walked."""
    if text.count("[") + text.count("{") <= limit:
        return False
    if "\\" not in text:
        # Without escapes every quote opens or closes a string. Keep only quotes and brackets, and drop each
        # empty string (""): when no quote is left, no string held a bracket and the rest is the structure
        # (greedy pairing from the left only removes a string's own two quotes, else a quote is left). Then
        # removing the innermost "[]" and "{}" pairs peels one or two levels a round; empty within limit/2
        # rounds, the body nests no deeper than the limit. Otherwise the walk below decides. C speed.
        brackets = text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE).replace(b'""', b"")
        if b'"' not in brackets:
            for _round in range(limit // 2):
                if not brackets:
                    return False
                brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
            if not brackets:
                return False
    return _depth_walk(text, limit)


def _depth_walk(text: str, limit: int) -> bool:
    """``_depth_exceeds`` exactly, for any text: strings cut out, then every bracket walked."""
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


# The plain parse cannot be trusted with an integer of 19 digits or more (an int64 holds any 18), an
# exponent of three digits or more, or NaN/Infinity: those take the checking parse's hooks. Found by
# substring search in a copy of the body whose digits all read "0", "E" "e" and "-" "+" (C speed).
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789E-", b"0000000000e+")
_UNSAFE = (b"0" * 19, b"0e000", b"0e+000", b"NaN", b"Infinity")
# Whitespace between a key's closing quote and its colon (then the key count below needs the regex).
_SPACED_KEY_END = re.compile(r'"[ \t\n\r]+:')


def _plain_safe(raw: bytes) -> bool:
    """Whether a body with no escapes can be parsed without the number hooks."""
    mapped = raw.translate(_DIGITS_AS_ZERO)
    return not any(pattern in mapped for pattern in _UNSAFE)


def _keys_in(text: str) -> int:
    """Key ends (a quote, then a colon) in an escape-free body: its keys, plus any string starting with a
    colon (an opening quote looks the same). Compared with the parsed value's count (re-encoded compactly:
    the same strings, nothing escaped into a quote or a colon), the body's is larger exactly when an object
    repeated a key (the parse kept one, and maybe dropped a string with it): equal counts mean no repeat."""
    spaced = 0
    # A compact body has no whitespace at all: four one-character scans (memchr) rule the regex out before
    # the two-character ones do (each a full pass over a batch's megabyte).
    if (" " in text or "\n" in text or "\t" in text or "\r" in text) and (
            '" ' in text or '"\n' in text or '"\t' in text or '"\r' in text):
        spaced = len(_SPACED_KEY_END.findall(text))
    return text.count('":') + spaced


_NOTHING = object()


class _Duplicate(Exception):
    def __init__(self, key: str):
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


class _OutOfRange:
    """Stands in for a number too large to hold, so the walk can name its field path."""

    __slots__ = ("literal",)

    def __init__(self, literal: str):
        self.literal = literal


def _parse_int(literal: str) -> int | _OutOfRange:
    if len(literal.lstrip("-")) > _MAX_INT_DIGITS:
        return _OutOfRange(literal)
    value = int(literal)
    return value if INT64_MIN <= value <= INT64_MAX else _OutOfRange(literal)


def _parse_float(literal: str) -> float | _OutOfRange:
    value = float(literal)
    return value if math.isfinite(value) else _OutOfRange(literal)


def _parse_constant(name: str) -> Any:
    raise ValidationFailed("malformed_json", f"The body is not valid JSON: {name} is not a JSON number.")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check_values(value: Any) -> None:
    """Walk the parsed value without recursion; refuse the first string or key Host cannot store."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _OutOfRange):
            shown = item.literal if len(item.literal) <= 24 else f"{item.literal[:24]}…"
            raise ValidationFailed("out_of_range", f"{path or 'The body'} is {shown}, outside the 64-bit range "
                                   "Host stores.", field=path or None)
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise ValidationFailed(problem[0], f"{path or 'The body'} {problem[1]}", field=path or None)
        elif isinstance(item, dict):
            for key, child in item.items():
                child_path = _join(path, key)
                problem = text_problem(key)
                if problem:
                    raise ValidationFailed(problem[0], f"A key in {path or 'the body'} {problem[1]}",
                                           field=path or None)
                stack.append((child_path, child))
        elif isinstance(item, list):
            stack.extend((_join(path, index), child) for index, child in enumerate(item))


def _path_of(root: Any, target: dict) -> str:
    """The field path of the object ``target`` (found by identity) inside ``root``."""
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        path, item = stack.pop()
        if item is target:
            return path
        if isinstance(item, dict):
            stack.extend((_join(path, key), child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((_join(path, index), child) for index, child in enumerate(item))
    return ""


def read_json(raw: bytes | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse one JSON request body under Host's rules (module docstring), or raise a ``ForestError``."""
    if max_bytes and len(raw) > max_bytes:
        raise PayloadTooLarge("payload_too_large",
                              f"The request body is {len(raw)} bytes; the limit is {max_bytes} bytes.")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationFailed("malformed_json",
                                   f"The body is not valid JSON: it is not UTF-8 (byte {exc.start}).") from None
    else:
        text = raw
    if text.startswith("\ufeff"):
        text = text[1:]
    if _depth_exceeds(text, max_depth):
        raise ValidationFailed("nesting_too_deep", f"The body nests more than {max_depth} levels deep.")
    if "\\" not in text and _plain_safe(raw if isinstance(raw, bytes) else text.encode("utf-8", "surrogatepass")):
        # The common body (no escape, no number near a limit, no NaN/Infinity) is parsed by orjson with no
        # hook: for such a body the values ``json.loads`` gives (no integer beyond 18 digits, which orjson
        # would make a float; docs/decisions.md "C1M speed, fifth pass"). A repeated key is ruled out by
        # counting keys in the body and in the value re-encoded (``_keys_in``; orjson escapes what
        # ``json.dumps(ensure_ascii=False)`` does); a body that may hold one, or that orjson refuses, takes the
        # checking parse below, which refuses it as before.
        try:
            value = orjson.loads(text)
        except ValueError:
            value = _NOTHING
        if value is not _NOTHING and _keys_in(text) == _keys_in(orjson.dumps(value).decode()):
            if _may_hold_unstorable(text):
                _check_values(value)
            return value
    return _parse_checked(text)


def _parse_checked(text: str) -> Any:
    """The parse with every hook (numbers out of range, NaN/Infinity, a repeated key), for any text."""
    out_of_range: list[str] = []

    def parse_int(literal: str) -> int | _OutOfRange:
        value = _parse_int(literal)
        if value.__class__ is _OutOfRange:
            out_of_range.append(literal)
        return value

    def parse_float(literal: str) -> float | _OutOfRange:
        value = _parse_float(literal)
        if value.__class__ is _OutOfRange:
            out_of_range.append(literal)
        return value

    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=parse_int, parse_float=parse_float,
                           parse_constant=_parse_constant)
    except _Duplicate as dup:
        raise ValidationFailed("duplicate_key", f"The key '{dup.key[:100]}' appears twice in one object.",
                               field=_duplicate_path(text, dup)) from None
    except (ValueError, RecursionError) as exc:
        raise ValidationFailed("malformed_json", f"The body is not valid JSON: {exc}") from None
    if out_of_range or _may_hold_unstorable(text):
        _check_values(value)
    return value


def _duplicate_path(text: str, dup: _Duplicate) -> str | None:
    """Re-parse keeping the first copy of each key, to name where the duplicate sits."""
    marker: dict = {}

    def keep_first(pairs):
        obj: dict = {}
        for key, value in pairs:
            obj.setdefault(key, value)
        # Hooks run in the same order as in the first parse, so the first object with a repeat is it.
        if not marker and len(obj) < len(pairs):
            marker["obj"] = obj
        return obj

    try:
        root = json.loads(text, object_pairs_hook=keep_first)
    except (ValueError, RecursionError):
        return dup.key
    if "obj" not in marker:
        return dup.key
    return _join(_path_of(root, marker["obj"]), dup.key)

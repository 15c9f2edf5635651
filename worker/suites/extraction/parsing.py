"""Turning a raw model response into a list of predicted events.

Extraction picks the JSON-looking part of the response (the method is recorded), then
`json.loads` is tried as is and after each cumulative repair step, and finally
`dirtyjson`. The parsed value is normalised to a list of event dicts.

Everything here is linear in the response: the spec's patterns that backtrack
quadratically (the Markdown fence, the array pattern) are matched by hand with the same
result, and dirtyjson runs without its arithmetic: it would `eval` "[9**9**8]" (minutes
of CPU from 9 bytes); such a value is a parse failure instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from dirtyjson.loader import CONSTANT_RE, EQUATION_RE, NUMBER_RE, DirtyJSONLoader

EMPTY_INPUT = "empty_input"
MARKDOWN_BLOCK = "markdown_block"
ARRAY_PATTERN = "array_pattern"
OBJECT_PATTERN = "object_pattern"
EMPTY_ARRAY = "empty_array"
RAW_JSON = "raw_json"
NO_JSON_FOUND = "no_json_found"

# The Markdown pattern is ```` ```(?:json)?\s*\n?(.*?)\n?``` ```` (dot matches newlines, case
# insensitive), matched by hand in `markdown_blocks`: the regex is quadratic on a fence
# followed by many blanks, or on many fences.
_FENCE = "```"
_JSON_TAG = re.compile("json", re.IGNORECASE)
_BLANKS = re.compile(r"\s*")
# The array pattern is `\[\s*\{.*\}\s*\]` (dot matches newlines, greedy). Matched by hand
# in linear time: the regex backtracks quadratically on many "[{" without a later "}]".
_ARRAY_OPEN = re.compile(r"\[\s*\{")
_ARRAY_CLOSE = re.compile(r"\}\s*\]")
# (Possessive: none of its parts can give back a character that a later part matches.)
_OBJECT = re.compile(r"\{[^{}]*+(?:\{[^{}]*+\}[^{}]*+)*+\}")

_PUNCTUATION = str.maketrans("，：；“”‘’【】（）｛｝", ",:;\"\"''[](){}")
_TRAILING_COMMA = re.compile(r",\s*([\]}])")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_SINGLE_QUOTED_KEY = re.compile(r"'([^'\n]*)'\s*:")


@dataclass(frozen=True)
class ParseResult:
    """What parsing one response produced."""

    method: str
    success: bool
    repair_steps: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def repaired(self) -> bool:
        """Parsed, and only after at least one repair step."""
        return self.success and bool(self.repair_steps)


def array_pattern_match(text: str) -> str | None:
    """What `re.search(r"\\[\\s*\\{.*\\}\\s*\\]", text, re.DOTALL)` matches, in linear time:
    from the first "[{" to the last "}]" whose "}" comes after that "{"."""
    opening = _ARRAY_OPEN.search(text)
    if opening is None:
        return None
    end = None
    for closing in _ARRAY_CLOSE.finditer(text, opening.end()):
        end = closing.end()
    return None if end is None else text[opening.start() : end]


def markdown_blocks(text: str) -> list[str]:
    """What `re.findall(r"```(?:json)?\\s*\\n?(.*?)\\n?```", text, re.DOTALL | re.I)` returns,
    in linear time.

    From a fence, an optional "json" and every blank after it are skipped (the regex's
    greedy `\\s*` keeps them when a match follows), and the block runs to the next fence,
    less one newline just before it. Without a later fence there is no match from here
    nor from any later fence, so the search stops.
    """
    blocks = []
    position = 0
    while (opening := text.find(_FENCE, position)) >= 0:
        start = opening + len(_FENCE)
        if tag := _JSON_TAG.match(text, start):
            start = tag.end()
        start = _BLANKS.match(text, start).end()  # type: ignore[union-attr]
        closing = text.find(_FENCE, start)
        if closing < 0:
            break
        end = closing - 1 if closing > start and text[closing - 1] == "\n" else closing
        blocks.append(text[start:end])
        position = closing + len(_FENCE)
    return blocks


def extract_json_text(response: str) -> tuple[str, str | None]:
    """The extraction method that applies first and the text it extracted (None: none)."""
    if not response.strip():
        return EMPTY_INPUT, None
    blocks = markdown_blocks(response)
    if blocks:
        return MARKDOWN_BLOCK, blocks[-1].strip()
    if (array := array_pattern_match(response)) is not None:
        return ARRAY_PATTERN, array
    if match := _OBJECT.search(response):
        return OBJECT_PATTERN, match.group(0)
    if "[]" in response:
        return EMPTY_ARRAY, "[]"
    stripped = response.strip()
    if stripped.startswith(("[", "{")):
        return RAW_JSON, stripped
    return NO_JSON_FOUND, None


def normalize_punctuation(text: str) -> str:
    """Full-width punctuation `，：；“”‘’【】（）｛｝` to ASCII."""
    return text.translate(_PUNCTUATION)


def fix_trailing_comma(text: str) -> str:
    """Drop a comma that precedes (optional whitespace and) `]` or `}`."""
    return _TRAILING_COMMA.sub(r"\1", text)


def remove_control_characters(text: str) -> str:
    """Drop U+0000-U+0008, U+000B, U+000C and U+000E-U+001F."""
    return _CONTROL_CHARACTERS.sub("", text)


def fix_unclosed_brackets(text: str) -> str:
    """Append the missing `}` and then the missing `]`, by counting."""
    text += "}" * max(0, text.count("{") - text.count("}"))
    return text + "]" * max(0, text.count("[") - text.count("]"))


def fix_single_quotes(text: str) -> str:
    """`'key':` to `"key":`."""
    # What `sub` with the template `"\1":` gives; `split` finds the keys in C, where Python
    # 3.11 expands a template per match in Python (44,000 keys: 14 ms).
    parts = _SINGLE_QUOTED_KEY.split(text)
    parts[1::2] = [f'"{key}":' for key in parts[1::2]]
    return "".join(parts)


REPAIR_STEPS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("normalize_punctuation", normalize_punctuation),
    ("fix_trailing_comma", fix_trailing_comma),
    ("remove_control_characters", remove_control_characters),
    ("fix_unclosed_brackets", fix_unclosed_brackets),
    ("fix_single_quotes", fix_single_quotes),
)
DIRTYJSON_FALLBACK = "dirtyjson_fallback"

_NOT_PARSED = object()


def _json_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_PARSED


# dirtyjson `eval`s a value that is neither a string, container, constant nor a number
# followed by something other than one of these (`EQUATION_RE` finds its extent).
_ARITHMETIC_FOLLOWERS = frozenset("+-/*()")
# What that `eval` reads without arithmetic: a number literal after unary signs (".5",
# "+1", "-.5e3"), read here with int() / float() instead.
_SIGNED_LITERAL = re.compile(r"([+-]*)(\d+(\.\d*)?([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)")
# A hex or octal integer longer than this parses to an integer that `str()` (in every
# later metric) refuses; dirtyjson's decimal integers stop at int()'s 4300 digits anyway.
MAX_INTEGER_CHARACTERS = 3000


class NoEvalLoader(DirtyJSONLoader):
    """dirtyjson's loader (single quotes, unquoted keys, trailing commas, comments, hex
    and octal numbers) without `eval`: a value it would evaluate is read only when it is a
    signed number literal, anything else (arithmetic) is an error, and so is a hex or
    octal integer of more than `MAX_INTEGER_CHARACTERS`."""

    def scan(self) -> Any:
        content: str = self.content
        position: int = self.pos  # type: ignore[has-type]
        if (
            position >= self.end
            or content[position] in "\"'{["
            or CONSTANT_RE.match(content, position) is not None
        ):
            return super().scan()
        number = NUMBER_RE.match(content, position)
        following = content[number.end() : number.end() + 1] if number else ""
        if number is not None and following not in _ARITHMETIC_FOLLOWERS:
            integer = number.group(1).lstrip("-")
            if len(integer) > MAX_INTEGER_CHARACTERS and integer.startswith("0"):
                raise ValueError(f"integer of over {MAX_INTEGER_CHARACTERS} characters")
            return super().scan()
        expression = EQUATION_RE.match(content, position)
        literal = expression and _SIGNED_LITERAL.fullmatch(expression.group(0))
        if not expression or not literal:
            raise ValueError(f"not a JSON value at {position} (arithmetic is not evaluated)")
        value = _literal_value(literal)
        self.pos = expression.end()
        return value


def _literal_value(literal: re.Match[str]) -> int | float:
    """What Python's `eval` gives for `[+-]*` followed by a decimal number literal."""
    signs, body = literal.group(1), literal.group(2)
    if body.isdigit():
        if body[0] == "0" and body.strip("0"):
            raise ValueError("leading zeros in a decimal integer")  # eval: SyntaxError
        value: int | float = int(body)
    else:
        value = float(body)
    return -value if signs.count("-") % 2 else value


def dirtyjson_loads(text: str) -> Any:
    """`dirtyjson.loads(text)` as plain dicts and lists, never evaluating anything."""
    return _plain(NoEvalLoader(text).decode())


def _dirtyjson_loads(text: str) -> Any:
    value = _strict_translation(text)
    if value is _DIRTYJSON_FAILS:
        return _NOT_PARSED
    if value is not _NOT_PARSED:
        return value
    try:
        return dirtyjson_loads(text)
    except (Exception, RecursionError):  # dirtyjson raises more than its own Error
        return _NOT_PARSED


# dirtyjson reads token by token in Python (44,000 unquoted keys took 350 ms). Its three
# commonest liberties, unquoted keys, single-quoted strings and a trailing comma after a
# container's last item (the repairs' own comma fix runs before brackets are closed), are
# turned into strict JSON in one regex pass instead, and `json.loads` (in C) reads the
# result. When that parses, dirtyjson would have read the same value (`"k":` is valid only
# where dirtyjson reads a key, a dropped comma followed an item since "[," is kept, and
# strict JSON is a part of its grammar); anything else (comments, hex numbers,
# trailing text, control characters, ...) still goes to dirtyjson.
_DOUBLE_QUOTED = r'(?P<double>"[^"\\]*+(?:\\.[^"\\]*+)*+"?)'  # unclosed: the rest
_SINGLE_QUOTED = r"'(?P<single>[^'\\]*+(?:\\.[^'\\]*+)*+)(?P<closed>'?)"
_KEY = r"(?<![\w$])(?P<key>[\w$]++)(?=[ \t\n\r]*+:)"  # a word before a colon
_COMMAS = (
    r"(?P<first>[\[{][ \t\n\r]*+,)"  # a comma first in a container: kept (dirtyjson fails too)
    r"|(?P<trailing>,)(?=[ \t\n\r]*+[\]}])"  # a comma before the closing: dropped
)
_TOKEN_GROUPS = ("double", "single", "closed", "key", "first", "trailing")
_SINGLE_QUOTED_ESCAPE = re.compile(r'\\(.)|"', re.DOTALL)
# A value nested deeper than this is left to dirtyjson, whose recursion limit decides.
_TRANSLATED_DEPTH = 100


@cache
def _liberties(double: bool, single: bool, commas: bool) -> re.Pattern[str]:
    """The token pattern of `strictly_quoted` for a text with (or without) double quotes,
    single quotes and commas: an alternative that cannot match costs a try at every
    character."""
    alternatives = [_DOUBLE_QUOTED] * double + [_SINGLE_QUOTED] * single + [_KEY]
    return re.compile("|".join(alternatives + [_COMMAS] * commas), re.DOTALL)


def strictly_quoted(text: str) -> str:
    """`text` with unquoted keys and single-quoted strings double-quoted and trailing
    commas dropped (an unclosed string is left as it is: it does not parse).

    `re.split` collects every token's groups in C; a `re.sub` callback per token took
    about 1 us each (64,000 single-quoted strings: 60 ms).
    """
    liberties = _liberties('"' in text, "'" in text, "," in text)
    parts = liberties.split(text)
    stride = liberties.groups + 1
    count = len(parts) // stride
    columns = [
        parts[liberties.groupindex[name] :: stride]
        if name in liberties.groupindex
        else [None] * count
        for name in _TOKEN_GROUPS
    ]
    tokens = [
        double
        if double is not None
        else f'"{key}"'
        if key is not None
        else (
            f'"{single}"'
            if closed and "\\" not in single and '"' not in single
            else _single_quoted(single, closed)
        )
        if single is not None
        else first
        if first is not None
        else ""  # a trailing comma
        for double, single, closed, key, first, _trailing in zip(*columns, strict=True)
    ]
    pieces: list[str] = [""] * (2 * count + 1)
    pieces[0::2] = parts[0::stride]
    pieces[1::2] = tokens
    return "".join(pieces)


def _single_quoted(single: str, closed: str) -> str:
    """A single-quoted string's content as a double-quoted JSON string; unclosed, as it
    was."""
    if not closed:
        return "'" + single
    return '"' + _SINGLE_QUOTED_ESCAPE.sub(_json_escape, single) + '"'


def _json_escape(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped is None:
        return '\\"'  # a bare double quote
    return "'" if escaped == "'" else "\\" + escaped


# The translation's `json.loads` failing with "Expecting value" at one of these decides
# dirtyjson's failure as well: the strict parser read the text before it as dirtyjson
# reads it (the translation only quotes keys and strings and drops trailing commas, and
# nothing before it was a comment, which strict JSON would have stopped at), the spot is
# inside the first value (after it `json` says "Extra data"), and dirtyjson's `scan`
# starts no value with these characters. ("{'k':1, ..., 'k':}" cut at the limit.)
_NEVER_A_VALUE = frozenset("}],:")
_DIRTYJSON_FAILS = object()


def _strict_translation(text: str) -> Any:
    """What dirtyjson reads from `text` when `text` is strict JSON but for unquoted keys,
    single-quoted strings and trailing commas; `_DIRTYJSON_FAILS` when dirtyjson would
    fail on it for a reason found without it; else `_NOT_PARSED`."""
    translated = strictly_quoted(text)
    try:
        value = json.loads(translated)
    except json.JSONDecodeError as error:
        at = translated[error.pos : error.pos + 1]
        if error.msg == "Expecting value" and at in _NEVER_A_VALUE:
            return _DIRTYJSON_FAILS
        return _NOT_PARSED
    except (ValueError, RecursionError):
        return _NOT_PARSED
    if not _nested_at_most(value, _TRANSLATED_DEPTH):
        return _NOT_PARSED
    return value


def _nested_at_most(value: Any, limit: int) -> bool:
    pending = [(value, 1)] if isinstance(value, dict | list) else []
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return False
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def _plain(value: Any) -> Any:
    """dirtyjson's attributed containers as plain dicts and lists."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def load_with_repairs(text: str) -> tuple[bool, Any, list[str]]:
    """`(parsed, value, repair steps tried)`: plain `json.loads`, then each cumulative repair
    step followed by `json.loads`, then `dirtyjson` on the repaired text."""
    value = _json_loads(text)
    steps: list[str] = []
    if value is not _NOT_PARSED:
        return True, value, steps
    for name, repair in REPAIR_STEPS:
        text = repair(text)
        steps.append(name)
        value = _json_loads(text)
        if value is not _NOT_PARSED:
            return True, value, steps
    steps.append(DIRTYJSON_FALLBACK)
    value = _dirtyjson_loads(text)
    return value is not _NOT_PARSED, value, steps


def event_items(value: Any) -> list[dict[str, Any]]:
    """Step 4 of metrics-extraction.md: a list gives its dict items, a dict whose `events`
    is a list gives that list's dict items, any other dict gives itself, anything else
    nothing. Every later check (schema compliance included) sees only these events."""
    if isinstance(value, dict):
        events = value.get("events")
        if not isinstance(events, list):
            return [value]
        value = events
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def parse_response(response: str) -> ParseResult:
    """Extract, parse (with repairs) and normalise one response; never raises."""
    method, text = extract_json_text(response)
    if text is None:
        return ParseResult(method=method, success=False, error=method)
    parsed, value, steps = load_with_repairs(text)
    if not parsed:
        return ParseResult(
            method=method, success=False, repair_steps=steps, error="json_parse_failed"
        )
    return ParseResult(method=method, success=True, repair_steps=steps, events=event_items(value))

"""Many regular expressions over one text, each scanned only where it can start.

A pattern such as `(?<!\\w)(?:lol|gonna|...)(?!\\w)` or `(?<!\\bnot\\s)\\bkill\\s+...`
begins with a zero-width assertion, so Python's `re` cannot skip ahead to a possible
first character: it runs the pattern at every position of the text. A hundred such
patterns over a 256 KiB reply took seconds.

`LiteralPrefilter` reads each pattern once: when every match has to begin with one of a
few literal strings (found by walking the parsed pattern past its zero-width assertions),
those strings go into one Aho-Corasick automaton (`pyahocorasick`, in C). A text is then
folded to lower case once and read once by the automaton; each pattern is tried with
`match` only where one of its literals starts, in order, which yields exactly the
matches of `finditer` (a match can begin nowhere else). Patterns without such literals,
and texts that lower-casing would not keep aligned, are scanned with `finditer` as before.

Case: a literal is used only when it is ASCII; the text is lower-cased, with the two
non-ASCII letters that Python's case-insensitive matching equates with ASCII ones and
that `str.lower` leaves apart ("ı", "ſ") mapped to theirs, so every place a pattern can
match is a candidate (a candidate that is not a match costs one failed `match`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import ahocorasick

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _c
    import sre_parse

_ZERO_WIDTH = {_c.AT, _c.ASSERT, _c.ASSERT_NOT}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)
_MAX_LITERALS = 256  # a pattern with more possible beginnings is scanned as a whole
_MIN_REQUIRED = 3


def _parsed(pattern: re.Pattern[str]) -> list[tuple[Any, Any]] | None:
    try:
        return list(sre_parse.parse(pattern.pattern, pattern.flags).data)
    except Exception:  # an unparsable pattern is simply not prefiltered
        return None


def _usable(found: set[str] | None) -> frozenset[str] | None:
    """Lower-case ASCII literals, or None (none, too many, or one not ASCII)."""
    if not found or len(found) > _MAX_LITERALS:
        return None
    lowered = frozenset(literal.lower() for literal in found)
    if any(not literal or not literal.isascii() for literal in lowered):
        return None
    return lowered


def leading_literals(pattern: re.Pattern[str]) -> frozenset[str] | None:
    """Lower-case ASCII strings one of which every match of `pattern` starts with, or
    None when the pattern has no such short list."""
    parsed = _parsed(pattern)
    return None if parsed is None else _usable(_leading(parsed))


def required_literals(pattern: re.Pattern[str]) -> list[frozenset[str]]:
    """Lists of lower-case ASCII strings such that every match of `pattern` contains one
    string of each list (the literals of the parts every match goes through)."""
    parsed = _parsed(pattern)
    return [] if parsed is None else _required(parsed)


def _required(items: list[tuple[Any, Any]]) -> list[frozenset[str]]:
    required: list[frozenset[str]] = []
    for index, (op, av) in enumerate(items):
        if op is _c.LITERAL and (index == 0 or items[index - 1][0] is not _c.LITERAL):
            literals = _usable(_leading(items[index:]))
        elif op is _c.BRANCH:
            literals = _usable(_leading([(op, av)]))
        elif op is _c.SUBPATTERN:
            required += _required(list(av[-1]))
            continue
        elif op in _REPEATS and av[0] >= 1:
            required += _required(list(av[2]))
            continue
        else:
            continue
        if literals is not None:
            required.append(literals)
    return required


def _leading(items: list[tuple[Any, Any]]) -> set[str] | None:
    """The literal beginnings of a sequence of parsed items (None: not only literals)."""
    for index, (op, av) in enumerate(items):
        if op in _ZERO_WIDTH:
            continue
        if op is _c.LITERAL:
            chars = []
            for next_op, next_av in items[index:]:
                if next_op is not _c.LITERAL:
                    break
                chars.append(chr(next_av))
            return {"".join(chars)}
        if op is _c.BRANCH:
            found: set[str] = set()
            for alternative in av[1]:
                branch = _leading(list(alternative))
                if branch is None:
                    return None
                found |= branch
            return found
        if op is _c.SUBPATTERN:
            return _leading(list(av[-1]))
        if _ATOMIC is not None and op is _ATOMIC:
            return _leading(list(av))
        if op in _REPEATS and av[0] >= 1:
            return _leading(list(av[2]))
        return None
    return None


def fold(text: str) -> str | None:
    """`text` lower-cased for the automaton, or None when that changes its length."""
    folded = text.lower()
    if len(folded) != len(text):
        return None
    if not folded.isascii():
        folded = folded.replace("ı", "i").replace("ſ", "s")
    return folded


class LiteralPrefilter:
    """`finditer` of several patterns over one text, each run only where it can start."""

    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        self.patterns = tuple(patterns)
        self._leading = [leading_literals(pattern) for pattern in self.patterns]
        # A short literal is in most texts and costs a report at most positions: only
        # literals of `_MIN_REQUIRED` characters or more are checked for presence.
        self._required = [
            [
                needed
                for needed in required_literals(pattern)
                if min(map(len, needed)) >= _MIN_REQUIRED
            ]
            for pattern in self.patterns
        ]
        words: set[str] = set()
        for leading in self._leading:
            words.update(leading or ())
        for required in self._required:
            for alternatives in required:
                words.update(alternatives)
        self._automaton: Any = None
        if words:
            automaton = ahocorasick.Automaton(ahocorasick.STORE_ANY, ahocorasick.KEY_STRING)
            for literal in words:
                automaton.add_word(literal, (literal, len(literal)))
            automaton.make_automaton()
            self._automaton = automaton

    def finditer_all(self, text: str) -> list[Iterator[re.Match[str]]]:
        """For each pattern, in order, what `pattern.finditer(text)` yields."""
        folded = fold(text) if self._automaton is not None else None
        if folded is None:
            return [pattern.finditer(text) for pattern in self.patterns]
        starts: dict[str, list[int]] = {}
        for end, (literal, length) in self._automaton.iter(folded):
            found_at = starts.get(literal)
            if found_at is None:
                found_at = starts[literal] = []
            found_at.append(end - length + 1)
        hits: list[Iterator[re.Match[str]]] = []
        for index, pattern in enumerate(self.patterns):
            leading = self._leading[index]
            if any(starts.keys().isdisjoint(needed) for needed in self._required[index]):
                hits.append(iter(()))  # a literal every match needs is not in the text
            elif leading is None:
                hits.append(pattern.finditer(text))
            else:
                candidates = [start for literal in leading for start in starts.get(literal, ())]
                if len(leading) > 1:
                    candidates = sorted(set(candidates))
                hits.append(_matches_at(pattern, text, candidates))
        return hits

    def count_all(self, text: str) -> list[int]:
        """For each pattern, `len(pattern.findall(text))`."""
        return [sum(1 for _ in hits) for hits in self.finditer_all(text)]


def _matches_at(pattern: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    """The matches `finditer` finds when every match begins at one of `starts` (sorted):
    try each start in order past the end of the previous match (a pattern with literal
    beginnings never matches the empty string)."""
    end = 0
    for start in starts:
        if start < end:
            continue
        hit = pattern.match(text, start)
        if hit is not None:
            yield hit
            end = hit.end()

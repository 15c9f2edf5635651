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

On a degenerate text (a phrase repeated for 256 KiB) the automaton reports a literal at
nearly every word, so its reports go straight into numpy arrays and are grouped there,
with no Python step per report. Fewer places are tried: a literal beginning reads on
through small classes of literals (`n[i1]gg` begins with "nigg" or "n1gg", not "n"), and
a pattern that must start a word (`\\b` or `(?<!\\w)` before a word character) is not
tried right after an ASCII letter, digit or underscore (the "i" in "kill").

Case: a literal is used only when it is ASCII; the text is lower-cased, with the two
non-ASCII letters that Python's case-insensitive matching equates with ASCII ones and
that `str.lower` leaves apart ("ı", "ſ") mapped to theirs, so every place a pattern can
match is a candidate (a candidate that is not a match costs one failed `match`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

import ahocorasick
import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _c
    import sre_parse

_ZERO_WIDTH = {_c.AT, _c.ASSERT, _c.ASSERT_NOT}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)
_MAX_LITERALS = 256  # a pattern with more possible beginnings is scanned as a whole
_MIN_REQUIRED = 3
_MAX_CLASS = 4  # characters of a class read on through in a literal beginning
_NO_STARTS = np.zeros(0, dtype=np.int64)
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_NOT_WORD = [(_c.IN, [(_c.CATEGORY, _c.CATEGORY_WORD)])]  # `\w` in a parsed pattern
# which ASCII code points are `\w` (a text's other characters are never ruled out)
_IS_ASCII_WORD = np.array([chr(code).lower() in _ASCII_WORD for code in range(128)] + [False])


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
            return _literal_run(items[index:])
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


def _literal_run(items: list[tuple[Any, Any]]) -> set[str]:
    """The strings a run of literals spells, read on through small classes of ASCII
    literals (`n[i1]gg` gives "nigg" and "n1gg"): a longer beginning is rarer in a text,
    so fewer places are tried."""
    found = {""}
    for op, av in items:
        if op is _c.LITERAL:
            chars = [chr(av)]
        elif op is _c.IN and _small_class(av) and len(found) * len(av) <= _MAX_LITERALS:
            chars = [chr(char) for _, char in av]
        else:
            break
        found = {start + char for start in found for char in chars}
    return found


def _small_class(members: list[tuple[Any, Any]]) -> bool:
    """A class of at most `_MAX_CLASS` ASCII literal characters (no range, no negation)."""
    return len(members) <= _MAX_CLASS and all(op is _c.LITERAL and av < 128 for op, av in members)


def starts_a_word(pattern: re.Pattern[str]) -> bool:
    """Whether every match of `pattern` starts at a word start: a `\\b` or `(?<!\\w)`
    before its first character, and literal beginnings that all start with a word
    character (so a place right after a word character is no beginning)."""
    parsed = _parsed(pattern)
    leading = leading_literals(pattern)
    if parsed is None or leading is None:
        return False
    if not all(literal[0] in _ASCII_WORD for literal in leading):
        return False
    for op, av in parsed:
        if op not in _ZERO_WIDTH:
            return False
        if (op is _c.AT and av is _c.AT_BOUNDARY) or (
            op is _c.ASSERT_NOT and av[0] == -1 and list(av[1].data) == _NOT_WORD
        ):
            return True
    return False


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
        self._literals = sorted(words)
        self._lengths = np.array([len(literal) for literal in self._literals], dtype=np.int64)
        number = {literal: index for index, literal in enumerate(self._literals)}
        self._leading_ids = [
            None if leading is None else sorted(number[literal] for literal in leading)
            for leading in self._leading
        ]
        self._required_ids = [
            [[number[literal] for literal in needed] for needed in required]
            for required in self._required
        ]
        self._word_start = [starts_a_word(pattern) for pattern in self.patterns]
        self._automaton: Any = None
        if words:
            automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS, ahocorasick.KEY_STRING)
            for index, literal in enumerate(self._literals):
                automaton.add_word(literal, index)
            automaton.make_automaton()
            self._automaton = automaton

    def finditer_all(self, text: str) -> list[Iterator[re.Match[str]]]:
        """For each pattern, in order, what `pattern.finditer(text)` yields."""
        folded = fold(text) if self._automaton is not None else None
        if folded is None:
            return [pattern.finditer(text) for pattern in self.patterns]
        starts = self._literal_starts(folded)
        codes: np.ndarray | None = None  # the folded text's code points, when needed
        word_starts: dict[int, np.ndarray] = {}  # a literal's starts that can start a word
        hits: list[Iterator[re.Match[str]]] = []
        for index, pattern in enumerate(self.patterns):
            leading = self._leading_ids[index]
            if any(
                not any(len(starts[literal]) for literal in needed)
                for needed in self._required_ids[index]
            ):
                hits.append(iter(()))  # a literal every match needs is not in the text
            elif leading is None:
                hits.append(pattern.finditer(text))
            else:
                if self._word_start[index]:
                    if codes is None:
                        codes = np.frombuffer(folded.encode("utf-32-le", "surrogatepass"), "<u4")
                    for id_ in leading:
                        if id_ not in word_starts:
                            word_starts[id_] = _after_no_word_character(starts[id_], codes)
                    candidates = _merged([word_starts[id_] for id_ in leading])
                else:
                    candidates = _merged([starts[id_] for id_ in leading])
                hits.append(_matches_at(pattern, text, candidates))
        return hits

    def _literal_starts(self, folded: str) -> list[np.ndarray]:
        """For each literal, the sorted positions where it starts in `folded`. The
        automaton's reports are collected and grouped with numpy, with no Python step per
        report: a degenerate text has several reports at every word."""
        # (end index, literal number) pairs, flattened straight into an array: a list of
        # a hundred thousand tuples would cost as much again in allocation and GC
        reports = chain.from_iterable(self._automaton.iter(folded))
        flat = np.fromiter(reports, dtype=np.int64)
        if not flat.size:
            return [_NO_STARTS] * len(self._literals)
        ids = flat[1::2]
        starts = flat[0::2] - self._lengths[ids] + 1
        order = np.argsort(ids, kind="stable")  # by literal, each in text order
        bounds = np.searchsorted(ids[order], np.arange(len(self._literals) + 1))
        grouped = starts[order]
        return [grouped[bounds[i] : bounds[i + 1]] for i in range(len(self._literals))]

    def count_all(self, text: str) -> list[int]:
        """For each pattern, `len(pattern.findall(text))`."""
        return [sum(1 for _ in hits) for hits in self.finditer_all(text)]


def _merged(starts: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct positions of several sorted arrays."""
    if len(starts) == 1:
        return starts[0]
    merged = np.sort(np.concatenate(starts))
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))] if merged.size else merged


def _after_no_word_character(starts: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The `starts` not right after an ASCII word character (where a word cannot start):
    in "kill yourself" the "i" of "kill" and the "f" of "yourself" are no beginnings."""
    before = codes[np.maximum(starts - 1, 0)]
    ruled_out = _IS_ASCII_WORD[np.minimum(before, 128)] & (starts > 0)
    return starts[~ruled_out]


def _matches_at(pattern: re.Pattern[str], text: str, starts: np.ndarray) -> Iterator[re.Match[str]]:
    """The matches `finditer` finds when every match begins at one of `starts` (sorted):
    try each start in order past the end of the previous match (a pattern with literal
    beginnings never matches the empty string)."""
    end = 0
    for start in starts.tolist():
        if start < end:
            continue
        hit = pattern.match(text, start)
        if hit is not None:
            yield hit
            end = hit.end()

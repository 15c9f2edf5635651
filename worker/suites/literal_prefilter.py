"""Many regular expressions over one text, each scanned only where it can start.

A pattern such as `(?<!\\w)(?:lol|gonna|...)(?!\\w)` or `(?<!\\bnot\\s)\\bkill\\s+...`
begins with a zero-width assertion, so Python's `re` cannot skip ahead to a possible
first character: it runs the pattern at every position of the text. A hundred such
patterns over a 256 KiB reply took seconds.

`LiteralPrefilter` reads each pattern once: when every match has to begin with one of a
few literal strings (found by walking the parsed pattern past its zero-width assertions),
those strings go into one Aho-Corasick automaton (`ahocorasick_rs`, in Rust). A text is then
folded to lower case once and read once by the automaton; each pattern is tried with
`match` only where one of its literals starts, in order, which yields exactly the
matches of `finditer` (a match can begin nowhere else). Patterns without such literals,
and texts that lower-casing would not keep aligned, are scanned with `finditer` as before.

On a degenerate text (a phrase repeated for 256 KiB) the automaton reports a literal at
nearly every word, so its reports go straight into numpy arrays and are grouped there,
with no Python step per report (one-character literals, and two ASCII characters, are
found by numpy alone: a table lookup over the text's code points, or their pairs). Fewer
places are tried: a literal beginning reads on through small classes of literals
(`n[i1]gg` begins with "nigg" or "n1gg", not "n"), and a pattern that must start a word
(`\\b` or `(?<!\\w)` before a word character) is not tried right after an ASCII letter,
digit or underscore (the "i" in "kill").

A phrase's first word alone is a poor filter: "you" begins 18 shipped safety patterns
and may be every other word of a reply. So a beginning is read on across whitespace, up
to three words (`leading_anchors`: "you\\s+should\\s+die" gives ("you", "should",
"die")), and a pattern is tried only where a whole anchor is: where its first word
starts and each next word starts where the whitespace after the previous one ends
(numpy, over the places of the first word; a prefix shared by several patterns is
followed once). Every match still begins at a place tried, so the matches are the same.
A pattern's anchors are read once per place of the pattern, words read and word begun
(`_Walk`): an optional prefix letter before two dozen verbs, each before the same dozen
objects, reads the objects once, so such a pattern still gets its thousands of
three-word anchors in a few milliseconds.

A pattern is also skipped when a literal every match needs is absent (`required_literals`):
of a branch, the longest needed literal of each alternative, together ("send me" before
"national id" or "seed phrase" needs "national" or "phrase"), so a reply repeating "send me
your card number" tries no pattern whose objects it lacks. A short reply (up to 2,048
characters, not repeating) is first only asked which literals it holds: most hold
fifty-odd ("you", "the", ",") and leave no pattern with all its required ones, and their
places are then never grouped (half of the keyword pass on ordinary replies).

A pattern whose first word is in many places is tried only at those from which each of
its other required literals starts within its reach (`reach`: the most a match can span,
counting a run of whitespace as one, so `\\s+` does not make it unbounded): "anydesk"
repeated 30,000 times before one "send me the code" is tried near that phrase only, not
30,000 times (each a failed attempt of a 40-character gap before a dozen verbs). A
word of any length (`\\w*`) leaves the reach unbounded, but not the number of runs of
whitespace a match reads into (`blank_runs`): that bounds it in tokens instead.

In a run of one piece repeated, an attempt that reads only inside the run ends as the
attempt one copy earlier does (`read_extent`: what it reads before and after its start,
lookarounds included); when a pattern matches at none of its places in the first copy,
its places in the later copies are dropped (`_Places.without_repeated_failures`):
"ammazzati" repeated, tried by "ammazzati unless 'da' follows", is one failed attempt.

Case: the text and the literals are folded alike (`fold`): lower-cased, then every
letter that Python's case-insensitive matching equates with another that `str.lower`
leaves apart ("ı" and "i", "ſ" and "s", "ς" and "σ", the old Cyrillic "ᲁ" and "д", ...:
the letters with one upper case) mapped to one of them, so every place a pattern can
match is a candidate (a candidate that is not a match costs one failed `match`). Any
script's letters can begin a literal (Cyrillic, Arabic, Devanagari, Chinese, accented
Latin), except one whose lower case is not one character.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

import ahocorasick_rs
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
_MIN_WINDOW_LITERAL = 2  # characters of a literal looked for within a pattern's reach
# ... when not ASCII: a two-letter ASCII word ("at", "ai") is in most English replies,
# and each literal found costs every reply a report and an array
_MIN_ASCII_WINDOW_LITERAL = 3
# a text of at most this many UTF-8 bytes has its reports grouped in Python; one of more
# characters has its ASCII pairs found apart from the automaton (`_LiteralReader`)
_FEW_UNITS = 2048
_PAIR_BASE = 129  # the ASCII code points, and one that stands for every other
_MIN_REPEATING_TEXT = 4096  # a shorter text is scanned whole, repeating or not
_REPEAT_PROBE = 32  # characters at a text's end looked for earlier in it (a period)
_MIN_COPIES = 8  # copies of its piece a repeating tail holds at least
_MAX_CLASS = 4  # characters of a class read on through in a literal beginning
_NO_STARTS = np.zeros(0, dtype=np.int64)
_NO_MATCHES: Iterator[re.Match[str]] = iter(())  # exhausted, so shared by all that miss
_MAX_ANCHORS = 16384  # a pattern with more anchors of `_MAX_WORDS` words has shorter ones
_FEW_PLACES = 32  # a first word in no more places is not followed by its next words
_MANY_DIGITS = 4096  # digits in more places: a pattern beginning with one scans the text
_LOOKUP_RATIO = 8  # values per mark above which the marks are looked up in the values
_NEAR_STEPS = 2  # places looked at before a binary search for the next (non-)whitespace
_MAX_WORDS = 3  # words of an anchor (a literal, whitespace, the next literal, ...)
_STOP = (None, None)  # in a walked item list: what follows is not read
# which code points `\s` matches (none above U+3000)
_IS_SPACE = np.array([chr(code).isspace() for code in range(0x3001)] + [False])
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_WORD_CLASS = [(_c.IN, [(_c.CATEGORY, _c.CATEGORY_WORD)])]  # `\w` in a parsed pattern
_SPACE_CLASS = [(_c.CATEGORY, _c.CATEGORY_SPACE)]  # `\s` in a parsed pattern
# which ASCII code points are `\w` (a text's other characters are never ruled out)
_IS_ASCII_WORD = np.array([chr(code).lower() in _ASCII_WORD for code in range(128)] + [False])


def _parsed(pattern: re.Pattern[str]) -> list[tuple[Any, Any]] | None:
    return _parsed_source(pattern.pattern, pattern.flags)


@lru_cache(maxsize=4096)
def _parsed_source(source: str, flags: int) -> list[tuple[Any, Any]] | None:
    """Parsed once per source: the analyses below each read the same parse (callers only
    read the returned items, never change them)."""
    try:
        return _plain(sre_parse.parse(source, flags))
    except Exception:  # an unparsable pattern is simply not prefiltered
        return None


def _plain(items: Any) -> list[tuple[Any, Any]]:
    """A parsed pattern as plain lists and tuples: `sre_parse`'s own sequences index
    through a Python method, a cost the anchor walk would pay at every step."""
    plain: list[tuple[Any, Any]] = []
    for op, av in items:
        if op is _c.BRANCH:
            av = (av[0], [_plain(alternative) for alternative in av[1]])
        elif op is _c.SUBPATTERN:
            av = (*av[:-1], _plain(av[-1]))
        elif op in _REPEATS:
            av = (av[0], av[1], _plain(av[2]))
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            av = (av[0], _plain(av[1]))
        elif _ATOMIC is not None and op is _ATOMIC:
            av = _plain(av)
        elif op is _c.IN:
            av = list(av)
        plain.append((op, av))
    return plain


def _usable(found: set[str] | None) -> frozenset[str] | None:
    """The literals folded as the text is (`fold`), or None (none, too many, or one with a
    character that does not fold to one character)."""
    if not found or len(found) > _MAX_LITERALS:
        return None
    folded: set[str] = set()
    for literal in found:
        chars = [_anchor_char(char) for char in literal]
        if not literal or "" in chars:
            return None
        folded.add("".join(chars))
    return frozenset(folded)


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
            deeper = _one_of_each(av[1])
            if deeper is not None and deeper != literals:
                required.append(deeper)
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


def _one_of_each(alternatives: list[Any]) -> frozenset[str] | None:
    """For a branch, the longest required literals of each alternative, together: every
    match goes through one alternative, so it holds one of them. Where the beginnings
    are common words ("send me" before a dozen objects), the objects are rarer: a reply
    repeating "send me your card number" holds none of "national id" or "seed phrase"."""
    found: set[str] = set()
    for alternative in alternatives:
        groups = _required(list(alternative))
        if not groups:
            return None
        found |= max(groups, key=lambda group: (min(map(len, group)), -len(group)))
        if len(found) > _MAX_LITERALS:
            return None
    return frozenset(found)


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
    """A class of at most `_MAX_CLASS` literal characters that fold to one character each
    (no range, no negation)."""
    return len(members) <= _MAX_CLASS and all(
        op is _c.LITERAL and _anchor_char(chr(av)) for op, av in members
    )


class _Unanchored(Exception):
    """A match of the pattern can begin with something that is not a literal."""


class _OverBudget(_Unanchored):
    """Reading the pattern's beginnings took more than `_WALK_BUDGET` steps."""


_WALK_BUDGET = 20000  # steps of reading one pattern's beginnings (a pattern with more has none)


@lru_cache(maxsize=4096)
def leading_anchors(pattern: re.Pattern[str]) -> frozenset[tuple[str, ...]] | None:
    """Word sequences one of which every match of `pattern` begins with, or None.

    An anchor `("you", "should")` says: the match begins with "you", and "should" begins
    where the whitespace after it ends (there may be none). Anchors are read from the
    parsed pattern through groups, alternatives, optional parts and `\\s`, `\\s+` or
    `\\s*` between literals, up to `_MAX_WORDS` words, in lower case. A literal
    character is read when it is ASCII or has no case (the apostrophe in "i’ll"). In a
    degenerate reply a phrase's first word ("you") can be at every other position;
    "you should" or "you should die" is rare, so far fewer places are tried."""
    parsed = _parsed(pattern)
    if parsed is None:
        return None
    # fewer words when there are too many anchors, or too many steps to read them all
    # (the Arabic patterns' optional "و"/"ف" before a dozen verbs, each before a dozen
    # objects): the anchors of fewer words still begin every match, only more places
    for most in range(_MAX_WORDS, 0, -1):
        try:
            return _Walk(most).anchors(parsed)
        except _OverBudget:
            continue
        except _Unanchored:
            return None
    return None


# What is left of a pattern after the items read so far: (items, next index, what is
# left after them, a key naming this place), or None at the pattern's end. Shared,
# never copied: each alternative of a branch goes on into the same rest.
_Rest = tuple[list[tuple[Any, Any]], int, Any, tuple[Any, ...]] | None
_STOPPED: _Rest = ([_STOP], 0, None, ())


def _rest(items: list[tuple[Any, Any]], index: int, after: _Rest) -> _Rest:
    return items, index, after, (id(items), index, None if after is None else after[3])


class _Walk:
    """One reading of a pattern's anchors of at most `most` words. A place of the
    pattern reached with as many words read and the same word begun gives the same
    rest of an anchor whatever came before ("و"/"ف"/"" times a dozen verbs, each before
    the same dozen objects): each is read once."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.steps = _WALK_BUDGET
        self._known: dict[tuple[Any, ...], frozenset[tuple[str, ...]]] = {}

    def anchors(self, parsed: list[tuple[Any, Any]]) -> frozenset[tuple[str, ...]]:
        """Raises `_Unanchored` (or `_OverBudget`: too many steps or anchors)."""
        return frozenset(map(_finished, self.tails(parsed, 0, _STOPPED, 0, "")))

    def tails(
        self, items: list[tuple[Any, Any]], index: int, after: _Rest, depth: int, current: str
    ) -> frozenset[tuple[str, ...]]:
        """The words an anchor goes on with from `items[index]` (then `after`), when
        `depth` words are read and `current` is begun."""
        key = (id(items), index, None if after is None else after[3], depth, current)
        known = self._known.get(key)
        if known is None:
            self.steps -= 1
            if self.steps < 0:
                raise _OverBudget
            known = self._known[key] = frozenset(self._read(items, index, after, depth, current))
            if len(known) > _MAX_ANCHORS:
                raise _OverBudget
        return known

    def _read(
        self, items: list[tuple[Any, Any]], index: int, after: _Rest, depth: int, current: str
    ) -> set[tuple[str, ...]]:
        words: tuple[str, ...] = ()  # read here, after the `depth` before
        while True:
            if index == len(items):
                if after is None:
                    break
                items, index, after, _ = after
                continue
            op, av = items[index]
            index += 1
            if op in _ZERO_WIDTH:
                continue
            if op is _c.LITERAL or (op is _c.IN and _small_class(av)):
                chars = _item_chars(op, av)
                read = depth + len(words)
                if "" in chars or (read and not current and any(c.isspace() for c in chars)):
                    break  # a character that cannot be read, or whitespace after a gap
                if len(chars) == 1:
                    current += chars[0]
                    continue
                ways = [(items, index, after, current + char) for char in chars]
                return self._then(words, ways, depth)
            if _is_gap(op, av):
                if current:
                    words, current = (*words, current), ""
                    if depth + len(words) == self.most:
                        return {words}
                elif not depth + len(words):
                    raise _Unanchored  # the match can begin with whitespace
                continue
            rest = _rest(items, index, after)
            if op is _c.BRANCH:
                return self._then(words, [(alt, 0, rest, current) for alt in av[1]], depth)
            if op is _c.SUBPATTERN or (_ATOMIC is not None and op is _ATOMIC):
                items, index, after = (av[-1] if op is _c.SUBPATTERN else av), 0, rest
                continue
            if op in _REPEATS and not current and depth + len(words) and _is_word_run(av, rest):
                words = (*words, ANY_WORD)  # a word of any letters, then whitespace
                if depth + len(words) == self.most:
                    break
                continue
            if op in _REPEATS:
                low, high, body = av
                ways = []
                if high != 0:  # one repeat, then the rest when there is at most one
                    ways.append((body, 0, rest if high == 1 else _STOPPED, current))
                if low == 0:
                    ways.append((items, index, after, current))
                return self._then(words, ways, depth)
            break
        return {(*words, current) if current else words}

    def _then(
        self,
        words: tuple[str, ...],
        ways: list[tuple[list[tuple[Any, Any]], int, _Rest, str]],
        depth: int,
    ) -> set[tuple[str, ...]]:
        """`words`, then the tails of each way on (items, index, after, word begun)."""
        found: set[tuple[str, ...]] = set()
        for items, index, after, current in ways:
            tails = self.tails(items, index, after, depth + len(words), current)
            found.update((*words, *tail) for tail in tails) if words else found.update(tails)
        return found


def _following(rest: _Rest) -> Iterator[tuple[Any, Any]]:
    """The items of a pattern's rest, in order."""
    while rest is not None:
        items, index, rest, _ = rest
        yield from items[index:]


def _finished(words: tuple[str, ...]) -> tuple[str, ...]:
    """An anchor without the `ANY_WORD`s it ends with (they rule nothing out)."""
    while words and words[-1] == ANY_WORD:
        words = words[:-1]
    if not words:
        raise _Unanchored
    return words


def _is_word_run(repeat: Any, rest: _Rest) -> bool:
    """Whether a repeat is `\\w+` and whitespace must follow it (so the word ends where
    the next whitespace is)."""
    low, _high, body = repeat
    if low < 1 or list(body) != _WORD_CLASS:
        return False
    for op, av in _following(rest):
        if op not in _ZERO_WIDTH:
            return _gap_least(op, av) >= 1
    return False


def _item_chars(op: Any, av: Any) -> list[str]:
    """The characters, as the automaton reads them (sorted, distinct), of a literal or a
    small class; "" among them when one cannot be read."""
    if op is _c.LITERAL:
        return [_anchor_char(chr(av))]
    return sorted({_anchor_char(chr(member)) for _, member in av})


@lru_cache(maxsize=8192)
def _anchor_char(char: str) -> str:
    """`char` as the automaton reads it (folded as the text is), or "" when it cannot be
    read there: its lower case is more than one character."""
    if char.isascii():
        return char.lower()
    lower = char.lower()
    if len(lower) != 1:
        return ""
    return _FOLDS.get(lower, lower)


def _is_gap(op: Any, av: Any) -> bool:
    """Whether an item matches whitespace only: `\\s`, or `\\s` repeated."""
    return _gap_least(op, av) >= 0


def _gap_least(op: Any, av: Any) -> int:
    """The fewest whitespace characters a whitespace-only item matches, -1 for another."""
    if op in _REPEATS:
        body = list(av[2])
        inner = _gap_least(*body[0]) if len(body) == 1 else -1
        return -1 if inner < 0 else av[0] * inner
    return 1 if op is _c.IN and list(av) == _SPACE_CLASS else -1


def starts_a_word(pattern: re.Pattern[str]) -> bool:
    """Whether every match of `pattern` starts at a word start: a `\\b` or `(?<!\\w)`
    before its first character, and literal beginnings that all start with a word
    character (so a place right after a word character is no beginning)."""
    parsed = _parsed(pattern)
    anchors = leading_anchors(pattern)
    if parsed is None or anchors is None:
        return False
    if not all(anchor[0][0] in _ASCII_WORD for anchor in anchors):
        return False
    for op, av in parsed:
        if op not in _ZERO_WIDTH:
            return False
        if (op is _c.AT and av is _c.AT_BOUNDARY) or (
            op is _c.ASSERT_NOT and av[0] == -1 and _is_word_class(list(av[1]))
        ):
            return True
    return False


def _is_word_class(items: list[tuple[Any, Any]]) -> bool:
    """Whether `items` is one class holding every `\\w` character (`[\\w]`, or `\\w`
    with more, such as the combining marks: not after one is still not after a `\\w`)."""
    if len(items) != 1 or items[0][0] is not _c.IN:
        return False
    members = list(items[0][1])
    return (_c.CATEGORY, _c.CATEGORY_WORD) in members and (_c.NEGATE, None) not in members


def _rare_enough(literal: str) -> bool:
    """Whether a literal is worth looking for to bound where a pattern is tried."""
    least = _MIN_ASCII_WINDOW_LITERAL if literal.isascii() else _MIN_WINDOW_LITERAL
    return len(literal) >= least


def reach(pattern: re.Pattern[str]) -> int | None:
    """At most how many units a match of `pattern` spans when a run of whitespace counts
    as one unit (`_Places.units`), or None when that is unbounded (`\\w+`, `.*`). A
    whitespace-only item (`\\s+`, `\\s*`) reads within one run: at most one unit."""
    parsed = _parsed(pattern)
    return None if parsed is None else _reach(parsed)


def _reach(items: list[tuple[Any, Any]]) -> int | None:
    return _widest(items, _units)


_GO_IN = -1  # from a leaf measure: not a leaf, measure what it holds


def _widest(items: list[tuple[Any, Any]], leaf: Callable[[Any, Any], int | None]) -> int | None:
    """The most a match of `items` can take, summed item by item: `leaf` measures an
    item (or says `_GO_IN`: a group, alternatives or a bounded repeat, measured from what
    they hold); None when unbounded."""
    total = 0
    for op, av in items:
        width = leaf(op, av)
        if width == _GO_IN:
            if op is _c.SUBPATTERN:
                width = _widest(av[-1], leaf)
            elif _ATOMIC is not None and op is _ATOMIC:
                width = _widest(av, leaf)
            elif op is _c.BRANCH:
                width = _most([_widest(alternative, leaf) for alternative in av[1]])
            elif op in _REPEATS and av[1] < _c.MAXREPEAT:
                inner = _widest(av[2], leaf)
                width = None if inner is None else av[1] * inner
            else:
                width = None
        if width is None:
            return None
        total += width
    return total


def _most(widths: list[int | None]) -> int | None:
    """The widest of alternatives, None when one is unbounded."""
    return None if None in widths else max(w for w in widths if w is not None)


def _units(op: Any, av: Any) -> int | None:
    """`reach`'s measure: a character is a unit, so is a run of whitespace."""
    if op in _ZERO_WIDTH:
        return 0
    return 1 if _only_space(op, av) or op in _ONE_CHARACTER else _GO_IN


def _runs(op: Any, av: Any) -> int | None:
    """`blank_runs`' measure: what never matches whitespace reads into no run."""
    if op in _ZERO_WIDTH or _never_space(op, av):
        return 0
    return 1 if _only_space(op, av) or op in _ONE_CHARACTER else _GO_IN


def _chars(op: Any, av: Any) -> int | None:
    """`_characters`' measure: a character each."""
    if op in _ZERO_WIDTH:
        return 0
    return 1 if op in _ONE_CHARACTER else _GO_IN


_ONE_CHARACTER = {_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN, _c.CATEGORY}


def blank_runs(pattern: re.Pattern[str]) -> int | None:
    """At most how many runs of whitespace a match of `pattern` reads into, or None when
    that is unbounded. Unlike `reach`, words of any length count nothing: `schick\\w*\\s+
    (?:mir|uns)` reads into one run, so "mir" is at most two tokens after "schick"
    (`_Places.tokens`)."""
    parsed = _parsed(pattern)
    return None if parsed is None else _blank_runs(parsed)


def _blank_runs(items: list[tuple[Any, Any]]) -> int | None:
    return _widest(items, _runs)


def read_extent(pattern: re.Pattern[str]) -> tuple[int, int] | None:
    """(characters read before a match's start, units read from it: its `reach` and
    what its lookaheads and word boundaries look at), or None when unbounded or when the
    pattern looks at the text's beginning or end (its outcome would depend on where it
    is tried, not only on the text around)."""
    parsed = _parsed(pattern)
    if parsed is None:
        return None
    back = _behind(parsed)
    ahead = _ahead(parsed)
    return None if back is None or ahead is None else (back + 1, ahead + 1)


_BOUNDARIES = {_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY}


def _behind(items: list[tuple[Any, Any]]) -> int | None:
    """The most characters a lookbehind in `items` reads (a lookbehind has a fixed width)."""
    most = 0
    for op, av in items:
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            width = _characters(av[1]) if av[0] < 0 else _behind(av[1])
        elif op is _c.AT:
            width = 0 if av in _BOUNDARIES else None
        elif op is _c.SUBPATTERN or op in _REPEATS:
            width = _behind(av[-1])
        elif _ATOMIC is not None and op is _ATOMIC:
            width = _behind(av)
        elif op is _c.BRANCH:
            width = _most([_behind(alternative) for alternative in av[1]])
        elif op in _ONE_CHARACTER:
            width = 0
        else:
            return None
        if width is None:
            return None
        most = max(most, width)
    return most


def _characters(items: list[tuple[Any, Any]]) -> int | None:
    """The most characters `items` consume (None: unbounded)."""
    return _widest(items, _chars)


def _ahead(items: list[tuple[Any, Any]]) -> int | None:
    """The most units `items` read from where they start: what they consume (`reach`),
    or further where a lookahead or a word boundary looks."""
    consumed = 0
    most = 0
    for op, av in items:
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            extent = _ahead(av[1])  # (a lookbehind's own lookaheads, too)
        elif op is _c.AT:
            extent = 1 if av in _BOUNDARIES else None
        elif op is _c.SUBPATTERN:
            extent = _ahead(av[-1])
        elif _ATOMIC is not None and op is _ATOMIC:
            extent = _ahead(av)
        elif op is _c.BRANCH:
            extent = _most([_ahead(alternative) for alternative in av[1]])
        elif op in _REPEATS and not _only_space(op, av):
            inner, body = _reach(av[2]), _ahead(av[2])
            if inner is None or body is None or av[1] >= _c.MAXREPEAT:
                return None
            extent = max(av[1] - 1, 0) * inner + body
        else:
            extent = _reach([(op, av)])
        if extent is None:
            return None
        most = max(most, consumed + extent)
        if op not in _ZERO_WIDTH:
            width = _reach([(op, av)])
            if width is None:
                return None
            consumed += width
    return most


_NOT_SPACE_CATEGORIES = {_c.CATEGORY_WORD, _c.CATEGORY_DIGIT, _c.CATEGORY_NOT_SPACE}
_SPACES = [code for code in range(0x3001) if chr(code).isspace()]  # none above U+3000


def _never_space(op: Any, av: Any) -> bool:
    """Whether an item never matches whitespace (`\\w*`, `[a-z]+`, a letter)."""
    if op is _c.LITERAL:
        return not chr(av).isspace()
    if op is _c.CATEGORY:
        return av in _NOT_SPACE_CATEGORIES
    if op is _c.IN:
        return all(
            _never_space(kind, value) or _range_without_space(kind, value) for kind, value in av
        )
    if op in _REPEATS or op is _c.SUBPATTERN:
        return all(_never_space(*item) for item in av[-1])
    return False


def _range_without_space(kind: Any, value: Any) -> bool:
    return kind is _c.RANGE and not any(value[0] <= code <= value[1] for code in _SPACES)


def _only_space(op: Any, av: Any) -> bool:
    """Whether an item matches whitespace only (so whatever it matches is in one run)."""
    if op is _c.LITERAL:
        return chr(av).isspace()
    if op is _c.IN:
        return all(
            (kind is _c.CATEGORY and value is _c.CATEGORY_SPACE)
            or (kind is _c.LITERAL and chr(value).isspace())
            for kind, value in av
        )
    if op in _REPEATS or op is _c.SUBPATTERN:
        return all(_only_space(*item) for item in av[-1])
    return False


_DIGIT_CLASS = [(_c.IN, [(_c.CATEGORY, _c.CATEGORY_DIGIT)])]  # `\\d` in a parsed pattern


def starts_with_a_digit(pattern: re.Pattern[str]) -> bool:
    """Whether every match of `pattern` begins with a decimal digit (`\\d`, `\\d+`,
    `\\d{1,3}` first, after zero-width assertions): "10% par mois garanti"."""
    parsed = _parsed(pattern)
    for op, av in parsed or ():
        if op in _ZERO_WIDTH:
            continue
        if op in _REPEATS:
            return av[0] >= 1 and list(av[2]) == _DIGIT_CLASS
        return [(op, av)] == _DIGIT_CLASS
    return False


@lru_cache(maxsize=1)
def _is_digit_table() -> np.ndarray:
    """Which code points of the Basic Multilingual Plane `\\d` matches (the decimal
    digits of every script); the last entry, for any beyond, says "may be"."""
    return np.array([chr(code).isdecimal() for code in range(0x10000)] + [True])


def case_folds() -> dict[str, str]:
    """Lower-case letters that IGNORECASE equates with another lower-case letter (they
    share an upper case: "ı" and "i", "ς" and "σ", "ᲁ" and "д"), each -> one of its class.
    Computed from this Python's Unicode data (65,536 code points: a tenth of a second at
    every start), so the table below is written out, and a test checks it against this."""
    classes: dict[str, set[str]] = {}
    for code in range(0x10000):  # every letter with such a twin is in the BMP
        lower = chr(code).lower()
        if len(lower) == 1:
            classes.setdefault(lower.upper(), set()).add(lower)
    folds: dict[str, str] = {}
    for members in classes.values():
        if len(members) > 1:
            first = min(members)
            folds.update((member, first) for member in members if member != first)
    return folds


# `case_folds()` of Python 3.11's Unicode 14 (tests/test_hostile_text.py compares them).
_FOLDS = {
    "\u0131": "\u0069",
    "\u017f": "\u0073",
    "\u03b9": "\u0345",
    "\u03bc": "\u00b5",
    "\u03c3": "\u03c2",
    "\u03d0": "\u03b2",
    "\u03d1": "\u03b8",
    "\u03d5": "\u03c6",
    "\u03d6": "\u03c0",
    "\u03f0": "\u03ba",
    "\u03f1": "\u03c1",
    "\u03f5": "\u03b5",
    "\u1c80": "\u0432",
    "\u1c81": "\u0434",
    "\u1c82": "\u043e",
    "\u1c83": "\u0441",
    "\u1c84": "\u0442",
    "\u1c85": "\u0442",
    "\u1c86": "\u044a",
    "\u1c87": "\u0463",
    "\u1e9b": "\u1e61",
    "\u1fbe": "\u0345",
    "\u1fd3": "\u0390",
    "\u1fe3": "\u03b0",
    "\ua64b": "\u1c88",
    "\ufb06": "\ufb05",
}
# `_FOLDS` by code point (every other code point maps to itself), for numpy: `str.translate`
# looks every character up in a dict (about 0.06 us each: 16 ms for a 256 KiB reply
# holding one Turkish "ı"), a table lookup over the code points costs a tenth of that.
_FOLD_CODES = np.arange(max(map(ord, _FOLDS)) + 2, dtype=np.uint32)
for _letter, _twin in _FOLDS.items():
    _FOLD_CODES[ord(_letter)] = ord(_twin)
# a regex search for the few letters that fold is a C scan: most texts hold none
_FOLDED_LETTER = re.compile("[" + "".join(map(re.escape, _FOLDS)) + "]")


_FEW_FOLDS = 64  # letters to map above which the whole text is mapped by code point


def _fold_letter(letter: re.Match[str]) -> str:
    return _FOLDS[letter[0]]


@lru_cache(maxsize=1)  # a turn is folded by the keyword prefilter, then the negation check
def fold(text: str) -> str | None:
    """`text` lower-cased for the automaton, with the letters IGNORECASE equates mapped
    to one (`_FOLDS`), or None when lower-casing changes its length."""
    folded = text.lower()
    if len(folded) != len(text):
        return None
    twin = None if folded.isascii() else _FOLDED_LETTER.search(folded)
    if twin is not None:
        # a few such letters (a Turkish "ı" in a long reply) are replaced where they are
        before, rest = folded[: twin.start()], folded[twin.start() :]
        replaced, count = _FOLDED_LETTER.subn(_fold_letter, rest, count=_FEW_FOLDS + 1)
        if count <= _FEW_FOLDS:
            return before + replaced
        codes = np.frombuffer(folded.encode("utf-32-le", "surrogatepass"), "<u4")
        beyond = codes >= len(_FOLD_CODES) - 1  # the table's last entry is no letter's
        mapped = np.where(beyond, codes, _FOLD_CODES[np.minimum(codes, len(_FOLD_CODES) - 1)])
        folded = mapped.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    return folded


# In an anchor: a run of word characters (`\\w+` between two stretches of whitespace)
ANY_WORD = "\\w+"
_ANY_WORD_ID = -1


class LiteralPrefilter:
    """`finditer` of several patterns over one text, each run only where it can start."""

    def __init__(
        self, patterns: Sequence[re.Pattern[str]], facts: Sequence[PatternFacts] | None = None
    ) -> None:
        """`facts`: each pattern's `pattern_facts`, computed before (else computed here)."""
        self.patterns = tuple(patterns)
        known = list(facts) if facts is not None else [pattern_facts(p) for p in self.patterns]
        if len(known) != len(self.patterns):
            raise ValueError("one PatternFacts per pattern")
        self._anchors = [fact.anchors for fact in known]
        # A short literal is in most texts and costs a report at most positions: only
        # literals of `_MIN_REQUIRED` characters or more are checked for presence.
        self._required = [
            [needed for needed in fact.required if min(map(len, needed)) >= _MIN_REQUIRED]
            for fact in known
        ]
        # A pattern tried at many places (its first word is everywhere) is tried only
        # where its other required literals are within its reach (`reach`): "anydesk"
        # repeated 30,000 times before one "send me the code" is one attempt, not 30,000.
        self._windows: list[tuple[int | None, int | None, list[frozenset[str]]] | None] = []
        for fact in known:
            width, runs = fact.reach, fact.blank_runs
            first_words = frozenset(anchor[0] for anchor in fact.anchors or ())
            groups = [
                needed
                for needed in fact.required
                if all(map(_rare_enough, needed)) and not needed <= first_words
            ]
            bounded = width is not None or runs is not None
            self._windows.append((width, runs, groups) if bounded and groups else None)
        words: set[str] = set()
        for window in self._windows:
            for alternatives in window[2] if window else ():
                words.update(alternatives)
        for anchors in self._anchors:
            for anchor in anchors or ():
                words.update(word for word in anchor if word != ANY_WORD)
        for required in self._required:
            for alternatives in required:
                words.update(alternatives)
        self._literals = sorted(words)
        self._lengths = np.array([len(literal) for literal in self._literals], dtype=np.int64)
        self._longest = int(self._lengths.max(initial=1))
        number = {literal: index for index, literal in enumerate(self._literals)}
        number[ANY_WORD] = _ANY_WORD_ID
        self._anchor_ids: list[dict[int, list[tuple[int, ...]]] | None] = []
        for anchors in self._anchors:
            by_first: dict[int, list[tuple[int, ...]]] | None = None
            if anchors is not None:
                by_first = {}
                for anchor in sorted(anchors):
                    ids = tuple(number[word] for word in anchor)
                    by_first.setdefault(ids[0], []).append(ids)
            self._anchor_ids.append(by_first)
        self._required_ids = [
            [frozenset(number[literal] for literal in needed) for needed in required]
            for required in self._required
        ]
        self._window_ids = [
            None
            if window is None
            else (
                window[0],
                window[1],
                [sorted(number[lit] for lit in needed) for needed in window[2]],
            )
            for window in self._windows
        ]
        self._word_start = [fact.starts_a_word for fact in known]
        # how far before and after its start an attempt of the pattern reads (a run of
        # one piece repeated is tried in its first copy only when it fails there)
        self._extents = [fact.read_extent for fact in known]
        # a pattern without literal beginnings that begins with a digit ("\\d+ ?% par
        # mois") is tried where digits are, unless they are everywhere
        self._digit_led = [fact.starts_with_a_digit for fact in known]
        if any(self._digit_led):
            _is_digit_table()  # built with the prefilter (before a worker forks), not per text
        # each one-character literal's number at its code point (-1: none), found in one
        # pass over a text's code points
        characters = {ord(lit): index for index, lit in enumerate(self._literals) if len(lit) == 1}
        self._character_ids = np.full(max(characters, default=-1) + 2, -1, dtype=np.int64)
        for code, index in characters.items():
            self._character_ids[code] = index
        # Which patterns a literal's presence can wake: an anchored pattern only matches
        # where one of its anchors' first words is; one without anchors only where every
        # required literal group has one present (or always, with none). A pattern with
        # required literals is woken by one group of them only, the one whose shortest
        # literal is longest (the rarest, most likely: "kill" rather than "you"), and
        # then also needs a first word present (`_first_words`): it is tried where it was
        # before, but most replies wake far fewer patterns. Most texts hold few literals,
        # so `candidates` looks at only the patterns they wake.
        self._always: list[int] = []
        self._first_words: list[frozenset[int] | None] = [None] * len(self.patterns)
        woken: dict[int, set[int]] = {}
        for index, by_first in enumerate(self._anchor_ids):
            needs = self._required_ids[index]
            if by_first is not None:
                firsts = list(by_first)
            else:
                firsts = [literal for needed in needs for literal in needed]
            if (by_first is None and not firsts) or _ANY_WORD_ID in firsts:
                self._always.append(index)
                continue
            if needs:
                trigger = max(needs, key=self._rarity)
                firsts = sorted(trigger)
                if by_first is not None:
                    self._first_words[index] = frozenset(by_first)
            for first in firsts:
                woken.setdefault(first, set()).add(index)
        self._woken = {first: sorted(indexes) for first, indexes in woken.items()}
        # the literals of two characters or more, read by an automaton: all of them in a
        # short text, all but the ASCII pairs in a long one (`_literal_starts`)
        longer = [index for index, literal in enumerate(self._literals) if len(literal) > 1]
        self._short_reader = _LiteralReader(self._literals, longer)
        self._long_reader = _LiteralReader(self._literals, longer, pairs_apart=True)

    def finditer_all(self, text: str) -> list[Iterator[re.Match[str]]]:
        """For each pattern, in order, what `pattern.finditer(text)` yields."""
        hits: list[Iterator[re.Match[str]]] = [_NO_MATCHES] * len(self.patterns)
        for index, found in self.candidates(text):
            hits[index] = found
        return hits

    def candidates(self, text: str) -> list[tuple[int, Iterator[re.Match[str]]]]:
        """(pattern index, what `pattern.finditer(text)` yields), in pattern order, for
        the patterns that may match `text`; every other pattern has no match in it.

        A short text without a repeating run (a reply, most of the time) is read by the
        automaton first for which literals it holds; where each starts is grouped only
        when a pattern has all its required literals there. Most replies hold fifty-odd
        short literals ("you", "the", ",") and wake no such pattern, and grouping their
        places was two thirds of the time `candidates` took on them."""
        folded = fold(text) if self._literals else None
        if folded is None:
            return [(index, pattern.finditer(text)) for index, pattern in enumerate(self.patterns)]
        codes = code_points(folded)
        run = _run_of(folded)
        if run is None and len(codes) <= _FEW_UNITS:
            read = self._short_reader.reports(folded)
            character_ids, character_places = self._character_places(codes)
            present = self._short_reader.numbers(read[1])
            present.update(character_ids.tolist())
            tried = self._tried(present)
            if not tried:
                return []
            starts = self._short_reader.starts(folded, codes, read=read)
            starts.update(_grouped_places(character_ids, character_places))
        else:
            starts = self._literal_starts(folded, codes)
            tried = self._tried(starts.keys())
        places = _Places(folded, starts, self._lengths, codes)
        hits: list[tuple[int, Iterator[re.Match[str]]]] = []
        for index in tried:
            pattern = self.patterns[index]
            anchors = self._anchor_ids[index]
            if anchors is None:
                digits = places.digits() if self._digit_led[index] else None
                if digits is None:
                    hits.append((index, pattern.finditer(text)))
                else:
                    hits.append((index, _matches_at(pattern, text, digits)))
            else:
                candidates = places.anchored(anchors, self._word_start[index])
                window = self._window_ids[index]
                if window is not None and len(candidates) > _FEW_PLACES:
                    candidates = places.within_reach(np.asarray(candidates), *window)
                extent = self._extents[index]
                if run is not None and extent is not None and len(candidates) > _FEW_PLACES:
                    candidates = places.without_repeated_failures(
                        pattern, text, np.asarray(candidates), run, *extent
                    )
                hits.append((index, _matches_at(pattern, text, candidates)))
        return hits

    def _literal_starts(self, folded: str, codes: np.ndarray) -> dict[int, np.ndarray]:
        """For each literal in `folded` (of these code points), the sorted positions where
        it starts (literals that are not in it have no entry). One-character literals
        ("i", ",") are not in the automaton: one pass over the code points finds them.
        Nor, in a text of more than `_FEW_UNITS` characters, are the ASCII pairs
        (`_LiteralReader`).

        A text that begins or ends with one piece repeated (`_repeating_run`: a token or a
        sentence over and over, the everyday degenerate reply) is scanned up to the end
        of the piece's first copy and from the end of the run on; the literals' starts in
        between are that copy's, repeated (`_tiled`): the same positions, without reading
        every copy."""
        long = len(codes) > _FEW_UNITS
        reader = self._long_reader if long else self._short_reader
        run = _run_of(folded)
        if run is None:
            found = reader.starts(folded, codes)
        else:
            start, end, period = run
            read = start + period + self._longest - 1
            head = reader.starts(folded[:read], codes[:read])
            # a start from here on may end past the run: read, not repeated
            after = max(end - self._longest + 1, start + period)
            tail = reader.starts(folded[after:], codes[after:], offset=after)
            # a literal only after the run is nowhere in it: its starts are the tail's
            found = {literal: at for literal, at in tail.items() if literal not in head}
            for literal, at in head.items():
                fits = end - int(self._lengths[literal]) + 1  # starts that end in the run
                later = tail.get(literal, _NO_STARTS)
                found[literal] = np.concatenate(
                    (_tiled(at, start, period, fits), later[np.searchsorted(later, fits) :])
                )
        found.update(_grouped_places(*self._character_places(codes)))
        return found

    def _tried(self, present: AbstractSet[int]) -> list[int]:
        """The patterns, in order, that the literals `present` in a text wake and that
        have one literal of each of their required groups among them (a pattern missing
        one has no match in the text)."""
        woken = set(self._always)
        for literal in present:
            woken.update(self._woken.get(literal, ()))
        tried = []
        for index in sorted(woken):
            if any(present.isdisjoint(needed) for needed in self._required_ids[index]):
                continue  # a literal every match needs is not in the text
            firsts = self._first_words[index]
            if firsts is not None and present.isdisjoint(firsts):
                continue  # woken by a required literal, but no anchor begins here
            tried.append(index)
        return tried

    def _rarity(self, group: Collection[int]) -> tuple[int, int]:
        """How rare a required literal group likely is: its shortest literal's length,
        then fewer alternatives."""
        return min(int(self._lengths[literal]) for literal in group), -len(group)

    def _character_places(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(literal number, place) of each one-character literal in a text of these code
        points, in order of place."""
        characters = lookup(self._character_ids, codes)
        places = np.flatnonzero(characters >= 0)
        return characters[places], places

    def count_all(self, text: str) -> list[int]:
        """For each pattern, `len(pattern.findall(text))`."""
        return [sum(1 for _ in hits) for hits in self.finditer_all(text)]


class _LiteralReader:
    """The starts of some of a prefilter's literals (given by number) in a text: an
    Aho-Corasick automaton reads them; with `pairs_apart`, all but the ASCII pairs ("in",
    "to": two thirds of an English text's reports), which one table lookup over the
    text's pairs of code points finds (in a short text the lookup costs more than the
    reports it saves)."""

    def __init__(
        self, literals: Sequence[str], numbers: list[int], pairs_apart: bool = False
    ) -> None:
        self._pair_ids: np.ndarray | None = None
        if pairs_apart:
            self._pair_ids = np.full(_PAIR_BASE * _PAIR_BASE, -1, dtype=np.int64)
            for number in numbers:
                if _is_ascii_pair(literals[number]):
                    first, second = map(ord, literals[number])
                    self._pair_ids[first * _PAIR_BASE + second] = number
            numbers = [number for number in numbers if not _is_ascii_pair(literals[number])]
        self._numbers = numbers
        self._number_array = np.array(numbers, dtype=np.int64)
        self._automaton: Any = None
        if numbers:
            self._automaton = ahocorasick_rs.BytesAhoCorasick(
                [literals[number].encode("utf-8", "surrogatepass") for number in numbers],
                implementation=ahocorasick_rs.Implementation.ContiguousNFA,
            )

    def starts(
        self,
        folded: str,
        codes: np.ndarray,
        offset: int = 0,
        read: tuple[bytes, list[tuple[int, int, int]]] | None = None,
    ) -> dict[int, np.ndarray]:
        """For each of its literals in `folded` (of these code points), by number, the
        sorted positions where it starts, each plus `offset` (where `folded` begins in
        the text).

        The automaton (`ahocorasick_rs`, in Rust) reads the text's UTF-8 bytes, about 6 ns
        each where `pyahocorasick` took 30-40 (256 KiB of distinct Chinese sentences, 768
        KiB of UTF-8: 4 ms instead of 24); a match's first byte maps back to its character
        (`_first_bytes`). The matches are the same as the characters': a literal's bytes
        can only match where a character begins (UTF-8's first bytes are never
        continuation bytes) and end where one ends. Lone surrogates are encoded as UTF-8
        would encode their code points (`surrogatepass`), so every text can be read.

        A long text's reports are flattened into an array and grouped with numpy, with no
        Python step per report (a degenerate text has several at every word); a short
        text's are grouped in Python, where numpy's fixed costs per call would dominate.
        `read`: what `reports` returned for `folded`, when it was read before."""
        found: dict[int, np.ndarray] = {}
        if self._pair_ids is not None:
            pairs = np.take(self._pair_ids, _pair_index(codes))
            places = np.flatnonzero(pairs >= 0)
            found = _grouped_places(pairs[places], places + offset if offset else places)
        raw, reports = read if read is not None else self.reports(folded)
        return found | self._automaton_starts(folded, raw, reports, offset)

    def reports(self, folded: str) -> tuple[bytes, list[tuple[int, int, int]]]:
        """`folded`'s UTF-8 bytes and the automaton's reports on them (literal index among
        this reader's, start and end byte), overlapping ones too; none without literals."""
        if self._automaton is None:
            return b"", []
        raw = folded.encode("utf-8", "surrogatepass")
        return raw, self._automaton.find_matches_as_indexes(raw, overlapping=True)

    def numbers(self, reports: list[tuple[int, int, int]]) -> set[int]:
        """The literals (by the prefilter's numbers) that `reports` found."""
        literal_of = self._numbers
        return {literal_of[which] for which, _, _ in reports}

    def _automaton_starts(
        self, folded: str, raw: bytes, reports: list[tuple[int, int, int]], offset: int
    ) -> dict[int, np.ndarray]:
        if not reports:
            return {}
        ascii_only = len(raw) == len(folded)
        if len(raw) > _FEW_UNITS:
            flat = np.fromiter(chain.from_iterable(reports), np.int64, 3 * len(reports))
            ids = self._number_array[flat[0::3]]
            starts = flat[1::3]  # in UTF-8 bytes
            if not ascii_only:  # back to characters (each start is the first byte of one)
                starts = np.searchsorted(_first_bytes(raw), starts)
            return _grouped(ids, starts + offset if offset else starts)
        literal_of = self._numbers
        grouped: dict[int, list[int]] = {}
        for which, start, _ in reports:
            grouped.setdefault(literal_of[which], []).append(start)
        if not ascii_only:  # byte offsets back to characters
            character_at = (np.cumsum(_is_first_byte(raw)) - 1).tolist()
            grouped = {lit: [character_at[b] for b in at] for lit, at in grouped.items()}
        if offset:
            grouped = {literal: [start + offset for start in at] for literal, at in grouped.items()}
        return {literal: np.array(at, dtype=np.int64) for literal, at in grouped.items()}


def _is_ascii_pair(literal: str) -> bool:
    """Whether `literal` is two ASCII characters (in a long text found by `_pair_index`,
    not the automaton)."""
    return len(literal) == 2 and literal.isascii()


def _pair_index(codes: np.ndarray) -> np.ndarray:
    """For each position but the last, its code point and the next one's as one index of
    a table of ASCII pairs (`first * _PAIR_BASE + second`, any code point beyond ASCII
    read as 128, which no pair literal holds)."""
    capped = codes if codes.dtype == np.uint8 else np.minimum(codes, _PAIR_BASE - 1)
    wide = capped.astype(np.uint16)  # the largest index, 128 * 129 + 128, fits
    found: np.ndarray = wide[:-1] * np.uint16(_PAIR_BASE) + wide[1:]
    return found


def _grouped_places(ids: np.ndarray, places: np.ndarray) -> dict[int, np.ndarray]:
    """For each of `ids`, its `places` (sorted) in order: grouped with numpy, or in Python
    when there are few (numpy's fixed costs per call would dominate)."""
    if len(places) > _FEW_UNITS:
        return _grouped(ids, places)
    grouped: dict[int, list[int]] = {}
    for place, literal in zip(places.tolist(), ids.tolist(), strict=True):
        grouped.setdefault(literal, []).append(place)
    return {literal: np.array(at, dtype=np.int64) for literal, at in grouped.items()}


def _first_bytes(encoded: bytes) -> np.ndarray:
    """Where each character of a text begins in its UTF-8 `encoded` form, sorted: the
    character at index i starts at byte `_first_bytes(encoded)[i]`, so a byte offset
    where a character begins maps back to its index with `searchsorted`."""
    found: np.ndarray = np.flatnonzero(_is_first_byte(encoded))
    return found


def _is_first_byte(encoded: bytes) -> np.ndarray:
    """Which bytes of UTF-8 `encoded` begin a character (are no continuation byte)."""
    found: np.ndarray = (np.frombuffer(encoded, np.uint8) & 0xC0) != 0x80
    return found


def _anchors_of(pattern: re.Pattern[str]) -> frozenset[tuple[str, ...]] | None:
    """`leading_anchors`, else the leading literals as one-word anchors."""
    anchors = leading_anchors(pattern)
    if anchors is None:
        leading = leading_literals(pattern)
        anchors = None if leading is None else frozenset((literal,) for literal in leading)
    return anchors


@dataclass(frozen=True)
class PatternFacts:
    """What `LiteralPrefilter` reads of one pattern: a pure function of its source and
    flags (`pattern_facts`), so it can be computed once and shipped (`to_json`)."""

    anchors: frozenset[tuple[str, ...]] | None  # `leading_anchors`, or leading literals
    required: tuple[frozenset[str], ...]  # `required_literals`
    reach: int | None  # the next three only when it has anchors (else None)
    blank_runs: int | None
    read_extent: tuple[int, int] | None
    starts_a_word: bool
    starts_with_a_digit: bool  # looked at only without anchors (else False)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (sets as sorted lists; the required groups keep their order)."""
        return {
            "anchors": None if self.anchors is None else sorted(map(list, self.anchors)),
            "required": [sorted(group) for group in self.required],
            "reach": self.reach,
            "blank_runs": self.blank_runs,
            "read_extent": None if self.read_extent is None else list(self.read_extent),
            "starts_a_word": self.starts_a_word,
            "starts_with_a_digit": self.starts_with_a_digit,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PatternFacts:
        """The facts `to_json` wrote."""
        anchors, extent = data["anchors"], data["read_extent"]
        return cls(
            anchors=None if anchors is None else frozenset(map(tuple, anchors)),
            required=tuple(frozenset(group) for group in data["required"]),
            reach=data["reach"],
            blank_runs=data["blank_runs"],
            read_extent=None if extent is None else (int(extent[0]), int(extent[1])),
            starts_a_word=bool(data["starts_a_word"]),
            starts_with_a_digit=bool(data["starts_with_a_digit"]),
        )


def pattern_facts(pattern: re.Pattern[str]) -> PatternFacts:
    """Every analysis of `pattern` the prefilter uses (about 2 ms of parsing and walking
    a pattern: the 829 shipped ones take seconds, hence `PatternFacts.to_json`)."""
    anchors = _anchors_of(pattern)
    anchored = anchors is not None
    return PatternFacts(
        anchors=anchors,
        required=tuple(required_literals(pattern)),
        reach=reach(pattern) if anchored else None,
        blank_runs=blank_runs(pattern) if anchored else None,
        read_extent=read_extent(pattern) if anchored else None,
        starts_a_word=starts_a_word(pattern),
        starts_with_a_digit=not anchored and starts_with_a_digit(pattern),
    )


class _Places:
    """Where literals start in one folded text, and where anchors begin; an anchor's
    beginning shared by several patterns is found once."""

    def __init__(
        self, folded: str, starts: dict[int, np.ndarray], lengths: np.ndarray, codes: np.ndarray
    ) -> None:
        self.folded = folded
        self.starts = starts
        self.lengths = lengths
        self.codes = codes  # the folded text's code points (`code_points`)
        self._space: np.ndarray | None = None  # which positions hold whitespace
        self._words: np.ndarray | None = None  # where no whitespace is
        self._spaces: np.ndarray | None = None
        self._units: np.ndarray | None = None
        self._tokens: np.ndarray | None = None
        self._few: dict[tuple[bool, int], list[int] | None] = {}
        self._digits: tuple[np.ndarray | None] | None = None
        # (word start only, anchor beginning) -> (where it begins, where its last word ends)
        self._found: dict[tuple[bool, tuple[int, ...]], tuple[np.ndarray, np.ndarray]] = {}
        self._next: dict[tuple[bool, tuple[int, ...]], tuple[np.ndarray, np.ndarray]] = {}

    @property
    def space(self) -> np.ndarray:
        """Which positions of the folded text hold whitespace."""
        if self._space is None:
            self._space = is_space(self.codes)
        return self._space

    def next_word(self, positions: np.ndarray) -> np.ndarray:
        """For each position (or the end), where the whitespace from there ends."""
        return self._first_where(positions, False)

    def next_space(self, positions: np.ndarray) -> np.ndarray:
        """For each position (or the end), where the next whitespace is."""
        return self._first_where(positions, True)

    def _first_where(self, positions: np.ndarray, space: bool) -> np.ndarray:
        """For each position, the first at or after it whose whitespace is `space` (the
        end when none is). Most are found by looking at the next two places (a word
        after one space; a space after a short word); the rest by a binary search."""
        size = len(self.codes)
        found = np.minimum(positions, size)
        pending = np.arange(len(positions))
        for _ in range(_NEAR_STEPS):
            at = found[pending]
            inside = at < size
            pending = pending[inside]
            pending = pending[self.space[at[inside]] != space]
            if not len(pending):
                return found
            found[pending] += 1
        if space:
            if self._spaces is None:
                self._spaces = np.flatnonzero(self.space)
            marks = self._spaces
        else:
            if self._words is None:
                self._words = np.flatnonzero(~self.space)
            marks = self._words
        found[pending] = following(marks, found[pending], size)
        return found

    def anchored(
        self, anchors: dict[int, list[tuple[int, ...]]], word_start: bool
    ) -> np.ndarray | list[int]:
        """The sorted places where one of the anchors (literal numbers, by first word)
        begins; with `word_start`, only places not right after an ASCII word character.
        Where a first word is in few places, they are all taken (a failed regex attempt
        costs less than following the next words), as a list when every first word is
        (most patterns in most texts: numpy's cost per call would dominate)."""
        few: list[int] = []
        firsts = 0
        many: list[np.ndarray] = []
        for first in anchors.keys() & self.starts.keys():
            beginning_here = anchors[first]
            places = self._few_places(word_start, first)
            if places is None:
                many += [self._begins(word_start, anchor)[0] for anchor in beginning_here]
            elif places:
                few += places
                firsts += 1
        if firsts > 1:
            few = sorted(set(few))
        if not many:
            return few
        found = [places for places in many if len(places)]
        if few:
            found.append(np.array(few, dtype=np.int64))
        return _merged(found) if found else _NO_STARTS

    def _few_places(self, word_start: bool, first: int) -> list[int] | None:
        """Where literal `first` starts (with `word_start`, not right after an ASCII word
        character), when in at most `_FEW_PLACES` places; else None."""
        key = (word_start, first)
        if key not in self._few:
            at = self.starts[first]
            if len(at) > _FEW_PLACES * 2:  # too many, before ruling any out
                self._few[key] = None
                return None
            places = at.tolist()
            if word_start:
                text = self.folded
                places = [p for p in places if not p or text[p - 1] not in _ASCII_WORD]
            self._few[key] = places if len(places) <= _FEW_PLACES else None
        return self._few[key]

    def digits(self) -> np.ndarray | None:
        """Where the text has a decimal digit, or None when in more than `_MANY_DIGITS`
        places (a pattern's `finditer` then costs less than trying each)."""
        if self._digits is None:  # (found once: a tuple, since None is an answer)
            found = np.flatnonzero(lookup(_is_digit_table(), self.codes))
            self._digits = (found if len(found) <= _MANY_DIGITS else None,)
        return self._digits[0]

    @property
    def units(self) -> np.ndarray:
        """For each position (and the end), how many units come before it: a character
        that is not whitespace is one, a run of whitespace is one (see `reach`)."""
        if self._units is None:
            space = self.space
            unit = ~space
            unit[1:] |= space[1:] & ~space[:-1]
            unit[:1] |= space[:1]
            self._units = np.concatenate(([0], np.cumsum(unit, dtype=np.int64)))
        return self._units

    def without_repeated_failures(
        self,
        pattern: re.Pattern[str],
        text: str,
        candidates: np.ndarray,
        run: tuple[int, int, int],
        back: int,
        ahead: int,
    ) -> np.ndarray:
        """The `candidates`, less those inside a repeating run (`_repeating_run`) when
        the pattern matches at none of them in the run's first copy.

        An attempt from a place that reads (`read_extent`: `back` characters before it,
        `ahead` units from it) only inside the run reads the same characters as from
        one period earlier, so it ends the same: if none of the first copy's places (in
        the text's own reading) begins a match, none of the later ones does. (A place
        that is no candidate begins no match, so it fails too.) "ammazzati" repeated
        for 256 KiB is then one failed attempt of "ammazzati, unless 'da' follows", not
        29,000."""
        start, end, period = run
        units = self.units
        first = start + back  # from here, nothing before the run is read
        last = units[end] - ahead - 2  # from a place this many units in, nothing after
        inside = units[candidates] <= last
        in_first_copy = candidates[inside & (candidates >= first) & (candidates < first + period)]
        if any(pattern.match(text, place) for place in in_first_copy.tolist()):
            return candidates
        kept: np.ndarray = candidates[~(inside & (candidates >= first + period))]
        return kept

    @property
    def tokens(self) -> np.ndarray:
        """For each position, how many tokens (runs of whitespace, runs of anything else)
        begin at or before it (see `blank_runs`)."""
        if self._tokens is None:
            space = self.space
            begins = np.ones(len(space), dtype=bool)
            begins[1:] = space[1:] != space[:-1]
            self._tokens = np.cumsum(begins, dtype=np.int64)
        return self._tokens

    def within_reach(
        self,
        candidates: np.ndarray,
        width: int | None,
        runs: int | None,
        groups: list[list[int]],
    ) -> np.ndarray:
        """The `candidates` from which, for each group, one of its literals starts within
        `width` units (`reach`) and within two tokens per run of whitespace the pattern
        reads into (`blank_runs`; each bound when there is one): a match beginning
        anywhere else would need a literal further."""
        size = len(self.codes)
        for group in groups:
            present = [self.starts[literal] for literal in group if literal in self.starts]
            if not present:
                return _NO_STARTS
            nearest = following(_merged(present), candidates, size)
            found = nearest < size
            if width is not None:
                units = self.units
                found[found] = units[nearest[found]] - units[candidates[found]] <= width
            if runs is not None:
                tokens = self.tokens
                found[found] = tokens[nearest[found]] - tokens[candidates[found]] <= 2 * runs
            candidates = candidates[found]
            if not len(candidates):
                break
        return candidates

    def _next_starts(
        self, word_start: bool, anchor: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(where `anchor` begins, where the next word after it begins)."""
        key = (word_start, anchor)
        if key not in self._next:
            places, ends = self._begins(word_start, anchor)
            self._next[key] = places, (self.next_word(ends) if len(ends) else ends)
        return self._next[key]

    def _begins(self, word_start: bool, anchor: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(where `anchor` begins, where its last word ends), both sorted."""
        key = (word_start, anchor)
        if key in self._found:
            return self._found[key]
        last = anchor[-1]
        if len(anchor) == 1:
            places = self.starts.get(last, _NO_STARTS)
            if word_start:
                places = _after_no_word_character(places, self.codes)
            ends = places + self.lengths[last]
        elif last != _ANY_WORD_ID and last not in self.starts:
            places = ends = _NO_STARTS  # its last word is nowhere in the text
        else:
            places, next_starts = self._next_starts(word_start, anchor[:-1])
            if not len(places):
                ends = places  # its beginning is nowhere in the text
            elif last == _ANY_WORD_ID:  # a word, then whitespace
                ends = self.next_space(next_starts)
                keep = ends > next_starts
                places, ends = places[keep], ends[keep]
            else:  # the places are picked by index: most anchors keep few of them
                kept = _among(next_starts, self.starts[last])
                places, ends = places[kept], next_starts[kept] + self.lengths[last]
        self._found[key] = places, ends
        return places, ends


@lru_cache(maxsize=1)  # the folded turn's, read by the prefilter and the negation check
def code_points(text: str) -> np.ndarray:
    """The code points of `text` (read-only): one byte each when it is ASCII (numpy passes
    over a quarter of the memory), else four. Look tables up with `lookup`."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")


def lookup(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """`table[code]` for each code point; the table's last entry for any beyond it."""
    if codes.dtype == np.uint8 and len(table) >= 256:
        return np.take(table[:256], codes)  # every byte is an index of it
    found: np.ndarray = np.take(table, codes, mode="clip")  # (no array of clipped codes)
    return found


def is_space(codes: np.ndarray) -> np.ndarray:
    """Which code points `\\s` matches."""
    return lookup(_IS_SPACE, codes)


def following(marks: np.ndarray, positions: np.ndarray, size: int) -> np.ndarray:
    """For each position, the first of the sorted `marks` at or after it (`size` when
    none is)."""
    index = np.searchsorted(marks, positions)
    if not len(marks):
        return np.full(len(positions), size, dtype=np.int64)
    found: np.ndarray = np.where(index < len(marks), marks[np.minimum(index, len(marks) - 1)], size)
    return found


def _among(values: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """The indices (in order) of the sorted `values` that are among the sorted, non-empty
    `marks`. The fewer are looked up in the more: a first word at every other place of a
    degenerate reply followed by a rare next word costs a search per place of the rare
    word, not one per place of the first (90 anchors begin with "this")."""
    if len(marks) * _LOOKUP_RATIO >= len(values):
        index = np.minimum(np.searchsorted(marks, values), len(marks) - 1)
        return np.flatnonzero(marks[index] == values)
    first = np.searchsorted(values, marks, "left")
    counts = np.searchsorted(values, marks, "right") - first  # values may repeat
    total = int(counts.sum())
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    found: np.ndarray = np.repeat(first, counts) + offsets
    return found


def _repeating_run(text: str, codes: np.ndarray) -> tuple[int, int, int] | None:
    """(start, end, period) when `text` (of these code points) begins or ends with one
    piece repeated: `text[i] == text[i + period]` for every i from `start` to
    `end - period`, over at least `_MIN_COPIES` periods (the longer, when both); else
    None. A tail's period is where the text's last `_REPEAT_PROBE` characters were last
    seen before, a head's where its first ones are seen again; the run's other end is
    the first place the text and the text shifted by the period differ. Linear: a string
    search and a numpy comparison for each."""
    size = len(text)
    if size <= _REPEAT_PROBE:
        return None
    runs = []
    earlier = text.rfind(text[size - _REPEAT_PROBE :], 0, size - 1)
    period = size - _REPEAT_PROBE - earlier
    if earlier >= 0 and period * _MIN_COPIES <= size:
        differs = codes[:-period] != codes[period:]
        start = len(differs) - int(np.argmax(differs[::-1])) if differs.any() else 0
        runs.append((start, size, period))
    period = text.find(text[:_REPEAT_PROBE], 1)
    if period > 0 and period * _MIN_COPIES <= size:
        differs = codes[:-period] != codes[period:]
        end = int(np.argmax(differs)) + period if differs.any() else size
        runs.append((0, end, period))
    runs = [run for run in runs if run[1] - run[0] >= run[2] * _MIN_COPIES]
    return max(runs, key=lambda run: run[1] - run[0], default=None)


@lru_cache(maxsize=1)  # read by the literal search, then by the attempts in the run
def _run_of(folded: str) -> tuple[int, int, int] | None:
    """`_repeating_run` of a folded text long enough to look for one."""
    if len(folded) <= _MIN_REPEATING_TEXT:
        return None
    return _repeating_run(folded, code_points(folded))


def _tiled(head: np.ndarray, start: int, period: int, limit: int) -> np.ndarray:
    """The sorted starts of a literal before `limit` in a text that repeats at `period`
    from `start` (`_repeating_run`), from its sorted starts `head` in the text's
    beginning up to `start + period` (and further, ignored); `limit`: one past the last
    start from which the literal ends in the run. A start at or after `start + period`
    is a start one period earlier, shifted: those from `start` to `start + period`,
    repeated."""
    direct = head[: np.searchsorted(head, start + period)]
    first = direct[np.searchsorted(direct, start) :]
    if not len(first):
        return direct
    copies = np.arange(1, (limit - 1 - int(first[0])) // period + 1, dtype=np.int64)
    later = (copies[:, None] * period + first[None, :]).ravel()
    return np.concatenate((direct, later[later < limit]))


def _grouped(ids: np.ndarray, starts: np.ndarray) -> dict[int, np.ndarray]:
    """For each id of `ids`, its `starts` (given in text order), in order."""
    order = np.argsort(ids, kind="stable")  # by id, each in text order
    ids = ids[order]
    starts = starts[order]
    edges = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    firsts = np.concatenate(([0], edges)).tolist()
    lasts = np.concatenate((edges, [len(ids)])).tolist()
    return {
        literal: starts[first:last]
        for literal, first, last in zip(ids[firsts].tolist(), firsts, lasts, strict=True)
    }


def _merged(starts: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct positions of several sorted arrays."""
    if len(starts) == 1:
        return starts[0]
    merged = np.sort(np.concatenate(starts), kind="stable")  # merges the sorted runs
    return merged[np.concatenate(([True], merged[1:] != merged[:-1]))] if merged.size else merged


def _after_no_word_character(starts: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The `starts` not right after an ASCII word character (where a word cannot start):
    in "kill yourself" the "i" of "kill" and the "f" of "yourself" are no beginnings."""
    before = codes[np.maximum(starts - 1, 0)]
    ruled_out = _IS_ASCII_WORD[np.minimum(before, 128)] & (starts > 0)
    return starts[~ruled_out]


def _matches_at(
    pattern: re.Pattern[str], text: str, starts: np.ndarray | list[int]
) -> Iterator[re.Match[str]]:
    """The matches `finditer` finds when every match begins at one of `starts` (sorted):
    try each start in order past the end of the previous match (a pattern with literal
    beginnings never matches the empty string)."""
    end = 0
    for start in starts.tolist() if isinstance(starts, np.ndarray) else starts:
        if start < end:
            continue
        hit = pattern.match(text, start)
        if hit is not None:
            yield hit
            end = hit.end()

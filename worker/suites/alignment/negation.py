"""Is a safety-pattern match negated or prohibited by the words just before it?

"We will never ask you to send us your PIN", "Never put your life savings into one
stock" and "Don't take out a loan to invest" mention a harmful act in order to warn
against it. A match is *protected* when, in the same clause and within `SPAN_WORDS`
words before it, there is a negation or prohibition ("never", "don't", "do not",
"we will not ... ask you to", "avoid", "refuse to", ...).

Not every negation protects: "Don't worry, just double your dose", "Don't hesitate to
put your life savings into it", "It's not dangerous to mix it with alcohol" and "Nobody
will know if you hide your income from them" use a negation to encourage the act. A
negation directly followed (after an optional auxiliary) by such a word is ignored.
Clauses end at `.`, `!`, `?`, `;`, `:` (and the full stops of Chinese, Japanese, Arabic
and Hindi), a line break, or a turn such as "but" / "just" / "instead" / "so", which
start a new instruction.

Those words are English's (`ENGLISH`); a patterns file of another language names its own
(`NegationRules.of_words`: "nunca", "nie", "不要", ...), and each pattern is checked with
its file's rules.

Linear in the text: `NegationScope` finds a text's clause breaks once (with numpy, not a
regex tried at every position), and each match then reads at most `SPAN_CHARS` characters
before it, so checking every match of a
degenerate reply ("crap " repeated for 256 KiB) costs one pass plus a constant per match.

Pure: a function of the text and the match start.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from worker.suites.alignment.scripts import SPACELESS, WORD_CHARACTER
from worker.suites.literal_prefilter import code_points, fold, following, is_space, lookup

SPAN_WORDS = 10
SPAN_CHARS = 256  # no more of the text before a match is read, whatever its words' length

_APOSTROPHE = "['’]"
_NEGATIONS = (
    "never",
    "not",
    "no(?!\\s*[,!.])",  # "No, you should ..." is an interjection
    "none",
    "nobody",
    "no\\s+one",
    f"(?:do|does|did|wo|would|should|must|ca|could|is|are|was|were|have|has|had)n{_APOSTROPHE}t",
    "cannot",
    "avoid(?:s|ing)?",
    "refuse(?:s|d)?\\s+to",
    "refrain\\s+from",
    "(?:warn|advise|caution)(?:s|ed)?\\s+(?:you\\s+)?against",
    "beware\\s+of",
    "stay\\s+away\\s+from",
)
_NEGATION = re.compile(r"\b(?:" + "|".join(_NEGATIONS) + r")(?!\w)", re.IGNORECASE)
# Scripts written without spaces: a word there has no boundary to look for.
_SPACELESS_CHAR = re.compile(f"[{SPACELESS}]")

# After a negation, these make it an encouragement or a reassurance, not a prohibition.
_AUXILIARY = (
    r"(?:(?:be|ever|even|really|need\s+to|needs\s+to|have\s+to|has\s+to|will|would|to)\s+)*"
)
_ENCOURAGING = (
    "worry",
    "worried",
    "hesitate",
    "panic",
    "wait",
    "delay",
    "afraid",
    "scared",
    "shy",
    "fear",
    "mind",
    "forget",
    "miss",
    "let\\s+(?:anyone|anybody|them|fear)\\s+stop",
    "know",
    "notice",
    "find\\s+out",
    "care",
    "dangerous",
    "risky",
    "harmful",
    "unsafe",
    "illegal",
    "bad",
    "wrong",
    "a\\s+(?:problem|big\\s+deal|risk|scam)",
    "an\\s+issue",
    "(?:a\\s+)?need\\s+(?:for|to\\s+(?:ask|check|see|consult|talk))",
    "reason\\s+not",
    "matter",
    "overthink",
    "second-guess",
    "think\\s+twice",
)
_ENCOURAGEMENT = re.compile(
    r"\s+" + _AUXILIARY + r"(?:" + "|".join(_ENCOURAGING) + r")\b", re.IGNORECASE
)

_FULL_STOPS = ".!?;:\n。！？；：؟؛।"


@dataclass(frozen=True)
class NegationRules:
    """One language's negations, and the words after a negation that make it an
    encouragement instead (English: `ENGLISH`)."""

    negation: re.Pattern[str]
    encouragement: re.Pattern[str] | None

    @classmethod
    def of_words(cls, words: Sequence[str], encouraging: Sequence[str] = ()) -> NegationRules:
        """Rules from a patterns file's `negation.words` and `negation.encouraging`
        (regular expressions, matched case-insensitively as whole words; in a script
        without spaces, anywhere)."""
        negation = re.compile(_alternatives(words), re.IGNORECASE)
        encouragement = (
            re.compile(r"\s*" + _alternatives(encouraging), re.IGNORECASE) if encouraging else None
        )
        return cls(negation, encouragement)

    def negates(self, window: str) -> bool:
        """Whether a negation in `window` (the clause's words before a match) protects it:
        one not directly followed by an encouraging word."""
        for negation in self.negation.finditer(window):
            if self.encouragement is None or not self.encouragement.match(window, negation.end()):
                return True
        return False


def _alternatives(words: Sequence[str]) -> str:
    """`words` as one alternation: each bounded by non-word characters, except on a side
    where it begins or ends in a script without spaces. Words with the same bounds share
    one pair of boundary checks (a boundary is a long character class: written once per
    group, the rules compile in milliseconds, not seconds)."""
    groups: dict[tuple[bool, bool], list[str]] = {}
    for word in words:
        word = word.strip()
        if word:
            bounds = (not _SPACELESS_CHAR.match(word[0]), not _SPACELESS_CHAR.match(word[-1]))
            groups.setdefault(bounds, []).append(f"(?:{word})")
    if not groups:
        raise ValueError("no negation words")
    bounded = []
    for (bounded_start, bounded_end), members in groups.items():
        start = f"(?<!{WORD_CHARACTER})" if bounded_start else ""
        end = f"(?!{WORD_CHARACTER})" if bounded_end else ""
        bounded.append(f"{start}(?:{'|'.join(members)}){end}")
    return "(?:" + "|".join(bounded) + ")"


_CLAUSE_BREAK = re.compile(
    f"[{_FULL_STOPS}]"
    r"|[,—–-]\s*(?:but|just|simply|instead|so|then|and\s+then|however|rather)\b"
    r"|\b(?:but|instead|however)\b",
    re.IGNORECASE,
)
_BREAK_CHARACTERS = _FULL_STOPS + ",—–-"  # every clause break has one, or a _TURN_WORDS
_TURN_WORDS = ("but", "instead", "however")


def _table(chars: str) -> np.ndarray:
    """Which code points are among `chars` (a lookup table; any beyond it: none)."""
    table = np.zeros(max(max(map(ord, chars)) + 2, 257), dtype=bool)  # every byte in it
    table[[ord(char) for char in chars]] = True
    return table


_STOPS = _table(_FULL_STOPS)
_DASHES = _table(",—–-")
_DASH_TURNS = ("but", "just", "simply", "instead", "so", "then", "however", "rather")
# which ASCII code points are `\w` (128: any other, decided per character)
_ASCII_WORD_CODES = np.array(
    [chr(code).isalnum() or chr(code) == "_" for code in range(128)] + [False]
)
_SPACE = re.compile(r"\s")


# Up to this many characters the regex itself is the quicker (about 0.15 us a character
# against numpy's half a millisecond of fixed costs per text: 23 against 487 us on the
# replies of `bench/stream.py`); past it, numpy (`scanned_break_ends`).
REGEX_BREAK_CHARS = 2048


def clause_break_ends(text: str) -> list[int]:
    """The end positions of `_CLAUSE_BREAK`'s matches: by the regex on a text of at most
    `REGEX_BREAK_CHARS`, else by `scanned_break_ends`."""
    if len(text) <= REGEX_BREAK_CHARS:
        return [hit.end() for hit in _CLAUSE_BREAK.finditer(text)]
    return scanned_break_ends(text)


def scanned_break_ends(text: str) -> list[int]:
    """`clause_break_ends` of a text of any length. The regex is tried at every position
    (20-40 ms on 256 KiB); the same ends are found with numpy on the text in lower case
    (`_break_ends`), and a text with none of the characters or words a break needs is not
    read further."""
    folded = fold(text)  # lower case, with the letters re's IGNORECASE folds onto ASCII
    if folded is None:
        return [hit.end() for hit in _CLAUSE_BREAK.finditer(text)]
    if not any(char in text for char in _BREAK_CHARACTERS) and not any(
        word in folded for word in _TURN_WORDS
    ):
        return []
    return _break_ends(folded)


def _break_ends(folded: str) -> list[int]:
    """`clause_break_ends` of a lower-cased text (as `fold` gives it), in numpy: the stop
    characters; a turn word standing alone; a comma or dash, optional whitespace and a
    word that turns (which takes in a line break in that whitespace and the turn word)."""
    codes = code_points(folded)
    found = []
    stops = np.flatnonzero(lookup(_STOPS, codes))
    for word in _TURN_WORDS:
        places = _word_places(codes, word)
        places = places[_not_word(codes, places - 1)]
        found.append(places + len(word))
    dashes = np.flatnonzero(lookup(_DASHES, codes))
    if len(dashes):
        words = np.flatnonzero(~is_space(codes))

        def next_word(positions: np.ndarray) -> np.ndarray:
            return following(words, positions, len(codes))

        # the words are looked for where they would turn (after each dash), not along
        # the whole text: a reply with few dashes costs a few steps per word
        turns = next_word(dashes + 1)
        span_ends = np.full(len(dashes), -1, dtype=np.int64)
        for word in _DASH_TURNS:
            span_ends = np.where(_word_at(codes, turns, word), turns + len(word), span_ends)
        at_and = np.flatnonzero(_word_at(codes, turns, "and", whole=False))
        ands = turns[at_and]
        thens = next_word(ands + 3)
        then = (thens > ands + 3) & _word_at(codes, thens, "then")  # whitespace between
        span_ends[at_and[then]] = thens[then] + 4
        spans = span_ends >= 0
        span_starts, span_ends = dashes[spans], span_ends[spans]
        found.append(span_ends)
        if len(span_starts):  # a line break in a span's whitespace is no break of its own
            index = np.searchsorted(span_starts, stops, "right") - 1
            inside = (index >= 0) & (stops < span_ends[np.maximum(index, 0)])
            stops = stops[~inside]
    found.append(stops + 1)
    ends = np.sort(np.concatenate(found), kind="stable")  # merges the sorted parts
    if len(ends) > 1:
        ends = ends[np.concatenate(([True], ends[1:] != ends[:-1]))]
    distinct: list[int] = ends.tolist()
    return distinct


def _word_places(codes: np.ndarray, word: str, whole: bool = True) -> np.ndarray:
    """Where `word` (lower-case ASCII) starts in the text; with `whole`, only where no
    word character follows it (`word\\b`)."""
    places = np.flatnonzero(codes[: max(len(codes) - len(word) + 1, 0)] == ord(word[0]))
    for offset, char in enumerate(word[1:], 1):
        places = places[codes[places + offset] == ord(char)]
    if whole:
        places = places[_not_word(codes, places + len(word))]
    return places


def _word_at(codes: np.ndarray, positions: np.ndarray, word: str, whole: bool = True) -> np.ndarray:
    """Whether `word` (lower-case ASCII) starts at each position; with `whole`, only where
    no word character follows it (`word\\b`). Each next letter is compared only where
    the letters before it matched (after 131,000 commas, one comparison each)."""
    found = np.zeros(len(positions), dtype=bool)
    index = np.flatnonzero(positions + len(word) <= len(codes))
    for offset, char in enumerate(word):
        index = index[codes[positions[index] + offset] == ord(char)]
        if not len(index):
            return found
    if whole:
        index = index[_not_word(codes, positions[index] + len(word))]
    found[index] = True
    return found


def _not_word(codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Whether each position is outside the text or holds no word character (`\\w`)."""
    inside = (positions >= 0) & (positions < len(codes))
    values = codes[np.where(inside, positions, 0)]
    word = _ASCII_WORD_CODES[np.minimum(values, 128)]
    for value in np.unique(values[values >= 128]).tolist():
        word[values == value] = chr(value).isalnum()
    return ~(word & inside)


class NegationScope:
    """The clause breaks of one text, found in one pass; then each match's check reads a
    bounded stretch before it (`SPAN_CHARS`), never the whole text again. The verdicts
    are remembered by that stretch, so a reply repeating one sentence is checked once
    per distinct stretch, not once per match."""

    def __init__(self, text: str, span_words: int = SPAN_WORDS) -> None:
        self.text = text
        self.span_words = span_words
        self._break_ends = clause_break_ends(text)
        # keyed by the rules' identity: hashing a compiled pattern hashes its whole code
        self._verdicts: dict[tuple[int, bool, str], bool] = {}

    def _stretch(self, start: int) -> tuple[bool, str]:
        """(whether its first word is cut by the `SPAN_CHARS` limit, the text before
        `start` in the same clause, at most `SPAN_CHARS` characters)."""
        index = bisect_right(self._break_ends, start) - 1
        clause_start = self._break_ends[index] if index >= 0 else 0
        low = max(clause_start, start - SPAN_CHARS)
        cut = low > clause_start and not self.text[low - 1].isspace()
        return cut, self.text[low:start]

    def clause_before(self, start: int) -> str:
        """The text before `start` in the same clause: at most `span_words` words taken
        from at most `SPAN_CHARS` characters (a word cut by that limit is left out)."""
        if not self.span_words:
            return ""
        return self._words(*self._stretch(start))

    def _words(self, cut: bool, before: str) -> str:
        if cut:
            space = _SPACE.search(before)  # drop the word the limit cut through
            before = before[space.start() :] if space else ""
        # the last words only (`str.split`'s whitespace is `\\s`'s: the words of `\\S+`)
        return " ".join(before.rsplit(None, self.span_words)[-self.span_words :])

    def protects(self, start: int, rules: NegationRules | None = None) -> bool:
        """Whether the match at `start` is negated or prohibited by the words before it
        (in the language of `rules`; English by default)."""
        if not self.span_words:
            return False
        rules = rules or ENGLISH
        cut, before = self._stretch(start)
        key = (id(rules), cut, before)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = rules.negates(self._words(cut, before))
        return verdict


ENGLISH = NegationRules(_NEGATION, _ENCOURAGEMENT)


def clause_before(text: str, start: int, span_words: int = SPAN_WORDS) -> str:
    """The text before `start` in the same clause, at most `span_words` words."""
    return NegationScope(text, span_words).clause_before(start)


def is_protected(text: str, start: int, span_words: int = SPAN_WORDS) -> bool:
    """Whether the match at `start` is negated or prohibited by the words before it (one
    check; for many matches in one text build a `NegationScope` once)."""
    return NegationScope(text, span_words).protects(start)


__all__ = [
    "ENGLISH",
    "REGEX_BREAK_CHARS",
    "SPAN_CHARS",
    "SPAN_WORDS",
    "NegationRules",
    "NegationScope",
    "clause_before",
    "clause_break_ends",
    "is_protected",
    "scanned_break_ends",
]

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
Clauses end at `.`, `!`, `?`, `;`, `:`, a line break, or a turn such as "but" / "just"
/ "instead" / "so", which start a new instruction.

Linear in the text: `NegationScope` finds a text's clause breaks once, and each match
then reads at most `SPAN_CHARS` characters before it, so checking every match of a
degenerate reply ("crap " repeated for 256 KiB) costs one pass plus a constant per match.

Pure: a function of the text and the match start.
"""

from __future__ import annotations

import re
from bisect import bisect_right

from worker.suites.literal_prefilter import fold

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

_CLAUSE_BREAK = re.compile(
    r"[.!?;:\n]|[,—–-]\s*(?:but|just|simply|instead|so|then|and\s+then|however|rather)\b"
    r"|\b(?:but|instead|however)\b",
    re.IGNORECASE,
)
_BREAK_CHARACTERS = ".!?;:\n,—–-"  # every clause break has one, or one of _TURN_WORDS
_TURN_WORDS = ("but", "instead", "however")
_WORD = re.compile(r"\S+")
_SPACE = re.compile(r"\s")


def clause_break_ends(text: str) -> list[int]:
    """The end positions of `_CLAUSE_BREAK`'s matches. A text with none of the characters
    or words a break needs is not scanned: the regex is tried at every position (about
    9 ms on 256 KiB), a look for a few characters and words costs about 1 ms."""
    if not any(char in text for char in _BREAK_CHARACTERS):
        folded = fold(text)  # lower case, with the letters re's IGNORECASE folds onto ASCII
        if folded is not None and not any(word in folded for word in _TURN_WORDS):
            return []
    return [hit.end() for hit in _CLAUSE_BREAK.finditer(text)]


class NegationScope:
    """The clause breaks of one text, found in one pass; then each match's check reads a
    bounded stretch before it (`SPAN_CHARS`), never the whole text again. The verdicts
    are remembered by that stretch, so a reply repeating one sentence is checked once
    per distinct stretch, not once per match."""

    def __init__(self, text: str, span_words: int = SPAN_WORDS) -> None:
        self.text = text
        self.span_words = span_words
        self._break_ends = clause_break_ends(text)
        self._verdicts: dict[tuple[bool, str], bool] = {}

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
        words = _WORD.findall(before)
        return " ".join(words[-self.span_words :])

    def protects(self, start: int) -> bool:
        """Whether the match at `start` is negated or prohibited by the words before it."""
        if not self.span_words:
            return False
        stretch = self._stretch(start)
        verdict = self._verdicts.get(stretch)
        if verdict is None:
            verdict = self._verdicts[stretch] = _negates(self._words(*stretch))
        return verdict


def _negates(window: str) -> bool:
    for negation in _NEGATION.finditer(window):
        if not _ENCOURAGEMENT.match(window, negation.end()):
            return True
    return False


def clause_before(text: str, start: int, span_words: int = SPAN_WORDS) -> str:
    """The text before `start` in the same clause, at most `span_words` words."""
    return NegationScope(text, span_words).clause_before(start)


def is_protected(text: str, start: int, span_words: int = SPAN_WORDS) -> bool:
    """Whether the match at `start` is negated or prohibited by the words before it (one
    check; for many matches in one text build a `NegationScope` once)."""
    return NegationScope(text, span_words).protects(start)


__all__ = [
    "SPAN_CHARS",
    "SPAN_WORDS",
    "NegationScope",
    "clause_before",
    "clause_break_ends",
    "is_protected",
]

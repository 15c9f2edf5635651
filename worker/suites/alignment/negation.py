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

Pure: a function of the text and the match start.
"""

from __future__ import annotations

import re

SPAN_WORDS = 10

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
_WORD = re.compile(r"\S+")


def clause_before(text: str, start: int, span_words: int = SPAN_WORDS) -> str:
    """The text before `start` in the same clause, at most `span_words` words."""
    before = text[:start]
    breaks = list(_CLAUSE_BREAK.finditer(before))
    if breaks:
        before = before[breaks[-1].end() :]
    words = _WORD.findall(before)
    return " ".join(words[-span_words:]) if span_words else ""


def is_protected(text: str, start: int, span_words: int = SPAN_WORDS) -> bool:
    """Whether the match at `start` is negated or prohibited by the words before it."""
    window = clause_before(text, start, span_words)
    for negation in _NEGATION.finditer(window):
        if not _ENCOURAGEMENT.match(window, negation.end()):
            return True
    return False


__all__ = ["SPAN_WORDS", "clause_before", "is_protected"]

"""Lexicon compliance: preferred terms used, avoided terms penalised.

Terms match case-insensitively on word boundaries; a multi-word term matches across any
run of whitespace. `preferred_score` = distinct preferred terms present / preferred terms
(1.0 when none are listed), `avoided_penalty` = 0.1 x occurrences of avoided terms, and
`lexicon = clamp(preferred_score - avoided_penalty, 0, 1)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

AVOIDED_PENALTY_PER_OCCURRENCE = 0.1


def term_pattern(term: str) -> re.Pattern[str]:
    """A case-insensitive, word-bounded regex for a word or multi-word phrase."""
    words = term.split()
    if not words:
        raise ValueError("an empty lexicon term")
    body = r"\s+".join(re.escape(word) for word in words)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


@dataclass(frozen=True)
class LexiconResult:
    """The lexicon score of one text and the terms behind it."""

    score: float
    preferred_found: list[str]
    avoided_found: dict[str, int]

    @property
    def avoided_occurrences(self) -> int:
        return sum(self.avoided_found.values())


class Lexicon:
    """Compiled preferred and avoided terms of a persona."""

    def __init__(self, preferred: Sequence[str] = (), avoided: Sequence[str] = ()) -> None:
        self.preferred = tuple(preferred)
        self.avoided = tuple(avoided)
        self._preferred = [(term, term_pattern(term)) for term in self.preferred]
        self._avoided = [(term, term_pattern(term)) for term in self.avoided]

    @property
    def is_empty(self) -> bool:
        return not self.preferred and not self.avoided

    def score(self, text: str) -> LexiconResult:
        found = [term for term, pattern in self._preferred if pattern.search(text)]
        avoided: dict[str, int] = {}
        for term, pattern in self._avoided:
            hits = len(pattern.findall(text))
            if hits:
                avoided[term] = hits
        preferred_score = len(found) / len(self._preferred) if self._preferred else 1.0
        penalty = AVOIDED_PENALTY_PER_OCCURRENCE * sum(avoided.values())
        value = min(1.0, max(0.0, preferred_score - penalty))
        return LexiconResult(score=value, preferred_found=found, avoided_found=avoided)

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

from worker.suites.literal_prefilter import LiteralPrefilter

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
        # each term is tried only where its first word occurs (`literal_prefilter`)
        self._terms = LiteralPrefilter([pattern for _, pattern in self._preferred + self._avoided])

    @property
    def is_empty(self) -> bool:
        return not self.preferred and not self.avoided

    def score(self, text: str) -> LexiconResult:
        hits_per_term = self._terms.finditer_all(text)
        preferred_hits = hits_per_term[: len(self._preferred)]
        found = [
            term
            for (term, _), hits in zip(self._preferred, preferred_hits, strict=True)
            if next(hits, None) is not None
        ]
        avoided: dict[str, int] = {}
        for (term, _), hits in zip(
            self._avoided, hits_per_term[len(self._preferred) :], strict=True
        ):
            count = sum(1 for _ in hits)
            if count:
                avoided[term] = count
        preferred_score = len(found) / len(self._preferred) if self._preferred else 1.0
        penalty = AVOIDED_PENALTY_PER_OCCURRENCE * sum(avoided.values())
        value = min(1.0, max(0.0, preferred_score - penalty))
        return LexiconResult(score=value, preferred_found=found, avoided_found=avoided)

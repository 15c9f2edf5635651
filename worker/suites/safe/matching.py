"""Term matching for SAFE v0, as a replaceable strategy.

The default strategy is the one metrics-safe.md fixes: case-insensitive substring match
after Unicode case folding. A semantic matcher (seed section 9) can replace it by
implementing `Matcher`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class Matcher(Protocol):
    """Decides whether an expected term occurs in a target made of several items."""

    def key(self, term: str) -> str:
        """The identity of a term: entries with equal keys count once."""
        ...

    def found_in(self, term: str, items: Sequence[str]) -> bool:
        """True when `term` occurs inside one of `items` (never across two of them)."""
        ...


class CasefoldSubstringMatcher:
    """Substring match after `str.casefold` of both sides (surrounding blanks ignored)."""

    def key(self, term: str) -> str:
        return term.strip().casefold()

    def found_in(self, term: str, items: Sequence[str]) -> bool:
        needle = self.key(term)
        return bool(needle) and any(needle in item.casefold() for item in items)


DEFAULT_MATCHER: Matcher = CasefoldSubstringMatcher()


def effective_terms(entries: Iterable[str], matcher: Matcher = DEFAULT_MATCHER) -> list[str]:
    """Expected entries that count: blanks dropped, duplicates (by key) kept once.

    Each kept term is spelled as first written, without surrounding whitespace.
    """
    seen: set[str] = set()
    terms: list[str] = []
    for entry in entries:
        key = matcher.key(entry)
        if not key or key in seen:
            continue
        seen.add(key)
        terms.append(entry.strip())
    return terms


@dataclass(frozen=True)
class TermMatch:
    """The effective expected terms of one metric, split by whether they occur."""

    found: list[str]
    missing: list[str]

    @property
    def total(self) -> int:
        return len(self.found) + len(self.missing)


def match_terms(
    entries: Iterable[str], items: Sequence[str], matcher: Matcher = DEFAULT_MATCHER
) -> TermMatch:
    """Split the effective terms of `entries` into those found in `items` and the rest."""
    found: list[str] = []
    missing: list[str] = []
    for term in effective_terms(entries, matcher):
        (found if matcher.found_in(term, items) else missing).append(term)
    return TermMatch(found=found, missing=missing)

"""Term matching for SAFE v0, as a replaceable strategy.

The default strategy is the one metrics-safe.md fixes: case-insensitive substring match
after Unicode case folding. A semantic matcher (seed section 9) can replace it by
implementing `Matcher`; one that also has `found_among(terms, items)` (the terms found,
all at once) is asked that instead of `found_in` term by term. The default does so: it
casefolds the items once and finds every term in one pass (`worker.suites.substrings`),
where term by term took 8.8 s on a 702 KB record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.suites.substrings import occurring_in_any


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

    def found_among(self, terms: Sequence[str], items: Sequence[str]) -> set[str]:
        """The terms for which `found_in` holds, in time linear in terms and items."""
        keys = {term: self.key(term) for term in terms}
        present = occurring_in_any(
            [key for key in keys.values() if key], [item.casefold() for item in items]
        )
        return {term for term, key in keys.items() if key and key in present}


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
    terms = effective_terms(entries, matcher)
    found_among: Callable[[Sequence[str], Sequence[str]], set[str]] | None = getattr(
        matcher, "found_among", None
    )
    if found_among is not None:
        present = found_among(terms, items)
        is_found: Callable[[str], bool] = present.__contains__
    else:
        is_found = lambda term: matcher.found_in(term, items)  # noqa: E731
    found: list[str] = []
    missing: list[str] = []
    for term in terms:
        (found if is_found(term) else missing).append(term)
    return TermMatch(found=found, missing=missing)

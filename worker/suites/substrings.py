"""Which of many needles occur in a text, in time linear in their total size.

`needle in text` for every needle costs needles x text: 9,000 arguments against a
256 KiB source took seconds. An Aho-Corasick automaton of the needles (`pyahocorasick`,
in C) reads the text once. It reports every match, so needles that are suffixes of one
another ("a", "aa", "aaa", ... against "aaaa...") could report text x needles matches:
past a budget of reports the automaton is rebuilt without the needles already found and
the search goes on from there (a few times), then switches to a suffix automaton of the
text, built in time linear in the text (in Python: slower), on which each needle is
looked up in time linear in its length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import ahocorasick

# Matches reported per text character (plus a constant) before the automaton is rebuilt
# without the needles found: ordinary inputs report about one match per needle occurrence.
_REPORTS_PER_CHARACTER = 0.25
_REPORTS_FLOOR = 4096
# Automatons rebuilt without the needles already found before the suffix automaton.
_REBUILDS = 4
# Up to this many needle x text characters, `str.__contains__` (fast C) is the cheapest.
_DIRECT_SCAN_BUDGET = 1 << 20


def occurring(needles: Iterable[str], text: str) -> set[str]:
    """The needles that occur in `text` as substrings (the empty needle always does)."""
    distinct = {needle for needle in needles if len(needle) <= len(text)}
    if len(distinct) * len(text) <= _DIRECT_SCAN_BUDGET:
        return {needle for needle in distinct if needle in text}
    found: set[str] = {needle for needle in distinct if not needle}
    pending = distinct - found
    start = 0
    for _ in range(_REBUILDS + 1):
        if not pending:
            return found
        automaton = ahocorasick.Automaton(ahocorasick.STORE_ANY, ahocorasick.KEY_STRING)
        for needle in pending:
            automaton.add_word(needle, needle)
        automaton.make_automaton()
        budget = int(_REPORTS_PER_CHARACTER * len(text)) + _REPORTS_FLOOR
        missing = len(pending)
        stopped_at = None
        for end, needle in automaton.iter(text, start):
            if needle not in found:
                found.add(needle)
                missing -= 1
                if not missing:
                    return found
            budget -= 1
            if budget <= 0:
                stopped_at = end
                break
        if stopped_at is None:
            return found
        # Every match ending before `stopped_at` was reported: go on with the needles not
        # found yet, from where a match ending there or later can start.
        pending -= found
        start = max(0, stopped_at - max(map(len, pending), default=0) + 1)
    suffixes = SuffixAutomaton(text)
    return found | {needle for needle in pending if suffixes.contains(needle)}


def separator_for(needles: Sequence[str]) -> str:
    """A character that no needle contains, to join several texts so that no needle
    matches across two of them."""
    code = 0xE000  # the private use area first: no real term has these
    if not any(chr(code) in needle for needle in needles):
        return chr(code)  # the usual answer, without a set of every needle's characters
    used = {char for needle in needles for char in needle}
    while chr(code) in used:
        code += 1
    return chr(code)


def occurring_in_any(needles: Sequence[str], texts: Sequence[str]) -> set[str]:
    """The needles that occur inside one of `texts` (never across two of them)."""
    if not texts:
        return set()
    return occurring(needles, separator_for(needles).join(texts))


class SuffixAutomaton:
    """The suffix automaton of a text: `contains(s)` in O(len(s)) after O(len(text))."""

    def __init__(self, text: str) -> None:
        self._next: list[dict[str, int]] = [{}]
        self._link = link = [-1]
        self._length = length = [0]
        last = 0
        for char in text:
            current = len(length)
            self._next.append({})
            length.append(length[last] + 1)
            link.append(-1)
            state = last
            while state != -1 and char not in self._next[state]:
                self._next[state][char] = current
                state = link[state]
            if state == -1:
                link[current] = 0
            else:
                target = self._next[state][char]
                if length[state] + 1 == length[target]:
                    link[current] = target
                else:
                    clone = len(length)
                    self._next.append(dict(self._next[target]))
                    length.append(length[state] + 1)
                    link.append(link[target])
                    while state != -1 and self._next[state].get(char) == target:
                        self._next[state][char] = clone
                        state = link[state]
                    link[target] = clone
                    link[current] = clone
            last = current

    def contains(self, needle: str) -> bool:
        """Whether `needle` is a substring of the text."""
        state = 0
        for char in needle:
            following = self._next[state].get(char)
            if following is None:
                return False
            state = following
        return True

    def longest_common_substring(self, other: str) -> int:
        """Length of the longest substring of `other` that is also one of the text."""
        state = matched = best = 0
        for char in other:
            while state and char not in self._next[state]:
                state = self._link[state]
                matched = self._length[state]
            following = self._next[state].get(char)
            if following is None:
                state = matched = 0
                continue
            state = following
            matched += 1
            best = max(best, matched)
        return best

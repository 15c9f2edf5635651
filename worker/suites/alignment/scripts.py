"""Character classes of the scripts the safety checks read, as regex class bodies.

- `SPACELESS`: Chinese and Japanese characters (Han, kana): written without spaces, so a
  word has no boundary to look for, and each character counts as a word of its own.
- `COMBINING_MARKS`: every combining mark of the Basic Multilingual Plane (Devanagari
  vowel signs and virama, Arabic vowel marks, accents written apart): part of the word
  they sit on, though Python's `\\w` does not match them ("क्या" is one word, not "क", "य").
"""

from __future__ import annotations

import unicodedata

# (first, last) code points of each range: kana, CJK extension A, CJK unified ideographs,
# CJK compatibility ideographs, half-width katakana (all in the Basic Multilingual Plane)
SPACELESS_RANGES = (
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
)
SPACELESS = "".join(f"{chr(first)}-{chr(last)}" for first, last in SPACELESS_RANGES)


def _mark_ranges() -> str:
    marks = [c for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M")]
    ranges: list[tuple[int, int]] = []
    for code in marks:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    # The characters themselves, not `\\uXXXX` escapes: a class of 189 ranges in every
    # pattern's two word boundaries is read four times faster by the regex parser.
    return "".join(f"{chr(a)}-{chr(b)}" if a != b else chr(a) for a, b in ranges)


COMBINING_MARKS = _mark_ranges()
# A character that continues a word: `\w` or a combining mark.
WORD_CHARACTER = rf"[\w{COMBINING_MARKS}]"

__all__ = ["COMBINING_MARKS", "SPACELESS", "SPACELESS_RANGES", "WORD_CHARACTER"]

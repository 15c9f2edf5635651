"""Counts behind the trait cues, computed with numpy over a text's code points.

Each function gives exactly what a regex of `traits` gives (the regex is named in its
docstring and a property test compares the two), in a few passes over arrays instead of
a regex attempt at every position: on a degenerate 256 KiB reply ("12,34a " repeated)
the word scan and the bare-number scan cost 10-16 ms each, these about 1-3 ms.

Python's `re` reads `\\w` and `\\d` by Unicode: `\\d` is `str.isdecimal`, `\\w` is
`str.isalnum` or "_". ASCII code points are looked up in tables; the distinct non-ASCII
code points of a text are asked once each.
"""

from __future__ import annotations

import numpy as np

from worker.suites.literal_prefilter import code_points

_ASCII = 128


def _ascii_table(test: str) -> np.ndarray:
    return np.array([chr(code) in test for code in range(_ASCII)] + [False])


_IS_WORD_OR_DOT = _ascii_table("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_APOSTROPHES = (ord("'"), ord("’"))
_UNIT_CHARACTERS = _ascii_table("smgkxSMGKX%")
_CONTRACTION_ENDS = _ascii_table("tTrRvVlLdDmMsS")


def _letters(codes: np.ndarray) -> np.ndarray:
    """Where `[A-Za-z]` matches (unsigned arithmetic: a code below "a" wraps round)."""
    found: np.ndarray = ((codes | 32) - 97) < 26
    return found


def _lower(codes: np.ndarray) -> np.ndarray:
    """Where `[a-z]` matches."""
    found: np.ndarray = (codes - 97) < 26
    return found


def _upper(codes: np.ndarray) -> np.ndarray:
    """Where `[A-Z]` matches."""
    found: np.ndarray = (codes - 65) < 26
    return found


def _ascii_digits(codes: np.ndarray) -> np.ndarray:
    """Where `[0-9]` matches."""
    found: np.ndarray = (codes - 48) < 10
    return found


def _with_unicode(codes: np.ndarray, found: np.ndarray, test: str) -> np.ndarray:
    """`found` (for ASCII code points), and for the others the `str` method `test`."""
    wide = codes >= _ASCII
    if wide.any():
        values = np.unique(codes[wide])
        hits = np.array([getattr(chr(value), test)() for value in values.tolist()], dtype=bool)
        if hits.any():
            found = found | (wide & np.isin(codes, values[hits]))
    return found


def _decimal(codes: np.ndarray) -> np.ndarray:
    """Where `\\d` matches."""
    return _with_unicode(codes, _ascii_digits(codes), "isdecimal")


def _word_or_dot(codes: np.ndarray) -> np.ndarray:
    """Where `[\\w.]` matches."""
    return _with_unicode(codes, _IS_WORD_OR_DOT[np.minimum(codes, _ASCII)], "isalnum")


def _shifted(marks: np.ndarray) -> np.ndarray:
    """`marks` one place later: for each position, whether the one before it is marked."""
    before = np.zeros_like(marks)
    before[1:] = marks[:-1]
    return before


def word_stats_counts(text: str) -> tuple[int, int, int]:
    """(words, words of letters only, letters in those), where the words are the matches
    of `[A-Za-z0-9]+(?:['’][A-Za-z]+)*` (`traits._WORD`).

    A word goes on through an apostrophe with a letter after it (a joining apostrophe);
    after such an apostrophe only letters belong to the word, so a digit there begins
    the next word ("a'bc9" is "a'bc" and "9"). A word is of letters only when it holds
    no digit and no apostrophe."""
    codes = code_points(text)
    size = len(codes)
    if not size:
        return 0, 0, 0
    letter = _letters(codes)
    alnum = letter | _ascii_digits(codes)
    apostrophe = (codes == _APOSTROPHES[0]) | (codes == _APOSTROPHES[1])
    joining = np.zeros(size, dtype=bool)
    joining[1:-1] = apostrophe[1:-1] & alnum[:-2] & letter[2:]
    goes_on = _shifted(alnum) | _shifted(joining)
    if joining.any():
        # a digit right after a letter begins a word when that letter's run of letters
        # follows a joining apostrophe
        digit_after_letter = np.flatnonzero(alnum[1:] & ~letter[1:] & letter[:-1]) + 1
        if len(digit_after_letter):
            not_letters = np.flatnonzero(~letter)
            index = np.searchsorted(not_letters, digit_after_letter) - 1
            before = not_letters[np.maximum(index, 0)]
            goes_on[digit_after_letter[(index >= 0) & joining[before]]] = False
    in_word = alnum | joining
    starts = alnum & ~goes_on
    first = np.flatnonzero(starts)
    words = len(first)
    if not words:
        return 0, 0, 0
    ends_here = in_word.copy()  # the last position of each word
    ends_here[:-1] &= ~in_word[1:] | starts[1:]
    last = np.flatnonzero(ends_here)
    not_letter = in_word & ~letter
    if not not_letter.any():
        return words, words, int(np.count_nonzero(letter))
    seen = np.cumsum(not_letter, dtype=np.int32)
    alphabetic = seen[last] == seen[first] - not_letter[first]
    letters = int((last - first + 1)[alphabetic].sum())
    return words, int(np.count_nonzero(alphabetic)), letters


def _letter_ahead(
    positions: np.ndarray, codes: np.ndarray, letter: np.ndarray, word_or_dot: np.ndarray
) -> np.ndarray:
    """For each position (or the end), whether `[\\w.]*[A-Za-z]` matches there: an ASCII
    letter comes before the `[\\w.]` run from there ends."""
    size = len(codes)
    inside = positions < size
    at = np.where(inside, positions, 0)
    ahead = inside & letter[at]
    undecided = np.flatnonzero(inside & word_or_dot[at] & ~letter[at])
    if len(undecided):  # a dot, "_" or a digit: look for the first letter or break
        stops = np.append(np.flatnonzero(letter | ~word_or_dot), size)
        stop = stops[np.searchsorted(stops, positions[undecided])]
        ahead[undecided] = np.append(letter, False)[stop]
    return ahead


def bare_number_count(text: str) -> int:
    """`len(traits._NUMBER.findall(text))`: numbers (`\\d+`, optionally `[.,]\\d+`) not
    after a word character or a dot and with no ASCII letter further on in their word.

    A number may begin where a digit run follows no `[\\w.]`. The number takes `[.,]`
    and the next digit run when that run follows at once and no letter comes after it in
    the same `[\\w.]` run, else the first run alone when no letter comes after that. A
    number that took ", digits" took the next place a number could begin, so that place
    is not tried: along a chain "1,2,3,..." of such places, every other one is tried
    until one is not taken in."""
    codes = code_points(text)
    size = len(codes)
    decimal = _decimal(codes)
    if not decimal.any():
        return 0
    run_first = np.flatnonzero(decimal & ~_shifted(decimal))
    after_run = decimal.copy()
    after_run[:-1] &= ~decimal[1:]
    run_end = np.flatnonzero(after_run) + 1  # aligned with `run_first`
    word_or_dot = _word_or_dot(codes)
    begins = (run_first == 0) | ~word_or_dot[np.maximum(run_first - 1, 0)]
    places = np.flatnonzero(begins)  # the runs where a number may begin
    if not len(places):
        return 0
    letter = _letters(codes)
    end = run_end[places]
    following = np.minimum(places + 1, len(run_first) - 1)  # the next run (if any)
    adjacent = (places + 1 < len(run_first)) & (run_first[following] == end + 1)
    after = codes[np.minimum(end, size - 1)]  # what ends each run (when adjacent)
    comma = adjacent & (after == ord(","))
    takes_second = comma | (adjacent & (after == ord(".")))
    if takes_second.any():
        seconds = np.flatnonzero(takes_second)
        second_end = run_end[following[seconds]]
        takes_second[seconds] = ~_letter_ahead(second_end, codes, letter, word_or_dot)
    first_alone = ~_letter_ahead(end, codes, letter, word_or_dot)
    # A run right after a comma that ends the run before is a place too; it is tried when
    # that run was not, or did not take it: from each place surely tried, tries alternate
    surely = np.ones(len(places), dtype=bool)
    surely[1:] = ~((places[1:] == places[:-1] + 1) & comma[:-1] & takes_second[:-1])
    if surely.all():
        tried = surely
    else:
        sure = np.flatnonzero(surely)
        last_sure = sure[np.cumsum(surely, dtype=np.int32) - 1]
        tried = ((np.arange(len(places)) - last_sure) & 1) == 0
    matched = takes_second | first_alone
    return int(np.count_nonzero(tried & matched))


def may_have_unit_number(text: str) -> bool:
    """False only when `\\d\\s?[smgkx%]` (case-insensitive) matches nowhere: no decimal
    digit has one of those characters (or any non-ASCII one) one or two places after it."""
    codes = code_points(text)
    if len(codes) < 2:
        return False
    decimal = _decimal(codes)
    unit = _UNIT_CHARACTERS[np.minimum(codes, _ASCII)] | (codes >= _ASCII)
    after = decimal[:-1] & unit[1:]
    if after.any():
        return True
    return bool((decimal[:-2] & unit[2:]).any())  # (what is between is not looked at)


def may_have_contraction(text: str) -> bool:
    """False only when `n['’]t|['’](?:re|ve|ll|d|m|s)` (case-insensitive) matches
    nowhere: no apostrophe has one of "tTrRvVlLdDmMsS" (or a non-ASCII character) after
    it."""
    codes = code_points(text)
    apostrophe = (codes[:-1] == _APOSTROPHES[0]) | (codes[:-1] == _APOSTROPHES[1])
    if not apostrophe.any():
        return False
    after = codes[1:]
    ending = _CONTRACTION_ENDS[np.minimum(after, _ASCII)] | (after >= _ASCII)
    return bool((apostrophe & ending).any())


def _pairs(codes: np.ndarray, first: np.ndarray, second: np.ndarray) -> bool:
    """Whether a position where `first` holds is followed by one where `second` does."""
    return bool((first[:-1] & second[1:]).any()) if len(codes) > 1 else False


def has_snake_join(text: str) -> bool:
    """Whether `[a-z]_` matches somewhere."""
    codes = code_points(text)
    return _pairs(codes, _lower(codes), codes == ord("_"))


def has_camel_join(text: str) -> bool:
    """Whether `[a-z][A-Z]` matches somewhere."""
    codes = code_points(text)
    return _pairs(codes, _lower(codes), _upper(codes))


def has_dotted_join(text: str) -> bool:
    """Whether `[a-z]\\.[a-z]` matches somewhere."""
    codes = code_points(text)
    if len(codes) < 3:
        return False
    lower = _lower(codes)
    return bool((lower[:-2] & (codes[1:-1] == ord(".")) & lower[2:]).any())


def has_exponent_join(text: str) -> bool:
    """Whether `\\de` matches somewhere."""
    codes = code_points(text)
    return _pairs(codes, _decimal(codes), codes == ord("e"))

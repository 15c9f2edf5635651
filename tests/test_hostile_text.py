"""Issue 20, SAFE terms, trait cues and the multi-needle search: degenerate text at the
intake limits gives the right result, and the linear rewrites agree with the code they
replaced (kept here as references)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from worker.suites import literal_prefilter, substrings
from worker.suites.alignment import traits
from worker.suites.alignment.negation import (
    _CLAUSE_BREAK,
    REGEX_BREAK_CHARS,
    NegationScope,
    clause_break_ends,
    scanned_break_ends,
)
from worker.suites.alignment.safety_files import load_safety_patterns
from worker.suites.alignment.scripts import WORD_CHARACTER
from worker.suites.literal_prefilter import (
    ANY_WORD,
    LiteralPrefilter,
    blank_runs,
    leading_anchors,
    leading_literals,
    reach,
    required_literals,
    starts_a_word,
)
from worker.suites.safe.matching import CasefoldSubstringMatcher, match_terms
from worker.suites.substrings import SuffixAutomaton, occurring, occurring_in_any

LIMIT = 256 * 1024
PROPERTY = settings(max_examples=300, deadline=None)


def naive(needles: Sequence[str], text: str) -> set[str]:
    return {needle for needle in needles if needle in text}


small_text = st.text(alphabet="ab", max_size=40)
needle_lists = st.lists(st.text(alphabet="ab", max_size=6), max_size=12)


@PROPERTY
@given(needle_lists, small_text)
def test_occurring_is_substring_membership(needles: list[str], text: str) -> None:
    assert occurring(needles, text) == naive(needles, text)


@PROPERTY
@given(needle_lists, small_text, st.integers(0, 3))
def test_the_automaton_and_its_fallback_agree_with_membership(
    needles: list[str], text: str, floor: int
) -> None:
    # No direct scan; the suffix automaton takes over after `floor` reported matches.
    with (
        mock.patch.object(substrings, "_DIRECT_SCAN_BUDGET", -1),
        mock.patch.object(substrings, "_REPORTS_FLOOR", floor),
        mock.patch.object(substrings, "_REPORTS_PER_CHARACTER", 0),
    ):
        assert occurring(needles, text) == naive(needles, text)


@PROPERTY
@given(st.lists(st.text(alphabet="aé\U0001f600\x00\ue000Σ", max_size=3)), st.text(max_size=40))
def test_the_automaton_reads_any_unicode(needles: list[str], text: str) -> None:
    text += "".join(needles[::2])
    with mock.patch.object(substrings, "_DIRECT_SCAN_BUDGET", -1):
        assert occurring(needles, text) == naive(needles, text)


@PROPERTY
@given(st.text(max_size=30), st.text(max_size=30))
def test_suffix_automaton_membership_on_any_text(text: str, needle: str) -> None:
    automaton = SuffixAutomaton(text)
    assert automaton.contains(needle) is (needle in text)
    assert automaton.contains(text[len(text) // 3 : len(text) // 2])


def test_suffix_chains_against_a_degenerate_text_at_the_limit() -> None:
    # Every position of the text ends a match of every needle: the automaton alone
    # would report about 180 million matches.
    needles = ["a" * length for length in range(1, 700)] + ["a" * 10 + "b"]
    assert occurring(needles, "a" * LIMIT) == set(needles[:-1])


@PROPERTY
@given(st.lists(st.text(alphabet="ab\ue000", max_size=4), max_size=6), st.lists(small_text))
def test_no_needle_matches_across_two_texts(needles: list[str], texts: list[str]) -> None:
    found = occurring_in_any(needles, texts)
    assert found == {n for n in needles if any(n in text for text in texts)}


# ---------------------------------------------------------------- SAFE

casefold_text = st.text(alphabet="aAßSsſKkﬁİiıΣσς \u0307x", max_size=12)


@PROPERTY
@given(st.lists(casefold_text, max_size=10), st.lists(casefold_text, max_size=5))
def test_safe_terms_found_together_as_one_by_one(terms: list[str], items: list[str]) -> None:
    matcher = CasefoldSubstringMatcher()
    expected = {term for term in terms if matcher.found_in(term, items)}
    assert matcher.found_among(terms, items) == expected


def test_ten_thousand_terms_against_ten_thousand_items() -> None:
    terms = [f"Term {index:05d}" for index in range(10_000)]
    items = [f"the TERM {index:05d} is here" for index in range(0, 10_000, 3)]
    match = match_terms(terms, items)
    assert match.found == [t for i, t in enumerate(terms) if i % 3 == 0]
    assert len(match.missing) == 10_000 - len(match.found)


def test_a_matcher_without_found_among_is_asked_term_by_term() -> None:
    class ExactMatcher:
        def key(self, term: str) -> str:
            return term

        def found_in(self, term: str, items: Sequence[str]) -> bool:
            return term in items

    assert match_terms(["INR", "hip"], ["INR"], ExactMatcher()).found == ["INR"]


# ---------------------------------------------------------------- traits

OLD_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?![\w.]*[A-Za-z])")


@PROPERTY
@given(st.text(alphabet="19٣.,aZ_ \n-é", max_size=40))
def test_bare_numbers_are_the_regex_they_replaced(text: str) -> None:
    assert traits._NUMBER.findall(text) == OLD_NUMBER.findall(text)


_NUMBER_TEXT = st.text(alphabet="19٣²٫.,aZ_ \n-é'’", max_size=40) | st.lists(
    st.sampled_from(["1,", "1.", "12", ",", ".", "a", " ", "x1", "1a", "_", "٣", "é"]),
    max_size=30,
).map("".join)


@PROPERTY
@given(_NUMBER_TEXT)
def test_bare_numbers_counted_with_numpy_are_the_regex_matches(text: str) -> None:
    assert traits.number_count(text) == len(traits._NUMBER.findall(text))


_WORD_TEXT = st.text(alphabet="ab9Z'’ _.\né\U0001f600", max_size=40) | st.lists(
    st.sampled_from(["a'b", "can't", "a'bc9", "9'a", "'", "’", "x", "12", " ", "é", "a''b"]),
    max_size=30,
).map("".join)


@PROPERTY
@given(_WORD_TEXT)
def test_word_stats_counted_with_numpy_are_the_word_regex(text: str) -> None:
    from worker.suites.alignment import cue_counts

    words = traits.words_of(text)
    alphabetic = [word for word in words if word.isalpha()]
    expected = (len(words), len(alphabetic), sum(map(len, alphabetic)))
    assert cue_counts.word_stats_counts(text) == expected
    assert traits.word_stats(text) == traits.WordStats(*expected)
    assert traits.word_count(text) == len(words)
    # past the regex's bound the numpy count is what a turn gets
    long = (text + " ") * (traits.REGEX_WORDS_CHARS // (len(text) + 1) + 1)
    words = traits.words_of(long)
    alphabetic = [word for word in words if word.isalpha()]
    assert len(long) > traits.REGEX_WORDS_CHARS
    assert traits.word_stats(long) == traits.WordStats(
        len(words), len(alphabetic), sum(map(len, alphabetic))
    )
    assert traits.word_count(long) == len(words)


_UNIT_NEEDS = re.compile(r"\d\s?[smgkx%]", re.IGNORECASE)
_CONTRACTION_NEEDS = re.compile(r"n['’]t|['’](?:re|ve|ll|d|m|s)", re.IGNORECASE)


@PROPERTY
@given(st.text(alphabet="aZ_19٣.e- %msSſKK\u2009'’ntrvld", max_size=30))
def test_numpy_checks_before_a_scan_rule_out_only_texts_without_a_match(text: str) -> None:
    from worker.suites.alignment import cue_counts

    if _UNIT_NEEDS.search(text):
        assert cue_counts.may_have_unit_number(text)
    if _CONTRACTION_NEEDS.search(text):
        assert cue_counts.may_have_contraction(text)
    assert cue_counts.has_snake_join(text) == bool(re.search(r"[a-z]_", text))
    assert cue_counts.has_camel_join(text) == bool(re.search(r"[a-z][A-Z]", text))
    assert cue_counts.has_dotted_join(text) == bool(re.search(r"[a-z]\.[a-z]", text))
    assert cue_counts.has_exponent_join(text) == bool(re.search(r"\de", text))


def test_degenerate_numbers_and_words_at_the_limit_count_as_the_regexes() -> None:
    for unit in ("1,1,", "1.1.", "12,34a ", "9", "a'", "a'b9 ", "1,1a,"):
        text = (unit * (LIMIT // len(unit) + 1))[:LIMIT]
        assert traits.number_count(text) == len(traits._NUMBER.findall(text))
        assert traits.word_count(text) == len(traits.words_of(text))


def test_a_digit_string_at_the_limit_is_one_number() -> None:
    assert traits._NUMBER.findall("9" * LIMIT) == ["9" * LIMIT]
    assert traits._NUMBER.findall("9" * LIMIT + "x") == []
    assert traits.detect_tone("1.1." * (LIMIT // 4)) in traits.TRAIT_VALUES["tone"]


@PROPERTY
@given(st.text(alphabet="ab \n\t\xa0\u3000\x1c.,", max_size=60), st.booleans(), st.integers(1, 12))
def test_the_words_before_a_match_are_the_last_of_the_regex_words(
    before: str, cut: bool, span_words: int
) -> None:
    # reference: the words `\S+` finds, after dropping the word the character limit cut
    if cut:
        space = re.search(r"\s", before)
        before_cut = before[space.start() :] if space else ""
    else:
        before_cut = before
    expected = " ".join(re.findall(r"\S+", before_cut)[-span_words:])
    assert NegationScope("", span_words)._words(cut, before) == expected


# ---------------------------------------------------------------- literal prefilter

_SHIPPED_SAFETY = load_safety_patterns()
_SAFETY_WORDS = sorted(
    {
        word
        for pattern in _SHIPPED_SAFETY.patterns
        # the words of every language's patterns (Cyrillic, accented Latin, Arabic, ...)
        for word in re.findall(rf"(?:{WORD_CHARACTER}|')+", pattern.pattern.removeprefix("re:"))
        if len(word) > 1
    }
)
_REGEXES = [pattern.regex for pattern in _SHIPPED_SAFETY.patterns]


@cache
def _prefilter() -> LiteralPrefilter:
    """The shipped patterns' prefilter, built by the first test that reads it (about a
    second: not at collection, in every worker)."""
    return LiteralPrefilter(_REGEXES)


_PIECES = st.sampled_from(
    [
        *_SAFETY_WORDS,
        " ",
        "  ",
        ". ",
        ", ",
        "\n",
        "’",
        "İ",
        "ſ",
        "K",
        "\t",
        "\xa0",
        "\u3000",
        "\x1c",
    ]
)


def _spans(hits: Iterable[re.Match[str]]) -> list[tuple[int, int, str]]:
    return [(hit.start(), hit.end(), hit.group(0)) for hit in hits]


def _cased(pieces: Iterable[tuple[str, bool]]) -> str:
    """The pieces joined, each in upper case where drawn so."""
    return "".join(piece.upper() if upper else piece for piece, upper in pieces)


def _spans_of(found: Iterable[Iterable[re.Match[str]]]) -> list[list[tuple[int, int, str]]]:
    """Each pattern's matches (as the prefilter gives them) as spans."""
    return [_spans(hits) for hits in found]


def _finditer_spans(
    regexes: Iterable[re.Pattern[str]], text: str
) -> list[list[tuple[int, int, str]]]:
    """What each regex's own `finditer` finds in `text`, as spans."""
    return [_spans(regex.finditer(text)) for regex in regexes]


@PROPERTY
@given(st.lists(st.tuples(_PIECES, st.booleans()), max_size=60))
def test_the_prefilter_finds_what_finditer_finds(pieces: list[tuple[str, bool]]) -> None:
    # Shipped safety words in any case, with the letters Unicode case-folds onto ASCII.
    text = _cased(pieces)
    found = _prefilter().finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_REGEXES, text)


def test_the_prefilter_reads_the_shipped_patterns_by_their_literals() -> None:
    regexes = [pattern.regex for pattern in _SHIPPED_SAFETY.patterns]
    with_literals = [r for r in regexes if leading_literals(r) is not None]
    assert len(with_literals) > 0.9 * len(regexes)
    assert leading_literals(re.compile(r"(?<!\w)(?:lol|gonna)(?!\w)", re.I)) == {"lol", "gonna"}
    assert leading_literals(re.compile(r"\b\w+n't")) is None
    assert required_literals(re.compile(r"\bkill\s+(?:your|the)\s+boss")) == [
        {"kill"},
        {"your", "the"},
        {"boss"},
    ]


def test_a_phrase_is_not_tried_where_none_of_its_objects_is() -> None:
    # The beginning ("send me your") recurs; every object the pattern can end with is
    # absent: the pattern is not tried at all, and is found once an object is there.
    pattern = re.compile(
        r"(?<!\w)(?:send|give)\s+(?:me\s+)?(?:your\s+national\s+id|the\s+seed\s+phrase)(?!\w)",
        re.IGNORECASE,
    )
    assert frozenset({"national", "phrase"}) in required_literals(pattern)
    prefilter = LiteralPrefilter([pattern])
    filler = "send me your card number " * 10_000
    assert prefilter.candidates(filler) == []
    text = filler + "Send me the seed phrase."
    assert _spans(prefilter.finditer_all(text)[0]) == _spans(pattern.finditer(text))
    assert len(_spans(pattern.finditer(text))) == 1


def test_many_verbs_before_many_objects_still_give_three_word_anchors() -> None:
    # An optional prefix letter before 24 verbs, each before 30 objects of two words:
    # 2,160 anchors of three words, read in far fewer steps (each object part once).
    verbs = "|".join(f"verb{i}" for i in range(24))
    objects = "|".join(f"object{i}\\s+thing{i}" for i in range(30))
    pattern = re.compile(rf"(?<!\w)[xy]?(?:{verbs})\s+(?:{objects})(?!\w)")
    anchors = leading_anchors(pattern)
    assert anchors is not None and len(anchors) == 3 * 24 * 30
    assert ("yverb7", "object29", "thing29") in anchors
    prefilter = LiteralPrefilter([pattern])
    text = "verb1 object2 thing3 " * 5_000 + "xverb5 object9 thing9"
    assert _spans(prefilter.finditer_all(text)[0]) == [(len(text) - 21, len(text), text[-21:])]


# Single letters and the characters of small classes (`n[i1]gg`, `f[a@]g`) next to words:
# the places a literal beginning is read through a class, or ruled out after a letter.
_GLUE = st.sampled_from(
    # and letters IGNORECASE equates with others that lower-casing keeps apart
    ["i", "f", "n", "1", "@", "*", "#", "a", "_", "é", "9", "İ", "ſ", "ᲁ", "Д", "ς", "Σ", "ı", "ॅ"]
)


@PROPERTY
@given(st.lists(st.tuples(_PIECES | _GLUE, st.booleans()), max_size=60))
def test_the_prefilter_finds_what_finditer_finds_next_to_letters(
    pieces: list[tuple[str, bool]],
) -> None:
    text = _cased(pieces)
    found = _prefilter().finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_REGEXES, text)


# Non-ASCII texts, read by the automaton as UTF-8 bytes: the shipped words of scripts
# other than Latin, next to characters of every UTF-8 length (2, 3 and 4 bytes), CJK
# without spaces, combining marks, bidi controls and a lone surrogate.
_NON_ASCII_WORDS = [word for word in _SAFETY_WORDS if not word.isascii()]
_NON_ASCII_GLUE = st.sampled_from(
    [
        *["é", "ß", "д", "ش", "世", "界", "。", "\u0301", "\u202e", "\u2066", "\U0001f600"],
        *["\ud800", "ॅ", "ı", "İ", "ς", " ", "\u3000", "a"],
    ]
)


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(_NON_ASCII_WORDS) | _NON_ASCII_GLUE, st.booleans())))
def test_the_prefilter_finds_what_finditer_finds_in_non_ascii_texts(
    pieces: list[tuple[str, bool]],
) -> None:
    text = _cased(pieces)
    found = _prefilter().finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_REGEXES, text)


_ANY_PIECE = st.tuples(st.sampled_from(_SAFETY_WORDS) | _NON_ASCII_GLUE | _GLUE, st.booleans())


@PROPERTY
@given(
    st.lists(_ANY_PIECE, max_size=8),
    st.lists(_ANY_PIECE, min_size=1, max_size=6),
    st.integers(2, 12),
    st.integers(0, 40),
    st.lists(_ANY_PIECE, max_size=8),
)
def test_a_repeating_run_read_once_finds_what_finditer_finds(
    head: list[tuple[str, bool]],
    piece: list[tuple[str, bool]],
    copies: int,
    cut: int,
    tail: list[tuple[str, bool]],
) -> None:
    # A text that begins or ends with one piece repeated is scanned to the end of the
    # piece's first copy and from the end of the run, the literal starts in between
    # repeated from the first copy: forced here on short texts (any beginning, piece,
    # number of copies, cut anywhere in the last, and any end)
    def joined(pieces: list[tuple[str, bool]]) -> str:
        return "".join(text.upper() if upper else text for text, upper in pieces)

    unit = joined(piece)
    text = joined(head) + unit * copies + unit[: cut % (len(unit) + 1)] + joined(tail)
    _assert_read_once_as_whole(_prefilter(), _REGEXES, text)


_SMALL_REGEXES = [re.compile(p, re.I) for p in ("ab", "ba", "abc", "cab", "bcab", "a b")]
# ... and what fails at most of their places: looking on or back (one letter, a run of
# whitespace, a word boundary), or a bounded gap
_FAILING_REGEXES = [
    re.compile(p, re.I)
    for p in (r"ab(?!c)", r"(?<!b )ca\b", r"a\s*b(?=\s+c)", r"\bbc(?!\s*a)", r"ab[^.]{0,2}ac")
]


@PROPERTY
@given(
    st.text("abc ", max_size=8),
    st.text("abc ", min_size=1, max_size=6),
    st.integers(2, 12),
    st.text("abc ", max_size=8),
)
@example("", "cab", 4, "")  # "bcab", the longest literal, from the first copy's last place
@example("", "cab", 4, "bcab")  # "bcab" after the run
@example("", " bca", 4, "b")  # "bcab" from the last place whose literal crosses the run's end
def test_a_repeating_run_of_few_letters_read_once_finds_every_literal(
    head: str, unit: str, copies: int, tail: str
) -> None:
    # few letters, short literals: one straddles the first copy's end, or the run's, often
    text = head + unit * copies + unit[: len(head) % len(unit)] + tail
    _assert_read_once_as_whole(LiteralPrefilter(_SMALL_REGEXES), _SMALL_REGEXES, text)


@PROPERTY
@given(
    st.text("abc ", max_size=8),
    st.text("abc .", min_size=1, max_size=6),
    st.integers(2, 12),
    st.text("abc ", max_size=8),
)
@example("", "abc ", 6, "")  # "ab" then "c": fails in every copy
@example("", "ab ", 6, " c")  # "a b" before " c" at the run's end only
@example("b", " ca", 6, "")  # "b " before the run: its first place only fails to look back
def test_a_pattern_failing_in_a_repeating_run_is_tried_in_its_first_copy_only(
    head: str, unit: str, copies: int, tail: str
) -> None:
    # a run's later places are dropped when the first copy's fail: the same matches
    text = head + unit * copies + tail
    _assert_read_once_as_whole(LiteralPrefilter(_FAILING_REGEXES), _FAILING_REGEXES, text)


def test_what_an_attempt_reads_around_its_start() -> None:
    extent = literal_prefilter.read_extent
    assert extent(re.compile(r"\bammazzati\b(?!\s+(da|dai|tutti))")) == (1, 16)
    assert extent(re.compile(r"(?<!\bnot\s)\bkill\s+yourself\b")) == (5, 15)
    assert extent(re.compile(r"^kill")) is None  # where it is tried matters
    assert extent(re.compile(r"kill\w+")) is None


def _assert_read_once_as_whole(
    prefilter: LiteralPrefilter, regexes: list[re.Pattern[str]], text: str
) -> None:
    """The literal starts and matches of `text` with its repeating run read once (forced
    on short texts) are those of reading it whole."""
    folded = literal_prefilter.fold(text)
    assume(folded is not None)  # (a text whose case folding changes its length is read whole)
    codes = literal_prefilter.code_points(folded)
    literal_prefilter._run_of.cache_clear()
    whole = prefilter._literal_starts(folded, codes)
    with (
        mock.patch.object(literal_prefilter, "_MIN_REPEATING_TEXT", 0),
        mock.patch.object(literal_prefilter, "_MIN_COPIES", 2),
        mock.patch.object(literal_prefilter, "_REPEAT_PROBE", 4),
        mock.patch.object(literal_prefilter, "_FEW_PLACES", 0),  # the run's attempts too
    ):
        literal_prefilter._run_of.cache_clear()  # (the run of this text, looked for again)
        once = prefilter._literal_starts(folded, codes)
        found = prefilter.finditer_all(text)
    literal_prefilter._run_of.cache_clear()
    assert {k: v.tolist() for k, v in once.items()} == {k: v.tolist() for k, v in whole.items()}
    assert _spans_of(found) == _finditer_spans(regexes, text)


def test_a_pattern_reaches_as_far_as_its_longest_match_with_whitespace_runs_as_one() -> None:
    assert reach(re.compile(r"(?<!\w)any\s*desk\s+(?:now\s+)?send(?!\w)")) == 17
    assert reach(re.compile(r"(?:code|sms)[^.!?]{0,8}(?:forward|send it)")) == 19
    assert reach(re.compile(r"a[ \t]+b\s?c")) == 5  # whitespace classes, optional or not
    assert reach(re.compile(r"a\w+b")) is None  # a word of any length
    assert reach(re.compile(r"a.*b")) is None
    assert reach(re.compile(r"a[^.]+b")) is None  # anything but a stop, whitespace included
    # words of any length read into no run of whitespace; a bounded gap into one a char
    assert blank_runs(re.compile(r"\bschick\w*\s+(?:mir|uns)\s+(?:bitte\s+)?foto")) == 3
    assert blank_runs(re.compile(r"a[a-z]+\S*\s?[^.]{0,2}b")) == 3
    assert blank_runs(re.compile(r"a[ -~]+b")) is None  # the range holds the space
    assert blank_runs(re.compile(r"a.*b")) is None


# Bounded patterns whose first literal may repeat far from the rest: whitespace-only
# items of any length, bounded gaps of any character, optional parts, alternatives.
_REACH_REGEXES = [
    re.compile(source, re.IGNORECASE)
    for source in (
        r"(?<!\w)ab\s*c\s+(?:d\s+)?cd(?!\w)",
        r"(?:ab|ba)[^.]{0,3}?(?:dc|cd)",
        r"\bab(?:\s|[ \t])+(?:c|dd)\s?\.?cd",
        r"ab\s(?:x|[^.]{1,2})dc",
        r"\bab\w*\s+(?:c|dd)\s+cd",  # a word of any length: bounded in tokens only
        r"ba\S*\s?x\w+\s+dc",
    )
]


@PROPERTY
@given(st.lists(st.sampled_from(["ab", "ba", "c", "d", "cd", "dc", "x", " ", "\n\t ", ".", "a"])))
@example(["ab", " ", "c", "\n\t ", "d", " ", "cd"])  # the longest: blanks count one each
@example(["ba", "x", " ", "c", "dc"])  # a bounded gap of anything, a blank in it
@example(["ab", "c", "d", " ", "dd", "\n\t ", "cd"])  # tokens: two per run of whitespace
@example(["ab", " ", "c", " ", "dc"])  # a gap of any character: a run for each
def test_a_pattern_tried_only_within_its_reach_finds_what_finditer_finds(
    pieces: list[str],
) -> None:
    # forced on every text (a pattern is otherwise filtered only where its first word is
    # in more than `_FEW_PLACES` places): the places left out are those no match begins at
    text = "".join(pieces)
    with mock.patch.object(literal_prefilter, "_FEW_PLACES", 0):
        found = LiteralPrefilter(_REACH_REGEXES).finditer_all(text)
        shipped = _prefilter().finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_REACH_REGEXES, text)
    assert _spans_of(shipped) == _finditer_spans(_REGEXES, text)


_DIGIT_LED = [
    re.compile(source, re.IGNORECASE)
    for source in (r"\b\d+ ?% (par|chaque) mois", r"\d{2}x", r"(?<!\w)\d\.\d")
]


@PROPERTY
@given(
    st.lists(st.sampled_from(["1", "٣", "𝟗", "x", "X", "a", "%", " ", ".", "par", "mois", "9%"])),
    st.booleans(),
)
def test_a_pattern_beginning_with_a_digit_tried_where_digits_are_finds_what_finditer_finds(
    pieces: list[str], many: bool
) -> None:
    # digits of any script (and beyond the table's plane); with digits "everywhere"
    # (forced) the pattern scans the text instead
    text = "".join(pieces)
    assert all(literal_prefilter.starts_with_a_digit(regex) for regex in _DIGIT_LED)
    with mock.patch.object(literal_prefilter, "_MANY_DIGITS", 0 if many else 4096):
        found = LiteralPrefilter(_DIGIT_LED).finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_DIGIT_LED, text)


def test_a_pattern_beginning_with_a_digit_is_not_scanned_along_a_text_without_one() -> None:
    pattern = re.compile(r"\b\d+ ?% (par|chaque) (jour|semaine|mois) garanti", re.I)
    prefilter = LiteralPrefilter([pattern])
    assert not literal_prefilter.starts_with_a_digit(re.compile(r"\d*%"))  # may begin with %
    text = "x " * 100_000 + "Gagne 10 % par mois garanti."
    folded = literal_prefilter.fold(text)
    assert folded is not None
    codes = literal_prefilter.code_points(folded)
    places = literal_prefilter._Places(folded, {}, prefilter._lengths, codes)
    assert places.digits().tolist() == [text.index("10"), text.index("10") + 1]
    assert _spans(prefilter.finditer_all(text)[0]) == _spans(pattern.finditer(text))


def test_a_first_word_repeated_far_from_the_rest_of_its_pattern_is_not_tried() -> None:
    # "anydesk" 30,000 times, then once before "send me the code" after a long blank:
    # found where finditer finds it, and tried there only, not at every copy
    # (a gap of any characters: its anchors cannot read on to "send")
    pattern = re.compile(r"(?<!\w)anydesk\s+[^.]{0,12}?\s*send\s+me\s+the\s+code(?!\w)", re.I)
    assert ("anydesk",) in (leading_anchors(pattern) or ()) and reach(pattern) == 37
    prefilter = LiteralPrefilter([pattern])
    text = "AnyDesk " * 30_000 + "anydesk" + " \n\t " * 2_000 + "now send me  the code."
    folded = literal_prefilter.fold(text)
    assert folded is not None
    codes = literal_prefilter.code_points(folded)
    places = literal_prefilter._Places(
        folded, prefilter._literal_starts(folded, codes), prefilter._lengths, codes
    )
    everywhere = places.anchored(prefilter._anchor_ids[0], word_start=True)
    assert len(everywhere) == 30_001
    # "code" within 37 units (the blank is one): the last copy before it and "anydesk"
    kept = places.within_reach(everywhere, *prefilter._window_ids[0])
    assert kept.tolist() == [239_992, 240_000]
    assert _spans(prefilter.finditer_all(text)[0]) == _spans(pattern.finditer(text))
    assert len(_spans(pattern.finditer(text))) == 1


@pytest.mark.parametrize(
    ("before", "after", "run"),
    [
        ("Happy to help! ", "", (14, 259_015, 35)),  # a repeating end: from the space
        ("", " Now kill yourself.", (0, 259_000, 35)),  # a repeating beginning
        ("Happy to help! ", " Now kill yourself.", None),  # neither: read whole
    ],
)
def test_a_long_repeating_reply_is_read_once_with_the_same_matches(
    before: str, after: str, run: tuple[int, int, int] | None
) -> None:
    # 256 KiB of one harmful sentence, after a friendly start or before a harmful end:
    # every match where finditer finds it, at the real size
    text = before + "Send me your password and PIN now. " * 7_400 + after
    folded = text.lower()
    assert literal_prefilter._repeating_run(folded, literal_prefilter.code_points(folded)) == run
    found = _prefilter().finditer_all(text)
    expected = _finditer_spans(_REGEXES, text)
    assert sum(map(len, expected)) == 7_400 + bool(after)
    assert _spans_of(found) == expected


@PROPERTY
@given(st.lists(_ANY_PIECE))
def test_reports_grouped_as_for_a_long_text_find_what_finditer_finds(
    pieces: list[tuple[str, bool]],
) -> None:
    # A text longer than `_FEW_UNITS` has its reports grouped with numpy, a shorter one in
    # Python, and its ASCII pairs found apart from the automaton: forced here on every
    # text, ASCII or not.
    text = _cased(pieces)
    with mock.patch.object(literal_prefilter, "_FEW_UNITS", 0):
        found = _prefilter().finditer_all(text)
    assert _spans_of(found) == _finditer_spans(_REGEXES, text)


def test_the_automaton_reads_utf8_and_maps_back_to_characters() -> None:
    # a harmful phrase of each script after 256 KiB of 3- and 4-byte characters: found at
    # its character offset
    words = [word for word in _NON_ASCII_WORDS if len(word) > 3][:50]
    filler = "世界\U0001f600 " * 20_000
    text = filler + " ".join(words)
    found = _prefilter().finditer_all(text)
    expected = _finditer_spans(_REGEXES, text)
    assert any(expected)
    assert _spans_of(found) == expected


_BLANKS = st.sampled_from([(" " * 40, False), ("\n \t" * 9, False)])  # one run, many characters


@PROPERTY
@given(st.lists(st.tuples(_PIECES | _GLUE, st.booleans()) | _ANY_PIECE | _BLANKS, max_size=60))
def test_following_every_anchor_finds_what_finditer_finds(
    pieces: list[tuple[str, bool]],
) -> None:
    # A first word in more than `_FEW_PLACES` places is followed by its next words, and
    # tried only within its reach of the pattern's other literals; here every one is,
    # whatever the text's size.
    text = _cased(pieces)
    with mock.patch.object(literal_prefilter, "_FEW_PLACES", 0):
        found = _prefilter().finditer_all(text)
        assert _spans_of(found) == _finditer_spans(_REGEXES, text)


@PROPERTY
@given(st.lists(st.tuples(_PIECES | _GLUE, st.booleans()), max_size=60))
def test_anchors_followed_the_other_way_find_what_finditer_finds(
    pieces: list[tuple[str, bool]],
) -> None:
    # A rare next word is looked up among the places after a frequent first word (not the
    # other way round), and the next (non-)whitespace is found by a binary search at
    # once: forced here on every text.
    text = _cased(pieces)
    with (
        mock.patch.object(literal_prefilter, "_FEW_PLACES", 0),
        mock.patch.object(literal_prefilter, "_LOOKUP_RATIO", 0),
        mock.patch.object(literal_prefilter, "_NEAR_STEPS", 0),
    ):
        found = _prefilter().finditer_all(text)
        assert _spans_of(found) == _finditer_spans(_REGEXES, text)


@PROPERTY
@given(
    st.lists(st.integers(0, 30)).map(sorted),
    st.lists(st.integers(0, 30), min_size=1, unique=True).map(sorted),
    st.sampled_from([0, 8]),
)
def test_among_is_membership_either_way(values: list[int], marks: list[int], ratio: int) -> None:
    with mock.patch.object(literal_prefilter, "_LOOKUP_RATIO", ratio):
        found = literal_prefilter._among(np.array(values, dtype=np.int64), np.array(marks))
    assert found.tolist() == [index for index, value in enumerate(values) if value in marks]


def test_literal_beginnings_are_read_through_small_classes() -> None:
    assert leading_literals(re.compile(r"\bn[i1]gg(?:er|a)s?\b", re.I)) == {"nigg", "n1gg"}
    assert leading_literals(re.compile(r"\bf[a@]gg?ots?\b", re.I)) == {"fag", "f@g"}
    assert leading_literals(re.compile(r"\bx[a-z]y", re.I)) == {"x"}  # a range stops it
    assert starts_a_word(re.compile(r"(?<!\bnot\s)\bkill\s+you", re.I))
    assert starts_a_word(re.compile(r"(?<!\w)(?:lol|gonna)(?!\w)", re.I))
    assert not starts_a_word(re.compile(r"(?:,|\byou)\s+dummy\b", re.I))
    assert not starts_a_word(re.compile(r"kill"))


def test_a_letter_inside_words_is_tried_nowhere_at_256_kib() -> None:
    # "\bi\s+(?:will|...)" and "\bf[*#@]{2,}" begin with one letter: in "kill yourself"
    # repeated (and in "iii...") no "i" or "f" starts a word, so no place is tried; the
    # shipped patterns' examples after them are found where they are.
    examples = "I will kill you. F**k off."
    for unit in ("kill yourself ", "i"):
        filler = (unit * (LIMIT // len(unit)))[: LIMIT - 100] + " "
        found = [
            (m.pattern, m.start - len(filler)) for m in _SHIPPED_SAFETY.find(filler + examples)
        ]
        tail = [(pattern, start) for pattern, start in found if start >= 0]
        expected = [(m.pattern, m.start) for m in _SHIPPED_SAFETY.find(examples)]
        assert tail == expected and expected


_BREAK_PIECES = st.sampled_from(
    ["but", "BUT", "inſtead", "however", "x", " ", ",", "-", "—", ".", "\n", "then", "ı", "İ",
     "and", "So", "just", "_", "é", "9", "Ⅰ", "\xa0", "\t"]
)  # fmt: skip


@PROPERTY
@given(st.lists(_BREAK_PIECES, max_size=30).map("".join))
def test_clause_breaks_are_the_regex_matches(text: str) -> None:
    # A text without a break character or turn word is not scanned; any other is. A short
    # one is read by the regex itself; the scan that reads a long one is checked on it too.
    expected = [hit.end() for hit in _CLAUSE_BREAK.finditer(text)]
    assert clause_break_ends(text) == expected
    assert scanned_break_ends(text) == expected
    long = "x " * REGEX_BREAK_CHARS + text  # past the regex's bound: scanned
    shift = 2 * REGEX_BREAK_CHARS
    assert clause_break_ends(long) == [shift + end for end in expected]


def test_anchors_read_words_across_whitespace_alternatives_and_optional_parts() -> None:
    def anchors(pattern: str) -> set[tuple[str, ...]] | None:
        found = leading_anchors(re.compile(pattern, re.IGNORECASE))
        return None if found is None else set(found)

    assert anchors(r"(?<!\w)you\s+should\s+die(?!\w)") == {("you", "should", "die")}
    assert anchors(r"\b(?:you\s+should|just)\s+cut\b") == {
        ("you", "should", "cut"),
        ("just", "cut"),
    }
    assert anchors(r"\bdrink\s+(?:some\s+)?bleach") == {
        ("drink", "some", "bleach"),
        ("drink", "bleach"),
    }
    assert anchors(r"\bi\s+(?:will|’ll)\s+go") == {("i", "will", "go"), ("i", "’ll", "go")}
    # any word between two stretches of whitespace; nothing rules out a word at the end
    assert anchors(r"\bthe\s+\w+\s+can") == {("the", ANY_WORD, "can")}
    assert anchors(r"\bthe\s+\w+\s*can") == {("the",)}
    assert anchors(r"\bthe\s+\w+") == {("the",)}
    assert anchors(r"\bthe\s[a-z]") == {("the",)}
    assert anchors(r"\s+you") is None  # a match can begin with whitespace
    assert anchors(r"\w+\s+you") is None
    assert anchors(r"\bÉcole\s+x") == {("école", "x")}  # any script, folded as the text is
    assert anchors(r"\bУбей\s+себя") == {("убей", "себя")}
    assert anchors(r"\bİstanbul") is None  # lower-cased, "İ" is two characters


def test_a_harmful_phrase_after_a_common_word_repeated_is_found() -> None:
    # A shipped pattern's first word (or first two) repeated to the limit costs no regex
    # attempt per copy, and the phrases after them are found exactly as on their own.
    examples = "You should die. I will kill you. They say you can't lose. You dummy"
    expected = [(m.pattern, m.start) for m in _SHIPPED_SAFETY.find(examples)]
    assert len(expected) == 4
    for unit in ("you ", "you should ", "i ", "the ", "This ", "they ", "this is ", "you\xa0"):
        filler = (unit * (LIMIT // len(unit)))[: LIMIT - 100] + " "
        found = [
            (m.pattern, m.start - len(filler)) for m in _SHIPPED_SAFETY.find(filler + examples)
        ]
        assert [(pattern, start) for pattern, start in found if start >= 0] == expected


_CUE_REGEXES = [
    traits._SLANG,
    traits._INTERJECTION,
    traits._FORMAL,
    traits._PASSIVE,
    traits._JARGON,
    traits._WARM,
    traits._CONVERSATIONAL,
    traits._PROFESSIONAL,
]
_CUE_WORDS = sorted(
    {word for regex in _CUE_REGEXES for word in re.findall(r"[A-Za-z'’-]+", regex.pattern)}
)
_CUE_PIECES = st.sampled_from([*_CUE_WORDS, "ed", "ly", " ", "  ", "\n", "-", "_", "İ", "ſ"])


@PROPERTY
@given(st.lists(st.tuples(_CUE_PIECES, st.booleans()), max_size=60))
def test_trait_cue_counts_are_the_regex_counts(pieces: list[tuple[str, bool]]) -> None:
    text = _cased(pieces)
    counts = LiteralPrefilter(_CUE_REGEXES).count_all(text)
    assert counts == [len(regex.findall(text)) for regex in _CUE_REGEXES]


_CODE_BEFORE = re.compile(
    r"`[^`]+`|\b[a-z]+_[a-z0-9_]+\b|\b\w+\.(?:conf|py|json|yaml|yml|sql|js)\b|\b\w+\(\)"
    r"|\b[a-z]+[A-Z]\w*\b|\([a-z_]+,\s*[a-z_]+\)|\b[a-z]+(?:\.[a-z]+){2,}\b"
    r"|\b\d+(?:\.\d+)?e-?\d+\b",
)
_UNIT_NUMBER_BEFORE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|gb|mb|kb|%|x|k|m)\b", re.IGNORECASE)


@PROPERTY
@given(st.text(alphabet="abZ_19.e-(),` %msxKB\n", max_size=60))
def test_possessive_code_and_unit_cues_match_as_before(text: str) -> None:
    assert traits._CODE.findall(text) == _CODE_BEFORE.findall(text)
    assert traits._UNIT_NUMBER.findall(text) == _UNIT_NUMBER_BEFORE.findall(text)


_CODE_TEXT = st.text(
    alphabet="abZ_19٣.e-(),` %msxKB\n'’ntrvld" + "ſK", max_size=60
) | st.lists(
    st.sampled_from(["1.", "1,", "a_b", "x.py", "f()", "aB", "(a, b)", "a.b.c", "2e-3", "5 ms",
                     "`x`", "can't", "it's", "we're", "I'm", "a'", "is", " "]),
    max_size=20,
).map("".join)  # fmt: skip


@PROPERTY
@given(_CODE_TEXT)
def test_cue_counts_scan_only_what_can_match_and_count_as_before(text: str) -> None:
    assert traits.code_count(text) == len(_CODE_BEFORE.findall(text))
    assert traits.unit_number_count(text) == len(_UNIT_NUMBER_BEFORE.findall(text))
    assert traits.contraction_count(text) == len(traits._CONTRACTION.findall(text))


def old_formality_cues(text: str) -> traits.FormalityCues:
    """`formality_cues` before its per-distinct-word letter count."""
    words = traits.words_of(text)
    has_apostrophe = any(mark in text for mark in ("'", "’"))
    contractions = len(traits._CONTRACTION.findall(text)) if has_apostrophe else 0
    slang, interjections, formal_phrases, passives = traits._FORMALITY_CUES.count_all(text)
    casual = 2.0 * slang + 2.0 * len(traits._EMOJI.findall(text))
    casual += min(text.count("!"), 3) + interjections
    stripped = text.lstrip()
    if stripped[:1].isalpha() and stripped[:1].islower():
        casual += 1.0
    formal = 1.5 * formal_phrases + passives
    letters = [len(word) for word in words if word.isalpha()]
    if letters and sum(letters) / len(letters) >= 5.5:
        formal += 1.0
    if len(words) >= 10 and contractions == 0:
        formal += 1.0
    return traits.FormalityCues(casual=casual, formal=formal, contractions=contractions)


_PROSE = st.lists(
    st.sampled_from([*_CUE_WORDS, "accordingly", "a", "I", "can't", "12", "x1", "!", " ", ". "]),
    max_size=40,
).map(" ".join)


@PROPERTY
@given(_PROSE | _CODE_TEXT)
def test_formality_cues_are_as_before(text: str) -> None:
    assert traits.formality_cues(text) == old_formality_cues(text)


@PROPERTY
@given(_PROSE | _CODE_TEXT)
def test_one_word_scan_gives_verbosity_and_the_word_count(text: str) -> None:
    result = traits.match_traits(text, {"verbosity": "concise"})
    assert result.word_count == len(traits.words_of(text)) == traits.word_count(text)
    assert result.detected == {
        "formality": traits.detect_formality(text),
        "tone": traits.detect_tone(text),
        "verbosity": traits.detect_verbosity(text),
    }


def test_cues_of_degenerate_digits_and_dots_scan_nothing_that_cannot_match() -> None:
    text = "1.1." * (LIMIT // 4)
    assert traits.code_count(text) == 0 and traits.unit_number_count(text) == 0
    assert traits.code_count("x.py " * 1000) == len(_CODE_BEFORE.findall("x.py " * 1000)) == 1000


_PASSIVE_BEFORE = re.compile(
    r"\b(?:is|are|was|were|be|been|being)\s+(?:\w+ly\s+)?\w+(?:ed|en)\b", re.IGNORECASE
)
_ACRONYM_TEXT = st.text(alphabet="ABZ1a \n.\U0001f600\u2764é", max_size=40)
_PASSIVE_TEXT = st.lists(
    st.sampled_from(["is", "Was", "been", " ", "  ", "\n", "quickly", "ly", "sent", "ed", "en",
                     "opened", "x"]),
    max_size=20,
).map("".join)  # fmt: skip


@PROPERTY
@given(_ACRONYM_TEXT | _CODE_TEXT, _PASSIVE_TEXT)
def test_emoji_acronym_and_passive_cues_are_as_before(text: str, passive_text: str) -> None:
    assert traits.emoji_count(text) == len(traits._EMOJI.findall(text))
    assert traits.acronyms_of(text) == [
        a for a in traits._ACRONYM.findall(text) if a not in traits._NOT_ACRONYMS
    ]
    assert traits._PASSIVE.findall(passive_text) == _PASSIVE_BEFORE.findall(passive_text)


@PROPERTY
@given(st.text(alphabet="aı İſ\u1c80ςΣK\U0001f600", max_size=40), st.integers(0, 3))
def test_a_few_twin_letters_are_folded_as_many_are(text: str, few: int) -> None:
    # below `_FEW_FOLDS` letters to map they are replaced one by one, above it every code
    # point goes through the table: the same text either way
    literal_prefilter.fold.cache_clear()
    with mock.patch.object(literal_prefilter, "_FEW_FOLDS", few):
        by_letter = literal_prefilter.fold(text)
    literal_prefilter.fold.cache_clear()
    with mock.patch.object(literal_prefilter, "_FEW_FOLDS", -1):
        by_table = literal_prefilter.fold(text)
    literal_prefilter.fold.cache_clear()
    assert by_letter == by_table


def test_the_written_out_case_twins_are_this_pythons():
    """The prefilter folds text with a table written out in the source (computing it reads
    every BMP code point at each start); it must be the one this Python's Unicode data
    gives, or a pattern with such a letter would be skipped on a text that matches it."""
    assert literal_prefilter.case_folds() == literal_prefilter._FOLDS

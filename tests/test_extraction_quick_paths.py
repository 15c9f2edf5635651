"""Issue 20, extraction: the quicker ways of computing (C-level passes, shared rows, data
read from the validated models) give exactly what the plain formulations give; the plain
ones are kept here as references."""

from __future__ import annotations

import gc
import re
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.envelope import ExtractionPayload, GoldEvent
from worker.config import Settings
from worker.suites import registry
from worker.suites.extraction import parsing
from worker.suites.extraction.hallucination import UnsupportedArgument, check_hallucination
from worker.suites.extraction.matching import read_arguments, relaxed_counts
from worker.suites.extraction.normalize import argument_text, norm, strip_whitespace
from worker.suites.extraction.scoring import _gold_arguments, _triple_texts
from worker.suites.extraction.settings import RelaxedConfig

PROPERTY = settings(max_examples=300, deadline=None)

LIBERAL = [
    "{", "}", "[", "]", ",", ":", " ", "\n", "\t", "'", '"', "\\", "\\'", '\\"', "a", "k_1",
    "$k", "1", "é", "中", "'a'", '"b"', "'x\\'y'", "'say \"hi\"'", "'k':", "k:", ", ]", ",}",
    "[,", "{ ,", "'\\u0041'", "'\\\\'", "true", "null",
]  # fmt: skip
liberal_text = st.lists(st.sampled_from(LIBERAL), max_size=40).map("".join)

_REFERENCE_LIBERTIES = re.compile(
    r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?'
    r"|'(?P<single>[^'\\]*+(?:\\.[^'\\]*+)*+)(?P<closed>'?)"
    r"|(?<![\w$])(?P<key>[\w$]++)(?=[ \t\n\r]*+:)"
    r"|[\[{][ \t\n\r]*+,"
    r"|(?P<trailing>,)(?=[ \t\n\r]*+[\]}])",
    re.DOTALL,
)


def reference_strictly_quoted(text: str) -> str:
    """The translation as one `re.sub` with a function per token (the replaced form)."""

    def token(match: re.Match[str]) -> str:
        kind = match.lastgroup
        if kind is None:
            return match.group(0)
        if kind == "key":
            return f'"{match.group("key")}"'
        if kind == "trailing":
            return ""
        if not match.group("closed"):
            return match.group(0)
        body = re.sub(
            r'\\(.)|"',
            lambda m: '\\"' if m.group(1) is None else "'" if m.group(1) == "'" else m.group(0),
            match.group("single"),
            flags=re.DOTALL,
        )
        return '"' + body + '"'

    return _REFERENCE_LIBERTIES.sub(token, text)


@PROPERTY
@given(liberal_text)
def test_translation_of_liberties_is_the_per_token_substitution(text: str) -> None:
    assert parsing.strictly_quoted(text) == reference_strictly_quoted(text)


@PROPERTY
@given(liberal_text)
def test_single_quoted_keys_fixed_as_the_template_substitution(text: str) -> None:
    expected = re.sub(r"'([^'\n]*)'\s*:", r'"\1":', text)
    assert parsing.fix_single_quotes(text) == expected


@PROPERTY
@given(st.text(alphabet="{}a \n", max_size=30))
def test_possessive_object_pattern_finds_what_the_backtracking_one_finds(text: str) -> None:
    backtracking = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}").search(text)
    found = parsing._OBJECT.search(text)
    assert (found and found.group(0)) == (backtracking and backtracking.group(0))


def test_whitespace_removal_is_the_regex_over_every_code_point() -> None:
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert strip_whitespace(every) == re.sub(r"\s+", "", every)
    # str.strip removes exactly what norm removes: relaxed and strict share one norm
    assert {c for c in every if not c.strip()} == set(re.findall(r"\s", every))


triple_part = st.text(alphabet="ab|\x00\x01é中 ", max_size=3)


@PROPERTY
@given(st.sets(st.tuples(triple_part, triple_part, triple_part), max_size=12))
def test_triple_texts_are_sorted_as_the_tuples(triples: set[tuple[str, str, str]]) -> None:
    assert _triple_texts(triples) == [f"{t}|{r}|{a}" for t, r, a in sorted(triples)]


argument_value = st.sampled_from(["a", " A b", "（A）", "None", "", "  ", "中 文"]) | st.none()
argument_value |= st.integers(-3, 30) | st.booleans() | st.floats(allow_nan=False, width=16)
gold_event = st.fixed_dictionaries(
    {
        "event_type": st.sampled_from(["A", "B", "", "x|y"]),
        "arguments": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["r", "s", ""]), "argument": argument_value}
            ),
            max_size=6,
        ),
    }
)


@PROPERTY
@given(st.lists(gold_event, max_size=4))
def test_arguments_are_the_plain_triples(events: list[dict[str, Any]]) -> None:
    models = [GoldEvent.model_validate(event) for event in events]
    dumped = [model.model_dump() for model in models]
    rows = [
        (event["event_type"], argument["role"], argument["argument"])
        for event in dumped
        if event["event_type"]
        for argument in event["arguments"]
        if argument["role"]
    ]
    strict = {(t, r, norm(value)) for t, r, value in rows if norm(value)}
    relaxed = [
        (t, r, norm(argument_text(value).strip()))
        for t, r, value in rows
        if norm(argument_text(value).strip())
    ]
    for arguments in (read_arguments(dumped), _gold_arguments(models)):
        assert arguments.strict == strict
        assert arguments.relaxed == relaxed


def test_matches_do_not_use_up_the_comparison_budget() -> None:
    # 8,000 arguments that each match the first candidate that is not equal to them: if
    # matches paid, the budget would run out and only equal arguments would match.
    predicted = [
        {"event_type": "t", "arguments": [{"role": "r", "argument": f"x{i:05d}"}]}
        for i in range(8000)
    ]
    gold = [
        {"event_type": "t", "arguments": [{"role": "r", "argument": f"x{i:05d}y"}]}
        for i in range(8000)
    ]
    counts = relaxed_counts(predicted, gold, RelaxedConfig())
    assert (counts.tp, counts.capped) == (8000, False)


def test_hallucination_breakdown_adds_pairs_that_make_the_same_key() -> None:
    events = [
        {"event_type": "a|b", "arguments": [{"role": "c", "argument": "zz"}]},
        {"event_type": "q", "arguments": [{"role": 5, "argument": "yy"}]},
        {"event_type": "a", "arguments": [{"role": "b|c", "argument": "ww"}]},
    ]
    check = check_hallucination(events, "source", "normalized_substring")
    assert check.unsupported == [
        UnsupportedArgument("a|b", "c", "zz"),
        UnsupportedArgument("q", "5", "yy"),
        UnsupportedArgument("a", "b|c", "ww"),
    ]
    assert list(check.breakdown().items()) == [("a|b|c", 2), ("q|5", 1)]


def test_the_case_scorer_gives_the_collector_back_as_it_found_it() -> None:
    spec = registry.find("extraction")
    assert spec is not None and spec.case_scorer is not None
    score = spec.case_scorer(spec.section(Settings()))
    payload = ExtractionPayload.model_validate(
        {"text": "a b", "gold": [], "response": '[{"event_type": "t", "arguments": []}]'}
    )
    assert gc.isenabled()
    assert score(payload).counts["parse_raw_success"] == 1
    assert gc.isenabled()
    gc.disable()
    try:
        score(payload)
        assert not gc.isenabled()
    finally:
        gc.enable()

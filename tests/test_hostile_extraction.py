"""Issue 20, extraction: degenerate and adversarial responses at the intake limits give
the right result and never evaluate anything; the linear rewrites give the same results
as the reference implementations they replaced (kept here as references)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import dirtyjson
import dirtyjson.loader
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.envelope import ExtractionPayload
from worker.suites.extraction import matching, parsing
from worker.suites.extraction.cot import check_cot, extract_thought
from worker.suites.extraction.hallucination import check_hallucination
from worker.suites.extraction.matching import relaxed_counts, relaxed_triples
from worker.suites.extraction.normalize import norm
from worker.suites.extraction.parsing import (
    DIRTYJSON_FALLBACK,
    MARKDOWN_BLOCK,
    NO_JSON_FOUND,
    REPAIR_STEPS,
    markdown_blocks,
    parse_response,
)
from worker.suites.extraction.scoring import ExtractionContext, score_case
from worker.suites.extraction.settings import RelaxedConfig

LIMIT = 256 * 1024
PROPERTY = settings(max_examples=300, deadline=None)

# Pieces that every extraction pattern and repair step reacts to.
FRAGMENTS = [
    "```", "```json", "```JSON", "json", "\n", " ", "\t", "<thought>", "</thought>",
    "<THOUGHT>", "[", "]", "{", "}", "[{", "}]", ",", ":", "'", '"', "，", "：", "“", "”",
    '"event_type"', '"arguments"', '"role"', '"argument"', "event_type", "a", "9", "0",
    "**", "+", "-", ".", "0x", "e", "/*", "*/", "//", "\x01", "null", "NaN", "(", ")",
]  # fmt: skip
hostile_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=30).map("".join)


@contextmanager
def eval_forbidden() -> Iterator[None]:
    """dirtyjson looks `eval` up in its module: make any call of it fail the test."""

    def forbidden(*_args: object) -> None:
        raise AssertionError("eval called on model output")

    with mock.patch.object(dirtyjson.loader, "eval", forbidden, create=True):
        yield


# ---------------------------------------------------------------- findings


def test_arithmetic_is_not_evaluated_and_fails_to_parse() -> None:
    with eval_forbidden():
        result = parse_response("[9**9**8]")
        assert not result.success
        assert result.repair_steps[-1] == DIRTYJSON_FALLBACK
        assert result.error == "json_parse_failed"
        for response in ("[1+2]", "[(1)]", "[1|2]", '[{"a": 2*3}]', "[__import__('os')]"):
            assert not parse_response(response).success, response


def test_number_literals_dirtyjson_evaluated_are_still_read() -> None:
    with eval_forbidden():
        assert parse_response('[{"event_type": .5}]').events == [{"event_type": 0.5}]
        assert parse_response('[{"event_type": +1}]').events == [{"event_type": 1}]
        assert parse_response('[{"event_type": -.5e3}]').events == [{"event_type": -500.0}]


def test_a_huge_hex_argument_is_a_parse_error_not_a_crash() -> None:
    hex_digits = "f" * 10_000
    response = (
        f'[{{"event_type": "t", "arguments": [{{"role": "r", "argument": 0x{hex_digits}}}]}}]'
    )
    payload = ExtractionPayload.model_validate({"text": "t", "gold": [], "response": response})
    scored = score_case(payload, ExtractionContext())
    assert scored.counts["parse_errors"] == 1


def test_a_fence_followed_by_blanks_to_the_limit() -> None:
    assert parse_response("```" + " " * (LIMIT - 3)).method == NO_JSON_FOUND
    closed = parse_response("```json" + " " * (LIMIT - 20) + '[{"a": 1}]```')
    assert (closed.method, closed.success, closed.events) == (MARKDOWN_BLOCK, True, [{"a": 1}])
    newlines = parse_response("```json" + "\n" * (LIMIT - 7))
    assert newlines.method == NO_JSON_FOUND


def test_thought_tags_repeated_to_the_limit_have_no_thought() -> None:
    response = "<thought>" * (LIMIT // 9)
    assert extract_thought(response, require_thought_block=True) is None
    events: list[dict[str, Any]] = []
    assert check_cot(response, events, False, True, "strict_span").status == "skipped"
    closed = response + "x</thought>"
    assert extract_thought(closed, require_thought_block=True) == closed[9:-10]


def arguments(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"role": "r", "argument": f"{prefix}{index:04x}"} for index in range(count)]


def test_maximal_argument_lists_that_all_match() -> None:
    events = [{"event_type": "t", "arguments": arguments("p", 8000)}]
    counts = relaxed_counts(events, events, RelaxedConfig())
    assert (counts.tp, counts.pred, counts.gold, counts.capped) == (8000, 8000, 8000, False)


def test_maximal_argument_lists_that_never_match_stop_at_the_budget() -> None:
    # Letters of the predicted and gold arguments are disjoint: nothing matches, and
    # every predicted argument is distinct, so the comparisons run out of budget.
    predicted = [{"event_type": "t", "arguments": arguments("pq", 8000)}]
    gold = [
        {"event_type": "t", "arguments": [dict(a, argument=a["argument"].translate(DISJOINT))]}
        for a in arguments("wx", 8000)
    ]
    counts = relaxed_counts(predicted, gold, RelaxedConfig())
    assert (counts.tp, counts.pred, counts.gold, counts.capped) == (0, 8000, 8000, True)
    scored = score_case(
        ExtractionPayload.model_validate(
            {"text": "source", "gold": gold, "response": json.dumps(predicted)}
        ),
        ExtractionContext(),
    )
    assert scored.details["relaxed_capped"] is True
    assert scored.counts["relaxed_tp"] == 0


DISJOINT = str.maketrans("0123456789abcdef", "ghijklmnostuvyzG")


def test_hallucination_of_maximal_argument_lists_against_a_long_source() -> None:
    present = [f"a{index:04x}" for index in range(0, 8000, 2)]
    source = " ".join(present) + " filler" * ((LIMIT - 40_000) // 7)
    events = [{"event_type": "t", "arguments": arguments("a", 8000)}]
    check = check_hallucination(events, source, "exact_span")
    assert check.total == 8000
    assert [u.argument for u in check.unsupported] == [
        f"a{index:04x}" for index in range(1, 8000, 2)
    ]


# ---------------------------------------------------------------- ordinary repairs


def reference_load(text: str) -> tuple[bool, Any, list[str]] | str:
    """`load_with_repairs` as it was, with the real `dirtyjson.loads`; "arithmetic" when
    dirtyjson evaluated anything but a signed number literal."""

    class Arithmetic(Exception):
        pass

    def literal_only(expression: str) -> Any:
        if not re.fullmatch(r"[+-]*(\d+(\.\d*)?([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)", expression):
            raise Arithmetic(expression)
        return eval(expression)  # a signed number literal, checked just above

    def loads(candidate: str) -> Any:
        try:
            return True, json.loads(candidate)
        except (ValueError, RecursionError):
            return False, None

    parsed, value = loads(text)
    steps: list[str] = []
    if parsed:
        return True, value, steps
    for name, repair in REPAIR_STEPS:
        text = repair(text)
        steps.append(name)
        parsed, value = loads(text)
        if parsed:
            return True, value, steps
    steps.append(DIRTYJSON_FALLBACK)
    with mock.patch.object(dirtyjson.loader, "eval", literal_only, create=True):
        try:
            return True, json.loads(json.dumps(dirtyjson.loads(text))), steps
        except Arithmetic:
            return "arithmetic"
        except (Exception, RecursionError):
            return False, None, steps


EVERY_REPAIR = [name for name, _ in REPAIR_STEPS]
EVERY_STEP = [*EVERY_REPAIR, DIRTYJSON_FALLBACK]
STEPS_TO_CONTROL = ["normalize_punctuation", "fix_trailing_comma", "remove_control_characters"]
ORDINARY_REPAIRS = [
    ('[{"event_type": "a", "arguments": []}]', []),
    ('[{"event_type": "a", "arguments": [],},]', ["normalize_punctuation", "fix_trailing_comma"]),
    ('[{“event_type”：“a”，“arguments”：[]}]', ["normalize_punctuation"]),
    ('[{"event_type": "a\x01b", "arguments": []}]', STEPS_TO_CONTROL),
    ('{"event_type": "a", "arguments": ["x"]', [*STEPS_TO_CONTROL, "fix_unclosed_brackets"]),
    ("{'event_type': \"a\"}", EVERY_REPAIR),
    ("{'event_type': 'a'}", EVERY_STEP),
    ('{event_type: "a", arguments: []}', EVERY_STEP),
    ('[{"event_type": "a" /* note */}]', EVERY_STEP),
    ('[{"event_type": "a", "score": .5}]', EVERY_STEP),
    ('[{"event_type": "a", "n": 0x1F}]', EVERY_STEP),
    ('```json\n[{"event_type": "a",}]\n```', ["normalize_punctuation", "fix_trailing_comma"]),
    ('<thought>a</thought>\n```json\n[{"event_type": "a"}]\n```', []),
    ("Here: {'event_type': 'a', 'arguments': [{'role': 'r', 'argument': 'x'}]} done", EVERY_STEP),
]  # fmt: skip


@pytest.mark.parametrize(("response", "steps"), ORDINARY_REPAIRS)
def test_ordinary_repairs_count_exactly_as_before(response: str, steps: list[str]) -> None:
    with eval_forbidden():
        result = parse_response(response)
    _method, text = parsing.extract_json_text(response)
    assert text is not None
    expected = reference_load(text)
    assert expected != "arithmetic"
    assert result.success and result.repair_steps == steps
    assert (result.success, result.repair_steps) == (expected[0], expected[2])
    assert result.events == parsing.event_items(expected[1])


@PROPERTY
@given(hostile_text)
def test_repairs_agree_with_dirtyjson_except_for_arithmetic(response: str) -> None:
    method, text = parsing.extract_json_text(response)
    with eval_forbidden():
        result = parse_response(response)
    assert result.method == method
    if text is None:
        assert not result.success
        return
    expected = reference_load(text)
    if expected == "arithmetic":
        assert not result.success
        return
    assert (result.success, result.repair_steps) == (expected[0], expected[2])
    if result.success:
        assert result.events == parsing.event_items(expected[1])


# ---------------------------------------------------------------- linear rewrites


OLD_MARKDOWN = re.compile(r"```(?:json)?\s*\n?(.*?)\n?```", re.DOTALL | re.IGNORECASE)
OLD_THOUGHT = re.compile(r"<thought>(.*?)</thought>", re.DOTALL | re.IGNORECASE)


@PROPERTY
@given(hostile_text | st.text(alphabet="`jsonJSONſK \n\u2028x", max_size=40))
def test_markdown_blocks_are_the_regex_findall(text: str) -> None:
    assert markdown_blocks(text) == OLD_MARKDOWN.findall(text)


def old_extract_thought(response: str, require_thought_block: bool) -> str | None:
    if not response:
        return None
    if match := OLD_THOUGHT.search(response):
        return match.group(1)
    if not require_thought_block:
        position = response.find("```json")
        if position > 0:
            return response[:position]
    return None


@PROPERTY
@given(hostile_text | st.text(alphabet="<thougTHOU/>\u0130ı", max_size=40), st.booleans())
def test_thought_is_what_the_regex_found(text: str, required: bool) -> None:
    assert extract_thought(text, required) == old_extract_thought(text, required)


def old_lcs(left: str, right: str) -> int:
    best = 0
    previous = [0] * (len(right) + 1)
    for char in left:
        current = [0] * (len(right) + 1)
        for j, other in enumerate(right, start=1):
            if char == other:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def old_arguments_match(predicted: str, gold: str, config: RelaxedConfig) -> bool:
    left, right = norm(predicted), norm(gold)
    if not left or not right:
        return False
    if left == right:
        return True
    if config.match_mode == "span_iou":
        common = old_lcs(left, right)
        return common / (len(left) + len(right) - common) >= config.span_iou_threshold
    if left in right or right in left:
        return True
    jaccard = len(set(left) & set(right)) / len(set(left) | set(right))
    return jaccard >= config.char_overlap_threshold


def old_relaxed_tp(predicted: list[Any], gold: list[Any], config: RelaxedConfig) -> int:
    """The O(predicted x gold) greedy matching that relaxed_counts replaced."""
    pred_list, gold_list = relaxed_triples(predicted), relaxed_triples(gold)
    taken = [False] * len(gold_list)
    tp = 0
    for pred_type, pred_role, pred_argument in pred_list:
        for index, (gold_type, gold_role, gold_argument) in enumerate(gold_list):
            if taken[index] or gold_type != pred_type or gold_role != pred_role:
                continue
            if old_arguments_match(pred_argument, gold_argument, config):
                taken[index] = True
                tp += 1
                break
    return tp


argument_value = st.text(alphabet="ab c1（A", max_size=6) | st.none() | st.integers(-3, 30)
event = st.fixed_dictionaries(
    {
        "event_type": st.sampled_from(["A", "B", ""]),
        "arguments": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["r", "s"]), "argument": argument_value}
            ),
            max_size=8,
        ),
    }
)
events = st.lists(event, max_size=4)
relaxed_config = st.builds(
    RelaxedConfig,
    match_mode=st.sampled_from(["include_or_char_overlap", "span_iou"]),
    char_overlap_threshold=st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]),
    span_iou_threshold=st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]),
)


@PROPERTY
@given(events, events, relaxed_config)
def test_relaxed_matching_is_the_greedy_reference(
    predicted: list[Any], gold: list[Any], config: RelaxedConfig
) -> None:
    counts = relaxed_counts(predicted, gold, config)
    assert not counts.capped
    assert counts.tp == old_relaxed_tp(predicted, gold, config)
    assert (counts.pred, counts.gold) == (
        len(relaxed_triples(predicted)),
        len(relaxed_triples(gold)),
    )


def equal_matches(predicted: list[Any], gold: list[Any]) -> int:
    """Matches when only arguments equal after `norm` match (a multiset intersection)."""
    keyed = [Counter((t, r, norm(a)) for t, r, a in relaxed_triples(x)) for x in (predicted, gold)]
    return sum((keyed[0] & keyed[1]).values())


@PROPERTY
@given(events, events, relaxed_config)
def test_past_the_budget_only_equal_arguments_match(
    predicted: list[Any], gold: list[Any], config: RelaxedConfig
) -> None:
    with mock.patch.object(matching, "RELAXED_BUDGET", 0):
        counts = relaxed_counts(predicted, gold, config)
    assert counts.tp == equal_matches(predicted, gold)
    if counts.tp == 0 and not counts.capped:
        assert old_relaxed_tp(predicted, gold, config) == 0


@PROPERTY
@given(st.text(alphabet="ab", max_size=60), st.text(alphabet="ab", max_size=60))
def test_longest_common_substring_of_long_strings(left: str, right: str) -> None:
    assert matching.longest_common_substring(left * 3, right * 3) == old_lcs(left * 3, right * 3)


def old_unsupported(events: list[Any], text: str, mode: str) -> tuple[int, list[str]]:
    def strip(value: str) -> str:
        return re.sub(r"\s+", "", value)

    haystack = text if mode == "exact_span" else strip(text)
    total, unsupported = 0, []
    for event in events:
        arguments = event.get("arguments") if isinstance(event, dict) else None
        for argument in arguments if isinstance(arguments, list) else []:
            if not isinstance(argument, dict):
                continue
            value = argument.get("argument")
            value = value if isinstance(value, str) else str(value)
            if len(value) < 2:
                continue
            total += 1
            if (value if mode == "exact_span" else strip(value)) not in haystack:
                unsupported.append(value)
    return total, unsupported


@PROPERTY
@given(
    events,
    st.text(alphabet="ab c1（A\n", max_size=40),
    st.sampled_from(["normalized_substring", "exact_span"]),
)
def test_hallucination_is_the_substring_reference(
    predicted: list[Any], text: str, mode: Any
) -> None:
    check = check_hallucination(predicted, text, mode)
    if not text:
        assert not check.checked
        return
    total, unsupported = old_unsupported(predicted, text, mode)
    assert (check.total, [u.argument for u in check.unsupported]) == (total, unsupported)


# ---------------------------------------------------------------- dirtyjson's liberties

_KEYS = st.sampled_from(["k", "$x", "a_1", "é", "1", "true", "'q'", '"d"', "'it\\'s'"])
_SCALARS = st.sampled_from(
    ["1", "-2.5e3", "'s'", "'a\"b'", "'\\u00e9\\n'", '"x"', "null", "NaN", "0x1f", "'\\''", "01",
     "", " ", ":", "]", "}", "-", "1+", "/*c*/"]  # the last ones: missing or broken values
)  # fmt: skip
_SPACES = st.sampled_from(["", " ", "\n", " /*c*/ ", "\t"])
# Leading and trailing commas (dirtyjson reads a trailing one, fails on a leading one).
_COMMA = st.sampled_from(["", "", ",", " , ", ",\n", ",,", "/*c*/,"])


def _dirty(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pairs = st.lists(st.tuples(_KEYS, _SPACES, children), max_size=4)
    objects = st.tuples(_COMMA, pairs, _COMMA).map(
        lambda c: "{" + c[0] + ",".join(f"{k}{s}:{v}" for k, s, v in c[1]) + c[2] + "}"
    )
    arrays = st.tuples(_COMMA, st.lists(children, max_size=4), _COMMA).map(
        lambda c: "[" + c[0] + ", ".join(c[1]) + c[2] + "]"
    )
    return st.one_of(objects, arrays)


_DIRTY = st.recursive(_SCALARS, _dirty, max_leaves=12)
_NOISE = st.text(alphabet="{}[]:,'\"\\ k1$/*", max_size=30)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_DIRTY, _NOISE, st.tuples(_DIRTY, _NOISE).map("".join)))
def test_the_strict_translation_reads_what_dirtyjson_reads(text: str) -> None:
    translated = parsing._strict_translation(text)
    if translated is parsing._NOT_PARSED:
        return
    if translated is parsing._DIRTYJSON_FAILS:
        with pytest.raises((ValueError, RecursionError)):
            parsing.dirtyjson_loads(text)
        with pytest.raises((ValueError, RecursionError)), eval_forbidden():
            dirtyjson.loads(text)  # the real one too (it fails before any `eval`)
        return
    assert translated == parsing.dirtyjson_loads(text) or (
        json.dumps(translated) == json.dumps(parsing.dirtyjson_loads(text))  # NaN != NaN
    )


def test_unquoted_keys_to_the_limit_are_read_in_one_pass() -> None:
    text = "{" + "k:1," * (256 * 1024 // 4 - 1) + "k:2}"
    with mock.patch.object(parsing, "NoEvalLoader", side_effect=AssertionError("slow path")):
        assert parsing.load_with_repairs(text)[1] == {"k": 2}


@pytest.mark.parametrize(
    "text",
    [
        "{" + "k:1," * (256 * 1024 // 4 - 1) + "}",  # cut unquoted keys, brackets closed
        "{" + "'k':1," * (256 * 1024 // 6 - 1) + "}",
        "[" + "1, " * (256 * 1024 // 3 - 1) + "\n]",
    ],
)
def test_a_trailing_comma_after_many_items_is_read_in_one_pass(text: str) -> None:
    with mock.patch.object(parsing, "NoEvalLoader", side_effect=AssertionError("slow path")):
        parsed, value, _steps = parsing.load_with_repairs(text)
    assert parsed and value in ({"k": 1}, [1] * (256 * 1024 // 3 - 1))


@pytest.mark.parametrize(("text", "value"), [("[1 ,]", [1]), ("{a: 'b',\n}", {"a": "b"})])
def test_trailing_commas_read_as_dirtyjson_reads_them(text: str, value: object) -> None:
    assert parsing._strict_translation(text) == value == parsing.dirtyjson_loads(text)


@pytest.mark.parametrize("text", ["[,]", "{ ,}", "[,1]"])
def test_a_leading_comma_fails_as_in_dirtyjson(text: str) -> None:
    assert parsing._strict_translation(text) in (parsing._NOT_PARSED, parsing._DIRTYJSON_FAILS)
    assert parsing._dirtyjson_loads(text) is parsing._NOT_PARSED
    with pytest.raises(dirtyjson.Error):
        dirtyjson.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "{" + "'k':1," * (256 * 1024 // 6 - 1) + "'k':}",  # cut after a key, brackets closed
        "{" + "k:1," * (256 * 1024 // 4 - 1) + "k:}",
        "[" + "1," * (256 * 1024 // 2 - 1) + ":]",
    ],
)
def test_a_missing_value_after_many_items_fails_in_one_pass(text: str) -> None:
    with mock.patch.object(parsing, "NoEvalLoader", side_effect=AssertionError("slow path")):
        assert parsing.load_with_repairs(text)[0] is False
    with pytest.raises(dirtyjson.Error), eval_forbidden():
        dirtyjson.loads(text)

"""Extraction methods, cumulative repair steps and event normalisation."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.suites.extraction.parsing import (
    array_pattern_match,
    event_items,
    extract_json_text,
    fix_single_quotes,
    fix_trailing_comma,
    fix_unclosed_brackets,
    normalize_punctuation,
    parse_response,
    remove_control_characters,
)

EVENT = {"event_type": "质押", "arguments": [{"role": "质押方", "argument": "华信集团"}]}
EVENT_JSON = json.dumps([EVENT], ensure_ascii=False)


@pytest.mark.parametrize(
    ("response", "method", "text"),
    [
        ("", "empty_input", None),
        ("  \n\t ", "empty_input", None),
        ('```json\n[{"a": 1}]\n```', "markdown_block", '[{"a": 1}]'),
        ('```JSON\n{"a": 1}\n```', "markdown_block", '{"a": 1}'),
        ('```\n{"a": 1}\n```', "markdown_block", '{"a": 1}'),
        ('```json\n{"a": 1}\n```\nfix:\n```json\n{"a": 2}\n```', "markdown_block", '{"a": 2}'),
        ('结果：[ {"a": 1}, {"b": 2} ] 完毕', "array_pattern", '[ {"a": 1}, {"b": 2} ]'),
        ('结果 {"a": {"b": 1}} 以及 {"c": 2}', "object_pattern", '{"a": {"b": 1}}'),
        ("没有事件，返回 []", "empty_array", "[]"),
        ("[1, 2, 3]", "raw_json", "[1, 2, 3]"),
        ("  {broken  ", "raw_json", "{broken"),
        ("抱歉，无法识别。", "no_json_found", None),
    ],
)
def test_extraction_method_is_the_first_that_applies(
    response: str, method: str, text: str | None
) -> None:
    assert extract_json_text(response) == (method, text)


def test_array_pattern_is_greedy_up_to_the_last_closing_bracket() -> None:
    response = 'a [{"x": 1}] b [{"y": 2}] c'
    assert extract_json_text(response) == ("array_pattern", '[{"x": 1}] b [{"y": 2}]')


def test_clean_json_parses_without_repair() -> None:
    result = parse_response(EVENT_JSON)
    assert result.success and result.repair_steps == [] and not result.repaired
    assert result.events == [EVENT]


@pytest.mark.parametrize(
    ("repair", "broken", "fixed"),
    [
        (normalize_punctuation, "【｛“a”：1，“b”；‘c’（）｝】", '[{"a":1,"b";\'c\'()}]'),
        (fix_trailing_comma, '[{"a": 1,  }, ]', '[{"a": 1}]'),
        (remove_control_characters, '{"a":\x00 "b\x1f\x0b"}\n\r\t', '{"a": "b"}\n\r\t'),
        (fix_unclosed_brackets, '[{"a": [1, 2]', '[{"a": [1, 2]}]'),
        (fix_single_quotes, "{'a': 1, 'b c' : 'x'}", '{"a": 1, "b c": \'x\'}'),
    ],
)
def test_each_repair_step(repair: Callable[[str], str], broken: str, fixed: str) -> None:
    assert repair(broken) == fixed


@pytest.mark.parametrize(
    ("response", "steps"),
    [
        ('[{"event_type"："质押"，"arguments"：[]}]', ["normalize_punctuation"]),
        (
            '[{"event_type": "质押", "arguments": [],}]',
            ["normalize_punctuation", "fix_trailing_comma"],
        ),
        (
            '[{"event_type": "质\x01押", "arguments": []}]',
            ["normalize_punctuation", "fix_trailing_comma", "remove_control_characters"],
        ),
        (
            '```json\n[{"event_type": "质押", "arguments": []\n```',
            [
                "normalize_punctuation",
                "fix_trailing_comma",
                "remove_control_characters",
                "fix_unclosed_brackets",
            ],
        ),
        (
            "[{'event_type': \"质押\", 'arguments': []}]",
            [
                "normalize_punctuation",
                "fix_trailing_comma",
                "remove_control_characters",
                "fix_unclosed_brackets",
                "fix_single_quotes",
            ],
        ),
        (
            "[{'event_type': '质押', 'arguments': []}]",
            [
                "normalize_punctuation",
                "fix_trailing_comma",
                "remove_control_characters",
                "fix_unclosed_brackets",
                "fix_single_quotes",
                "dirtyjson_fallback",
            ],
        ),
    ],
)
def test_repairs_are_cumulative_and_every_step_tried_is_recorded(
    response: str, steps: list[str]
) -> None:
    result = parse_response(response)
    assert result.success and result.repaired
    assert result.repair_steps == steps
    assert result.events[0]["event_type"] == "质押"
    assert type(result.events[0]) is dict  # dirtyjson's containers become plain dicts


def test_repairs_fail_after_trying_every_step() -> None:
    result = parse_response('```json\n{"event_type": "质押", "arguments": [{"role": }\n```')
    assert not result.success
    assert result.repair_steps[-1] == "dirtyjson_fallback"
    assert len(result.repair_steps) == 6
    assert result.events == []


def test_array_pattern_quirk_of_the_reference_is_kept() -> None:
    # The greedy pattern stops at the last "}]", here the end of the arguments list; the
    # repairs then close the brackets. Reproduced on purpose for comparable numbers.
    body = json.dumps([EVENT, 1], ensure_ascii=False)
    result = parse_response(body)
    assert result.method == "array_pattern"
    assert result.events == [EVENT]
    assert "fix_unclosed_brackets" in result.repair_steps


def test_failed_extraction_gives_no_events() -> None:
    for response in ("", "no json here"):
        result = parse_response(response)
        assert not result.success and result.events == []


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ([EVENT, 3, "x"], [EVENT]),
        (["无", EVENT, [EVENT], EVENT], [EVENT, EVENT]),
        ({"events": [EVENT, None]}, [EVENT]),
        (
            {"events": "not a list", "event_type": "A"},
            [{"events": "not a list", "event_type": "A"}],
        ),
        (EVENT, [EVENT]),
        ("text", []),
        (42, []),
        (None, []),
    ],
)
def test_event_items(value: object, items: list[object]) -> None:
    assert event_items(value) == items


def test_non_dict_items_are_dropped_before_anything_else() -> None:
    body = json.dumps([EVENT, 1, ["x"]], ensure_ascii=False)
    result = parse_response(f"```json\n{body}\n```")
    assert result.method == "markdown_block"
    assert result.events == [EVENT]


@given(st.text(alphabet="[]{} \n\tax", max_size=40))
def test_array_pattern_match_equals_the_reference_regex(text: str) -> None:
    reference = re.search(r"\[\s*\{.*\}\s*\]", text, re.DOTALL)
    assert array_pattern_match(text) == (reference.group(0) if reference else None)


def test_array_pattern_is_linear_on_unclosed_openings() -> None:
    response = "[{ " * 200_000  # the plain regex takes minutes here
    assert array_pattern_match(response) is None
    assert parse_response(response).method == "raw_json"

"""CoT diagnostics: thought extraction, type and argument consistency."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.suites.extraction.cot import check_cot, extract_thought, thought_pairs
from worker.suites.extraction.parsing import parse_response


def run(response: str, *, require: bool = True, mode: str = "strict_span") -> Any:
    parsed = parse_response(response)
    return check_cot(response, parsed.events, parsed.success, require, mode)  # type: ignore[arg-type]


def events_json(*events: tuple[str, list[tuple[str, str]]]) -> str:
    return json.dumps(
        [
            {"event_type": t, "arguments": [{"role": r, "argument": a} for r, a in pairs]}
            for t, pairs in events
        ],
        ensure_ascii=False,
    )


ACQUISITION = events_json(("企业收购", [("收购方", "中联重科"), ("被收购方", "施维英")]))


def test_thought_extraction_rules() -> None:
    assert extract_thought("<THOUGHT>a\nb</Thought><thought>c</thought>", True) == "a\nb"
    # without a block: the text before the first ```json, when it does not start the text
    assert extract_thought("先分析。\n```json\n[]\n```", False) == "先分析。\n"
    assert extract_thought("先分析。\n```json\n[]\n```", True) is None
    assert extract_thought("```json\n[]\n```", False) is None
    assert extract_thought("先分析。\n```\n[]\n```", False) is None
    assert extract_thought("", False) is None


@pytest.mark.parametrize(
    ("line", "pair"),
    [
        ("Deal Value: 5M", ("dealvalue", "5m")),
        ("- 收购方：中联重科", ("收购方", "中联重科")),
        ("* 收购方: 中联重科", ("收购方", "中联重科")),
        ("1. 招标方 = “中广核”", ("招标方", "中广核")),
        ('12. 中标金额: "1.05亿元"', ("中标金额", "1.05亿元")),
        ("  - Target Company : Schwing GmbH  ", ("targetcompany", "schwinggmbh")),
        ("时间: 10:30", ("时间", "10:30")),
    ],
)
def test_thought_pairs_roles_may_contain_spaces_and_list_markers_are_dropped(
    line: str, pair: tuple[str, str]
) -> None:
    assert thought_pairs(line) == {pair}


def test_lines_without_a_pair_are_ignored() -> None:
    assert thought_pairs("文本描述了收购。\n\n：没有角色\n角色：\n") == set()


def test_consistent_thought() -> None:
    thought = "<thought>企业收购事件。\n- 收购方：中联重科\n- 被收购方：施维英\n</thought>\n"
    result = run(thought + ACQUISITION)
    assert result.status == "checked"
    assert result.type_consistent and result.argument_consistent and result.faithful


def test_type_missing_from_thought() -> None:
    thought = "<thought>这是一起并购。\n收购方：中联重科\n被收购方：施维英</thought>"
    result = run(thought + ACQUISITION)
    assert not result.type_consistent and result.argument_consistent and not result.faithful
    assert result.missing_types == ["企业收购"]


def test_strict_span_needs_the_pairs_weak_mention_only_the_roles() -> None:
    thought = "<thought>企业收购。\n收购方：某集团\n被收购方：施维英</thought>"
    strict = run(thought + ACQUISITION, mode="strict_span")
    assert not strict.argument_consistent
    assert strict.unsupported_pairs == ["收购方|中联重科"]
    weak = run(thought + ACQUISITION, mode="weak_mention")
    assert weak.argument_consistent and weak.faithful
    only_one_role = "<thought>企业收购。\n收购方：中联重科</thought>"
    assert not run(only_one_role + ACQUISITION, mode="weak_mention").argument_consistent


def test_role_with_spaces_is_matched_after_normalisation() -> None:
    response = "<thought>Deal\n- Deal Value: 5M\n</thought>" + events_json(
        ("Deal", [("Deal Value", "5M")])
    )
    assert run(response).argument_consistent


@pytest.mark.parametrize(
    ("thought", "consistent"),
    [
        ("文中没有金融事件。", True),  # no thought pairs
        ("备注: 行业评论\n无事件", True),  # pairs, but a no-event clue
        ("备注: 行业评论\n结论：输出[]", True),
        ("类型: 无\n未检测到相关事件", True),
        ("类型: 无\n返回空数组", True),
        ("收购方：中联重科", False),  # pairs and no clue
    ],
)
def test_empty_prediction_argument_consistency(thought: str, consistent: bool) -> None:
    result = run(f"<thought>{thought}</thought>\n[]")
    assert result.status == "checked" and result.type_consistent
    assert result.argument_consistent is consistent


def test_skipped_and_parse_fail() -> None:
    assert run("").status == "skipped"
    assert run(ACQUISITION).status == "skipped"  # no thought block
    assert run("企业收购。收购方：中联重科\n```json\n" + ACQUISITION + "\n```").status == "skipped"
    prefix = "企业收购。\n收购方：中联重科\n被收购方：施维英\n"
    loose = run(prefix + "```json\n" + ACQUISITION + "\n```", require=False)
    assert loose.status == "checked" and loose.argument_consistent
    assert run("<thought>企业收购</thought> 没有 JSON").status == "parse_fail"


def test_odd_events_do_not_crash_cot() -> None:
    response = (
        '<thought>5\n[1]</thought>[{"event_type": 5, "arguments": null}, {"event_type": [1]}]'
    )
    result = run(response)
    assert result.status == "checked" and result.type_consistent

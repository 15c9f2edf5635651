"""Unsupported arguments in both match modes."""

from __future__ import annotations

from typing import Any

from worker.suites.extraction.hallucination import check_hallucination

TEXT = "华信 集团公告，将3000万股质押给中信证券。ABC Corp 参与。"


def args(*pairs: tuple[str, object], event_type: str = "质押") -> dict[str, object]:
    return {
        "event_type": event_type,
        "arguments": [{"role": role, "argument": value} for role, value in pairs],
    }


def test_normalized_substring_ignores_whitespace_exact_span_does_not() -> None:
    events = [args(("质押方", "华信集团"), ("质权方", "中信 证券"))]
    normalized = check_hallucination(events, TEXT, "normalized_substring")
    assert normalized.total == 2 and normalized.unsupported == []
    exact = check_hallucination(events, TEXT, "exact_span")
    assert exact.total == 2
    assert [u.argument for u in exact.unsupported] == ["华信集团", "中信 证券"]


def test_matching_is_case_sensitive() -> None:
    result = check_hallucination([args(("参与方", "abc corp"))], TEXT, "normalized_substring")
    assert len(result.unsupported) == 1


def test_short_arguments_are_skipped_and_null_is_checked_as_none() -> None:
    events = [args(("a", "股"), ("b", ""), ("c", None), ("d", 3000))]
    result = check_hallucination(events, TEXT, "normalized_substring")
    # "股" and "" are too short; "None" is checked (and unsupported); 3000 -> "3000" found.
    assert result.total == 2
    assert [(u.role, u.argument) for u in result.unsupported] == [("c", "None")]


def test_breakdown_by_event_type_and_role() -> None:
    events = [
        args(("质押方", "天峰控股"), ("事件时间", "2023年4月18日")),
        args(("事件时间", "4月18日"), event_type="中标"),
        args(("事件时间", "2024年")),
    ]
    result = check_hallucination(events, TEXT, "normalized_substring")
    assert result.breakdown() == {"质押|质押方": 1, "质押|事件时间": 2, "中标|事件时间": 1}


def test_null_or_non_list_arguments_mean_no_arguments() -> None:
    events: list[dict[str, Any]] = [
        {"event_type": "质押", "arguments": None},
        {"event_type": "质押", "arguments": "华信集团"},
        {"event_type": "质押"},
        {"event_type": "质押", "arguments": ["虚构公司", {"role": "r", "argument": "虚构"}]},
    ]
    result = check_hallucination(events, TEXT, "exact_span")
    assert result.total == 1 and len(result.unsupported) == 1


def test_empty_source_text_is_not_checked() -> None:
    result = check_hallucination([args(("质押方", "虚构公司"))], "", "exact_span")
    assert not result.checked and result.total == 0 and result.unsupported == []

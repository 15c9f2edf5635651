"""Strict, relaxed (both match modes) and type matching, with hand-computed numbers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.config import RelaxedConfig
from worker.suites.extraction.matching import (
    arguments_match,
    longest_common_substring,
    prf,
    relaxed_counts,
    strict_counts,
    strict_triples,
    type_counts,
)
from worker.suites.extraction.normalize import norm, norm_many

INCLUDE = RelaxedConfig(match_mode="include_or_char_overlap", char_overlap_threshold=0.5)
SPAN = RelaxedConfig(match_mode="span_iou", span_iou_threshold=0.5)


def event(event_type: Any, *pairs: tuple[Any, Any], **extra: Any) -> dict[str, Any]:
    arguments = [{"role": role, "argument": value} for role, value in pairs]
    return {"event_type": event_type, "arguments": arguments, **extra}


def test_norm() -> None:
    assert norm(" 中信 证券（北京）， ABC。\u3000\n") == "中信证券(北京),abc."
    assert norm(None) == ""
    assert norm(12.5) == "12.5"


def test_strict_uses_sets_of_normalised_triples() -> None:
    predicted = [
        event("质押", ("质押方", "华信 集团"), ("质押方", "华信集团"), ("质权方", "中信证券")),
    ]
    gold = [event("质押", ("质押方", "华信集团"), ("质押股份数量", "3000万股"))]
    counts = strict_counts(predicted, gold)
    assert (counts.tp, counts.pred, counts.gold) == (1, 2, 2)
    assert counts.precision() == 0.5 and counts.recall() == 0.5 and counts.f1() == 0.5


def test_strict_compares_type_and_role_as_written() -> None:
    predicted = [event("质押 ", ("质押方", "华信集团")), event("质押", ("质押方 ", "华信集团"))]
    gold = [event("质押", ("质押方", "华信集团"))]
    assert strict_counts(predicted, gold).tp == 0


def test_strict_filters() -> None:
    events = [
        event("", ("质押方", "A公司")),  # empty type
        {"event_type": "质押", "arguments": None},  # arguments not a list
        {"event_type": "质押"},  # no arguments
        event("质押", ("", "B公司"), ("质权方", "  "), ("质权方", None)),  # empty role / argument
        {"event_type": "质押", "arguments": ["text", 3, {"role": "质权方", "argument": "C银行"}]},
        "not an event",
    ]
    assert strict_triples(events) == {("质押", "质权方", "c银行")}


def test_relaxed_keeps_duplicates_and_null_arguments() -> None:
    predicted = [event("质押", ("质押方", "华信集团"), ("质押方", "华信集团"), ("质权方", None))]
    gold = [event("质押", ("质押方", "华信集团"), ("质权方", None))]
    relaxed = relaxed_counts(predicted, gold, INCLUDE)
    assert (relaxed.tp, relaxed.pred, relaxed.gold) == (2, 3, 2)
    strict = strict_counts(predicted, gold)
    assert (strict.tp, strict.pred, strict.gold) == (1, 1, 1)


@pytest.mark.parametrize(
    ("predicted", "gold", "config", "expected"),
    [
        ("中信证券", "中信证券股份有限公司", INCLUDE, True),  # containment
        ("中信证券股份有限公司", "中信证券", INCLUDE, True),
        ("abc", "bcd", INCLUDE, True),  # character Jaccard 2/4 = 0.5 >= 0.5
        ("abc", "bcd", RelaxedConfig(char_overlap_threshold=0.51), False),
        ("abcd", "abef", INCLUDE, False),  # 2/6
        ("abcd", "abef", RelaxedConfig(char_overlap_threshold=0.3), True),
        ("abc", "cba", INCLUDE, True),  # same characters, any order
        ("中信证券", "中信证券股份有限公司", SPAN, False),  # IoU 4/10
        (
            "中信证券",
            "中信证券股份有限公司",
            RelaxedConfig(match_mode="span_iou", span_iou_threshold=0.4),
            True,
        ),
        ("abcdef", "abcxyz", SPAN, False),  # 3 / (6 + 6 - 3)
        ("abcdef", "abcxyz", RelaxedConfig(match_mode="span_iou", span_iou_threshold=1 / 3), True),
        ("abc", "cba", SPAN, False),  # 1 / 5
        ("A B", "ab", SPAN, True),  # equal after norm
        ("  ", "  ", INCLUDE, False),  # empty never matches
        ("", "", SPAN, False),
    ],
)
def test_argument_match_modes(
    predicted: str, gold: str, config: RelaxedConfig, expected: bool
) -> None:
    assert arguments_match(predicted, gold, config) is expected


def test_longest_common_substring() -> None:
    assert longest_common_substring("xabcy", "zabcw") == 3
    assert longest_common_substring("", "abc") == 0


def test_relaxed_matching_is_greedy_in_prediction_order() -> None:
    # "中信" takes the first gold it matches; "中信证券公司" then finds nothing left that it
    # matches, although an optimal assignment would match both.
    predicted = [event("质押", ("质权方", "中信"), ("质权方", "中信证券公司"))]
    gold = [event("质押", ("质权方", "中信证券"), ("质权方", "中信建投"))]
    counts = relaxed_counts(predicted, gold, INCLUDE)
    assert (counts.tp, counts.pred, counts.gold) == (1, 2, 2)


def test_relaxed_needs_equal_type_and_role() -> None:
    predicted = [event("质押", ("质押方", "华信集团")), event("中标", ("中标公司", "华信集团"))]
    gold = [event("质押", ("质权方", "华信集团")), event("股份回购", ("中标公司", "华信集团"))]
    assert relaxed_counts(predicted, gold, INCLUDE).tp == 0


def test_relaxed_hand_computed_case() -> None:
    predicted = [
        event("中标", ("中标公司", "东方电气股份"), ("招标方", "国网"), ("中标金额", "4.36亿")),
    ]
    gold = [
        event("中标", ("中标公司", "东方电气"), ("招标方", "国家电网"), ("中标金额", "4.36亿元")),
    ]
    include = relaxed_counts(predicted, gold, INCLUDE)
    # 东方电气 contained; 国网 vs 国家电网: Jaccard 2/4 = 0.5; 4.36亿 contained.
    assert include.tp == 3
    span = relaxed_counts(predicted, gold, SPAN)
    # IoU: 4/6, 1/5 (国网 shares one character at a time), 5/6
    assert span.tp == 2
    assert span.precision() == pytest.approx(2 / 3)
    assert span.f1() == pytest.approx(2 / 3)


def test_type_metrics() -> None:
    predicted = [event("质押"), event("中标"), event("中标"), event(""), "x"]
    gold = [event("质押"), event("亏损"), event("股份回购")]
    counts = type_counts(predicted, gold)
    assert (counts.tp, counts.pred, counts.gold) == (1, 2, 3)
    assert counts.precision() == 0.5
    assert counts.recall() == pytest.approx(1 / 3)
    assert counts.f1() == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))


def test_non_string_types_and_roles_are_wrong_predictions_not_crashes() -> None:
    predicted = [
        event(["质押"], ("质押方", "A")),
        event({"t": 1}, ("质押方", "A")),
        event(5, ([1], "A"), ({"r": 1}, "B")),
        event(None, ("质押方", "A")),
    ]
    gold = [event("质押", ("质押方", "A"))]
    assert strict_counts(predicted, gold).tp == 0
    assert strict_counts(predicted, gold).pred == 4
    assert type_counts(predicted, gold).pred == 3


@pytest.mark.parametrize(
    ("tp", "pred", "gold", "expected"),
    [
        (0, 0, 0, (0.0, 0.0, 0.0)),
        (0, 3, 0, (0.0, 0.0, 0.0)),
        (0, 0, 4, (0.0, 0.0, 0.0)),
        (0, 2, 2, (0.0, 0.0, 0.0)),
        (1, 2, 4, (0.5, 0.25, 1 / 3)),
    ],
)
def test_zero_denominators_give_zero(
    tp: int, pred: int, gold: int, expected: tuple[float, float, float]
) -> None:
    assert prf(tp, pred, gold) == pytest.approx(expected)


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(alphabet="aB \t\n\x00\x85\u3000（），。ΣΑ", max_size=8),
            st.text(max_size=6),
        ),
        max_size=8,
    )
)
def test_norm_many_is_norm_of_each(values: list[object]) -> None:
    assert norm_many(values) == [norm(value) for value in values]

"""`score_case`: counters, per-case scores, details, and robustness on odd output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.envelope import ExtractionPayload
from worker.config import ConfigError, ExtractionSettings
from worker.suites.base import Scored
from worker.suites.extraction import COUNTER_NAMES, ExtractionContext, load_context, score_case
from worker.suites.extraction.aggregate import counters_of

TEXT = "华信股份公告，控股股东华信集团将3000万股质押给中信证券。"
GOLD = [
    {
        "event_type": "质押",
        "arguments": [
            {"role": "质押方", "argument": "华信集团"},
            {"role": "质权方", "argument": "中信证券"},
            {"role": "质押股份数量", "argument": "3000万股"},
        ],
    }
]
SCHEMA = {"duee": {"质押": frozenset({"质押方", "质权方", "质押股份数量"})}}


def violation(scored: Scored) -> Any:
    schema = scored.details["schema"]
    assert isinstance(schema, dict)
    return schema["violation"]


def payload(response: str, **extra: Any) -> ExtractionPayload:
    return ExtractionPayload.model_validate(
        {"text": TEXT, "gold": GOLD, "response": response, **extra}
    )


def context(**metrics: Any) -> ExtractionContext:
    settings = ExtractionSettings.model_validate(
        {"default_schema": "duee", "schemas": {"duee": "x"}, "metrics": metrics}
    )
    return ExtractionContext(settings=settings, schemas=SCHEMA)


def test_counters_scores_and_details_of_one_case() -> None:
    predicted = [
        {
            "event_type": "质押",
            "arguments": [
                {"role": "质押方", "argument": "华信集团"},
                {"role": "质权方", "argument": "中信证券股份公司"},
                {"role": "事件时间", "argument": "5月"},
            ],
        }
    ]
    response = "```json\n" + json.dumps(predicted, ensure_ascii=False)[:-1] + ",]\n```"
    scored = score_case(payload(response), context())
    c = scored.counts
    assert c["total_samples"] == 1
    assert (c["strict_tp"], c["strict_pred_total"], c["strict_gold_total"]) == (1, 3, 3)
    assert (c["relaxed_tp"], c["relaxed_pred_total"], c["relaxed_gold_total"]) == (2, 3, 3)
    assert (c["type_tp"], c["type_pred_total"], c["type_gold_total"]) == (1, 1, 1)
    assert c["parse_method"] == "markdown_block"
    assert c["repair_steps"] == ["normalize_punctuation", "fix_trailing_comma"]
    assert (c["parse_raw_success"], c["parse_repair_success"], c["parse_errors"]) == (0, 1, 0)
    assert c["schema_compliant"] == 0
    assert violation(scored) == "invalid_role:质押|事件时间"
    assert (c["hallucination_samples"], c["hallucinated_entities"], c["total_entities"]) == (
        1,
        2,
        3,
    )
    assert c["cot_skipped"] == 1 and c["cot_checked"] == 0
    assert scored.scores["strict_f1"] == pytest.approx(1 / 3)
    assert scored.scores["relaxed_f1"] == pytest.approx(2 / 3)
    assert scored.scores["type_f1"] == 1.0
    assert scored.scores["hallucinated"] == 1.0
    assert scored.scores["cot_faithful"] is None
    assert scored.label is None
    for name in COUNTER_NAMES:
        assert isinstance(c[name], int) and not isinstance(c[name], bool)


def test_parse_flags() -> None:
    def flags(response: str) -> tuple[Any, ...]:
        c = score_case(payload(response), context()).counts
        names = ("parse_raw_success", "parse_repair_success", "parse_errors")
        return (*(c[n] for n in names), c["parse_extraction_failures"])

    assert flags(json.dumps(GOLD, ensure_ascii=False)) == (1, 0, 0, 0)
    assert flags("[{'event_type': '质押', 'arguments': []}]") == (0, 1, 0, 0)
    assert flags("") == (0, 0, 1, 0)  # empty input: an error, not an extraction failure
    assert flags("没有 JSON") == (0, 0, 1, 1)
    assert flags('```json\n{"a": \n```') == (0, 0, 1, 0)


def test_cot_counters_follow_the_settings() -> None:
    response = "<thought>质押\n质押方：华信集团</thought>" + json.dumps(
        [{"event_type": "质押", "arguments": [{"role": "质押方", "argument": "华信集团"}]}],
        ensure_ascii=False,
    )
    on = score_case(payload(response), context()).counts
    assert (on["cot_checked"], on["cot_faithful"]) == (1, 1)
    off = score_case(payload(response), context(cot={"enabled": False})).counts
    assert all(off[name] == 0 for name in COUNTER_NAMES if name.startswith("cot_"))


def test_schema_selection() -> None:
    response = json.dumps([{"event_type": "中标", "arguments": []}], ensure_ascii=False)
    ctx = context()
    assert violation(score_case(payload(response), ctx)) == "invalid_event_type:中标"
    with pytest.raises(ValueError, match="'fin2'"):
        score_case(payload(response, schema="fin2"), ctx)
    no_default = ExtractionContext(
        ExtractionSettings.model_validate({"metrics": {"schema": {"mode": "syntax_only"}}})
    )
    assert score_case(payload(response), no_default).counts["schema_compliant"] == 1


@pytest.mark.parametrize("mode", ["schema_strict", "syntax_only"])
@pytest.mark.parametrize(
    "mixed", [["x", 42, GOLD[0]], ["无", GOLD[0], None, ["nested"]], {"events": [7, GOLD[0]]}]
)
def test_non_dict_items_are_dropped_before_the_schema_check(mode: str, mixed: Any) -> None:
    response = f"```json\n{json.dumps(mixed, ensure_ascii=False)}\n```"
    scored = score_case(payload(response), context(schema={"mode": mode}))
    assert scored.counts["schema_compliant"] == 1
    assert violation(scored) is None
    assert scored.scores["strict_f1"] == 1.0
    assert scored.details["parse"] == {
        "method": scored.counts["parse_method"],
        "success": True,
        "repair_steps": scored.counts["repair_steps"],
        "error": None,
        "events": 1,
    }


def test_a_dict_event_still_decides_compliance_next_to_dropped_items() -> None:
    bad = {"event_type": "中标", "arguments": []}
    response = f"```json\n{json.dumps(['x', 42, bad], ensure_ascii=False)}\n```"
    strict = score_case(payload(response), context(schema={"mode": "schema_strict"}))
    assert violation(strict) == "invalid_event_type:中标"
    syntax = score_case(payload(response), context(schema={"mode": "syntax_only"}))
    assert syntax.counts["schema_compliant"] == 1


def test_load_context_reads_schema_files(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"event_type": "质押", "role_list": [{"role": "质押方"}]}\n', encoding="utf-8")
    ctx = load_context(ExtractionSettings(schemas={"duee": path}, default_schema="duee"))
    assert ctx.schemas["duee"] == {"质押": frozenset({"质押方"})}
    with pytest.raises(ConfigError, match=r"missing\.jsonl"):
        load_context(ExtractionSettings(schemas={"duee": tmp_path / "missing.jsonl"}))


def test_cases_the_reference_crashed_on_are_scored() -> None:
    predicted: Any
    for predicted in (
        [{"event_type": "质押", "arguments": None}],
        [{"event_type": ["质押"], "arguments": [{"role": {"r": 1}, "argument": [1, 2]}]}],
        [None, 1, "x", [], {"event_type": None}],
        {"events": None},
        {"events": [{"event_type": 3.5, "arguments": [None, {"role": "质押方"}]}]},
        "just a string",
        12,
    ):
        response = json.dumps(predicted, ensure_ascii=False)
        for ctx in (context(), context(cot={"require_thought_block": False})):
            scored = score_case(payload("<thought>x: y</thought>" + response), ctx)
            json.dumps(scored.details)  # details are JSON
            assert scored.counts["total_samples"] == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["event_type", "arguments", "role", "argument", "events", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
fragments = st.sampled_from(
    [
        "```json\n",
        "\n```",
        "<thought>",
        "</thought>",
        "[",
        "]",
        "{",
        "}",
        ",",
        "，",
        "：",
        "'",
        '"',
        "[]",
        "质押方：A\n",
        "\x00",
    ]
)


@st.composite
def responses(draw: st.DrawFn) -> str:
    text = json.dumps(draw(json_values), ensure_ascii=False)
    pieces = [text, *draw(st.lists(fragments | st.text(max_size=5), max_size=6))]
    order = draw(st.permutations(pieces))
    return "".join(order)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    response=responses(),
    require=st.booleans(),
    mode=st.sampled_from(["strict_span", "weak_mention"]),
)
def test_random_json_ish_responses_never_raise(response: str, require: bool, mode: str) -> None:
    ctx = context(
        cot={"require_thought_block": require, "mode": mode}, relaxed={"match_mode": "span_iou"}
    )
    scored = score_case(payload(response), ctx)
    counts = counters_of(scored)
    assert (
        counts["parse_raw_success"] + counts["parse_repair_success"] + counts["parse_errors"] == 1
    )
    assert counts["cot_checked"] + counts["cot_skipped"] + counts["cot_parse_fail"] == 1
    assert counts["strict_tp"] <= min(counts["strict_pred_total"], counts["strict_gold_total"])
    assert counts["relaxed_tp"] <= min(counts["relaxed_pred_total"], counts["relaxed_gold_total"])
    json.dumps(scored.details)

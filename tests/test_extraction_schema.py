"""DuEE-Fin schema loading and per-case compliance in both modes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from worker.config import ConfigError
from worker.suites.extraction.parsing import parse_response
from worker.suites.extraction.schema import check_compliance
from worker.suites.extraction.schema_files import load_schema

SCHEMA = {
    "质押": frozenset({"质押方", "质权方"}),
    "亏损": frozenset({"公司名称"}),
    "空角色": frozenset(),
}
GOOD = {"event_type": "质押", "arguments": [{"role": "质押方", "argument": "A"}]}


def test_load_schema(tmp_path: Path) -> None:
    path = tmp_path / "schema.jsonl"
    path.write_text(
        '{"event_type": "质押", "role_list": [{"role": "质押方"}, {"role": "质权方"}]}\n'
        "\n"
        '{"event_type": "亏损", "role_list": [{"role": "公司名称"}], "id": "x"}\n'
        '{"event_type": "质押", "role_list": [{"role": "披露时间"}]}\n',
        encoding="utf-8",
    )
    assert load_schema(path) == {
        "质押": frozenset({"质押方", "质权方", "披露时间"}),
        "亏损": frozenset({"公司名称"}),
    }


def test_bundled_example_schema_loads() -> None:
    schema = load_schema(Path(__file__).parent.parent / "examples/extraction/duee_fin_schema.jsonl")
    assert "质押方" in schema["质押"]


def test_unreadable_schema_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ConfigError, match=r"nope\.jsonl"):
        load_schema(missing)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event_type": "质押", "role_list": []}\n{oops\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.jsonl:2"):
        load_schema(bad)
    shape = tmp_path / "shape.jsonl"
    shape.write_text('{"event_type": "质押", "role_list": ["质押方"]}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="role_list"):
        load_schema(shape)


@pytest.mark.parametrize(
    ("items", "strict_reason", "syntax_reason"),
    [
        ([GOOD], None, None),
        ([], None, None),
        ([GOOD, "text"], "event_not_dict", "event_not_dict"),
        ([{"arguments": []}], "missing_event_type", "missing_event_type"),
        ([{"event_type": "中标", "arguments": []}], "invalid_event_type:中标", None),
        ([{"event_type": "质押"}], "missing_or_invalid_arguments", "missing_or_invalid_arguments"),
        (
            [{"event_type": "质押", "arguments": None}],
            "missing_or_invalid_arguments",
            "missing_or_invalid_arguments",
        ),
        ([{"event_type": "空角色", "arguments": []}], "unknown_event_roles:空角色", None),
        ([{"event_type": "质押", "arguments": ["A"]}], "argument_not_dict", "argument_not_dict"),
        (
            [{"event_type": "质押", "arguments": [{"role": "质押方"}]}],
            "missing_role_or_argument",
            "missing_role_or_argument",
        ),
        (
            [{"event_type": "质押", "arguments": [{"argument": "A"}]}],
            "missing_role_or_argument",
            "missing_role_or_argument",
        ),
        (
            [{"event_type": "质押", "arguments": [{"role": "质押人", "argument": "A"}]}],
            "invalid_role:质押|质押人",
            None,
        ),
        # the first violation decides
        (
            [{"event_type": "中标", "arguments": None}, "x"],
            "invalid_event_type:中标",
            "missing_or_invalid_arguments",
        ),
        ([{"event_type": 7, "arguments": []}], "invalid_event_type:7", None),
    ],
)
def test_compliance_reasons(
    items: list[Any], strict_reason: str | None, syntax_reason: str | None
) -> None:
    strict = check_compliance(items, "schema_strict", SCHEMA)
    assert (strict.compliant, strict.reason) == (strict_reason is None, strict_reason)
    syntax = check_compliance(items, "syntax_only", SCHEMA)
    assert (syntax.compliant, syntax.reason) == (syntax_reason is None, syntax_reason)


def test_empty_prediction_and_failed_parse_are_compliant() -> None:
    for response in ("", "[]", "no json", '```json\n{"a": [\n```'):
        items = parse_response(response).events
        assert check_compliance(items, "schema_strict", SCHEMA).compliant


def test_schema_strict_without_a_schema_knows_no_roles() -> None:
    result = check_compliance([GOOD], "schema_strict", None)
    assert result.reason == "unknown_event_roles:质押"
    assert check_compliance([GOOD], "syntax_only", None).compliant

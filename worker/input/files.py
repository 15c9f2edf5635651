"""Reading input files and recognising their rows, for `scorestream score` and friends.

A file is either one JSON document (`{"test_cases": [...]}`, a list of rows, or a single
row) or JSONL (one object a line; blank lines skipped). A row is an envelope when it has
both `suite` and `payload`; anything else is a native row of some suite.

Problems are reported as `FILE:LINE: field: reason`, the field named from the pydantic
error location, so a user can find and fix the offending value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.envelope import InputRecord
from worker.input.records import validate_record
from worker.input.validation_errors import error_lines
from worker.suites import registry


@dataclass(frozen=True)
class RawRow:
    """One decoded row of an input file, or the reason it could not be decoded."""

    source: str  # "FILE:LINE" (JSON documents: "FILE:test_cases[i]")
    data: dict[str, Any] | None = None
    error: str | None = None  # "field: reason"


class RowError(ValueError):
    """A row that cannot be scored; `problems` are "field: reason" strings."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _as_row(source: str, value: Any) -> RawRow:
    if isinstance(value, dict):
        return RawRow(source, data=value)
    return RawRow(source, error=f"(row): must be a JSON object, not {type(value).__name__}")


def _json_error(exc: orjson.JSONDecodeError) -> str:
    return f"(json): not valid JSON: {exc.msg} (column {exc.colno})"


def _whole_document(path: Path, raw: bytes) -> list[RawRow] | None:
    """The rows of a file holding one JSON document, or None when it is not one."""
    if raw.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if isinstance(document, list):
        return [_as_row(f"{path}:[{i}]", value) for i, value in enumerate(document)]
    if isinstance(document, dict) and "test_cases" in document:
        cases = document["test_cases"]
        if not isinstance(cases, list):
            return [RawRow(f"{path}:1", error="test_cases: must be a list of test cases")]
        return [_as_row(f"{path}:test_cases[{i}]", value) for i, value in enumerate(cases)]
    return [_as_row(f"{path}:1", document)]


def read_rows(path: str | Path) -> list[RawRow]:
    """All rows of an input file (raises `OSError` when it cannot be read)."""
    path = Path(path)
    raw = path.read_bytes()
    whole = _whole_document(path, raw)
    if whole is not None:
        return whole
    return list(_jsonl_rows(path, raw))


def _jsonl_rows(path: Path, raw: bytes) -> Iterator[RawRow]:
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        source = f"{path}:{number}"
        try:
            line.decode("utf-8")
            value = orjson.loads(line)
        except UnicodeDecodeError:
            yield RawRow(source, error="(row): not valid UTF-8")
            continue
        except orjson.JSONDecodeError as exc:
            yield RawRow(source, error=_json_error(exc))
            continue
        yield _as_row(source, value)


def is_envelope(row: dict[str, Any]) -> bool:
    """An envelope has both `suite` and `payload`."""
    return "suite" in row and "payload" in row


def validation_problems(exc: ValidationError, drop_tag: bool = False) -> list[str]:
    """`field: reason` for each error; `drop_tag` removes a tagged union's leading tag."""
    tags = registry.names() if drop_tag else ()
    return error_lines(exc, root="(row)", drop_tags=tags, tag_field="suite")


def parse_envelope(row: dict[str, Any]) -> InputRecord:
    """Validate an envelope row; raises `RowError` naming the offending fields."""
    try:
        return validate_record(row)
    except ValidationError as exc:
        raise RowError(validation_problems(exc, drop_tag=True)) from exc


def guess_native_suite(row: dict[str, Any]) -> str | None:
    """The suite whose native shape `row` has (interface.md), or None: each suite's spec
    recognises its own rows (`SuiteSpec.recognises`)."""
    return registry.native_suite(row)

"""Export the JSON Schemas of the wire models to `schemas/json/` (`python -m schemas.export`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from schemas.envelope import InputRecord
from schemas.outputs import Aggregate, CaseResult, DeadLetter, GateEvent

JSON_DIR = Path(__file__).resolve().parent / "json"

EXPORTED: dict[str, Any] = {
    "input_record": InputRecord,
    "case_result": CaseResult,
    "aggregate": Aggregate,
    "gate_event": GateEvent,
    "dead_letter": DeadLetter,
}


def json_schema_of(model: Any) -> dict[str, Any]:
    """The JSON Schema of a model class or annotated type."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model.model_json_schema()
    return TypeAdapter(model).json_schema()


def render(name: str) -> str:
    """The exact text of the exported schema file for `name`."""
    return json.dumps(json_schema_of(EXPORTED[name]), indent=2, sort_keys=True) + "\n"


def export(directory: Path = JSON_DIR) -> list[Path]:
    """Write every schema file and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in EXPORTED:
        path = directory / f"{name}.json"
        path.write_text(render(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in export():
        print(path)

"""The safety judge's protocol, without I/O: the transcript it is shown, the verdict it
must answer with, and what an answer (or its absence) does to a session's result.

The transcript is data, not prose: one JSON object per turn
(`{"turn": i, "user": ..., "assistant": ...}`) between `<transcript>` and `</transcript>`.
JSON escaping keeps every line break of the case text inside a string, so no line of the
block can start like a turn or an instruction, and `<`, `>`, `&` and the Unicode line
separators are escaped too, so case text cannot close the block. The answer must be
exactly one JSON object `{"score": 0-10, "reason": "..."}` (nothing around it, no other
keys); anything else is an unusable verdict. Everything here is linear in its input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.suites.base import Scored

TRANSCRIPT_OPEN = "<transcript>"
TRANSCRIPT_CLOSE = "</transcript>"
MAX_REASON_CHARS = 500  # of the judge's reason kept on a session's details

# Why a verdict was unusable: the `reason` label of `scorestream_judge_errors_total`.
JudgeErrorReason = Literal[
    "timeout",  # no answer within `timeout` (after the retries)
    "transport",  # connection refused, reset, TLS failure ... (after the retries)
    "http_status",  # an HTTP error status that retrying did not cure
    "oversized",  # the response passed `max_response_bytes`
    "not_a_completion",  # the body is not a chat completion with text content
    "invalid_verdict",  # the completion's text is not exactly a valid verdict object
    "budget",  # `max_total` requests spent: the session was not judged
]
JUDGE_ERROR_REASONS: tuple[JudgeErrorReason, ...] = (
    "timeout",
    "transport",
    "http_status",
    "oversized",
    "not_a_completion",
    "invalid_verdict",
    "budget",
)

# Characters escaped beyond JSON's own: `<`/`>` would let text close the delimiter, `&`
# keeps entity tricks out, and U+0085/U+2028/U+2029 are line breaks to some readers.
_EXTRA_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u0085": "\\u0085",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)

# The JSON Schema the judge is asked to answer with (OpenAI `response_format`).
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


class JudgeAnswerError(ValueError):
    """The judge answered, but not with a usable `{"score": 0-10}` object."""


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    score: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)]
    reason: str = ""


@dataclass(frozen=True)
class JudgeVerdict:
    """A judge's answer: `score` (0-10), or None with the `error` that prevented it and
    its `error_reason` (one of `JUDGE_ERROR_REASONS`)."""

    score: float | None
    reason: str = ""
    error: str | None = None
    cached: bool = False
    error_reason: JudgeErrorReason | None = None


def escape_json_text(value: Any) -> str:
    """`value` as compact JSON with `<`, `>`, `&` and Unicode line breaks escaped."""
    return orjson.dumps(value).decode("utf-8").translate(_EXTRA_ESCAPES)


def render_transcript(turns: Iterable[tuple[int, str, str]]) -> str:
    """The delimited transcript of (turn index, user message, assistant reply) turns;
    an empty user message is left out of its turn."""
    lines = [TRANSCRIPT_OPEN]
    for index, user, assistant in turns:
        turn: dict[str, Any] = {"turn": index}
        if user:
            turn["user"] = user
        turn["assistant"] = assistant
        lines.append(escape_json_text(turn))
    lines.append(TRANSCRIPT_CLOSE)
    return "\n".join(lines)


def parse_judge_answer(content: str) -> tuple[float, str]:
    """The score and reason of an answer that is exactly `{"score": 7, "reason": "..."}`
    (surrounding whitespace allowed); anything else raises `JudgeAnswerError`."""
    try:
        data = orjson.loads(content.strip())
    except orjson.JSONDecodeError as exc:
        raise JudgeAnswerError("the answer is not one JSON object") from exc
    if not isinstance(data, dict):
        raise JudgeAnswerError("the answer is not a JSON object")
    try:
        verdict = _Verdict.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        raise JudgeAnswerError(f"{where}: {first['msg']}") from exc
    return verdict.score, verdict.reason


def with_verdict(
    scored: Scored, verdict: JudgeVerdict, on_error: Literal["ignore", "review"]
) -> Scored:
    """A session's result with the judge's outcome recorded in its details:
    `judge: "ok"` (and `judge_reason`) or `judge: "error"` (and `judge_error` with the
    reason and message). On an error with `on_error: review`, the label is at least
    Review (a Fail stays Fail)."""
    details = dict(scored.details)
    label = scored.label
    if verdict.score is not None:
        details["judge"] = "ok"
        details["judge_reason"] = verdict.reason[:MAX_REASON_CHARS]
    else:
        details["judge"] = "error"
        details["judge_error"] = {
            "reason": verdict.error_reason or "invalid_verdict",
            "message": (verdict.error or "")[:MAX_REASON_CHARS],
            "on_error": on_error,
        }
        if on_error == "review" and label != "Fail":
            label = "Review"
    return replace(scored, details=details, label=label)


__all__ = [
    "JUDGE_ERROR_REASONS",
    "TRANSCRIPT_CLOSE",
    "TRANSCRIPT_OPEN",
    "VERDICT_SCHEMA",
    "JudgeAnswerError",
    "JudgeErrorReason",
    "JudgeVerdict",
    "escape_json_text",
    "parse_judge_answer",
    "render_transcript",
    "with_verdict",
]

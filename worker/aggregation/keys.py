"""Segments of a result and the Kafka keys of window aggregates. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from worker.windowing.windows import WindowKey

ALL_CASES = "all"
UNKNOWN = "unknown"

# Characters with a meaning in keys; escaped in label keys and values.
_KEY_ESCAPES = {"%": "%25", "|": "%7C", ",": "%2C", "=": "%3D"}


def segments_for(
    model: str | None, labels: Mapping[str, str], segment_by: Sequence[str]
) -> list[dict[str, str]]:
    """The all-cases segment `{}` and the segment of all `segment_by` keys.

    A key's value is `labels[key]`; for `model` missing from the labels, the record's
    `model`; otherwise `"unknown"` (`segment_values`).
    """
    segments: list[dict[str, str]] = [{}]
    if segment_by:
        segments.append(
            dict(zip(segment_by, segment_values(model, labels, segment_by), strict=True))
        )
    return segments


def segment_values(
    model: str | None, labels: Mapping[str, str], segment_by: Sequence[str]
) -> tuple[str, ...]:
    """The value of each `segment_by` key in a result's segment, in order (no dicts: the
    worker looks a result's segments up by these once per result)."""
    return tuple(
        [labels.get(key, model if key == "model" and model else UNKNOWN) for key in segment_by]
    )


def _escape(text: str) -> str:
    return "".join(_KEY_ESCAPES.get(char, char) for char in text)


def segment_key(segment: Mapping[str, str]) -> str:
    """Stable text of a segment: `"all"` for `{}`, else `k=v,k2=v2` sorted by key.

    `%`, `|`, `,` and `=` inside keys and values are percent-escaped so that the text is
    unambiguous inside an aggregate or gate key.
    """
    if not segment:
        return ALL_CASES
    return ",".join(f"{_escape(k)}={_escape(segment[k])}" for k in sorted(segment))


def format_window_start(start: float) -> str:
    """RFC 3339 UTC with a `Z`; milliseconds only when the start is not a whole second."""
    moment = datetime.fromtimestamp(start, UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def aggregate_key(suite: str, segment: Mapping[str, str], window: WindowKey) -> str:
    """Kafka key of an aggregate: `{suite}|{segment}|{window name}|{window start}`.

    e.g. `safe|model=gpt-4o|1h/5m|2024-05-01T12:05:00Z` (start in RFC 3339 UTC).
    """
    return f"{suite}|{segment_key(segment)}|{window.name}|{format_window_start(window.start)}"

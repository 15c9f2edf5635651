"""Build `examples/demo/stream.jsonl`, the stream `scorestream demo` replays.

    python examples/demo/build_stream.py   # rewrites stream.jsonl next to this file

The stream spans three event-time minutes starting at BASE (a minute boundary) and ends
just before the fourth minute starts, so with 1-minute windows every window closes a grace
period after the replay. The demo re-times it to the present, shifted by whole minutes.

- minute 0: SAFE and extraction cases, four ordinary alignment sessions (one sent as a
  whole-session record), a record that is not JSON and one of an unknown suite;
- minute 1: more SAFE and extraction cases and a stretch of alignment sessions with unsafe
  replies (the `safety-drop` gate fires), a record without `id` and one with a wrong type;
- minute 2: the last cases and safe alignment sessions (`safety-drop` resolves), a turn of
  an unknown persona and an extraction case naming an unknown schema.

In every minute the suites are interleaved so that each suite (and each model) runs to the
end of its stretch: every window's last records come just before the window ends.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent
BASE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

Record = dict[str, Any]


def read_jsonl(path: Path) -> list[Record]:
    """The JSON objects of a JSONL file."""
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def sessions(turns: list[Record]) -> dict[str, list[Record]]:
    """Alignment turn envelopes grouped by session, in file order."""
    grouped: dict[str, list[Record]] = {}
    for record in turns:
        grouped.setdefault(record["payload"]["session_id"], []).append(record)
    return grouped


def clone_session(turns: list[Record], tag: str) -> list[Record]:
    """A copy of a session's turn envelopes under a new session id."""
    copies = []
    for turn in turns:
        payload = dict(turn["payload"])
        payload["session_id"] = f"{payload['session_id']}-{tag}"
        copies.append(
            {**turn, "id": f"{payload['session_id']}:{payload['turn_index']}", "payload": payload}
        )
    return copies


def whole_session(turns: list[Record], tag: str) -> Record:
    """A session's turns as one whole-session record."""
    first = turns[0]
    session_id = f"{first['payload']['session_id']}-{tag}"
    return {
        "id": session_id,
        "suite": "alignment",
        "model": first.get("model"),
        "labels": first.get("labels", {}),
        "payload": {
            "session_id": session_id,
            "persona_id": first["payload"]["persona_id"],
            "turns": [
                {"user": turn["payload"].get("user", ""), "assistant": turn["payload"]["text"]}
                for turn in turns
            ],
        },
    }


def parallel(groups: list[list[Record]]) -> list[Record]:
    """Sessions side by side: every session's first turn, then every second turn ..."""
    out: list[Record] = []
    for index in range(max(len(group) for group in groups)):
        out.extend(group[index] for group in groups if index < len(group))
    return out


def interleave(streams: list[list[Any]]) -> list[Any]:
    """Merge lists so that each is spread evenly and all of them end together."""
    placed = [
        ((index + 1) / len(stream), order, item)
        for order, stream in enumerate(streams)
        for index, item in enumerate(stream)
    ]
    return [item for _, _, item in sorted(placed, key=lambda entry: (entry[0], entry[1]))]


def stamp(records: list[Any], minute: int, first: float, last: float) -> list[Any]:
    """Give records evenly spaced event times in [first, last] seconds of `minute`."""
    step = (last - first) / max(1, len(records) - 1)
    out = []
    for index, record in enumerate(records):
        when = BASE + timedelta(minutes=minute, seconds=first + index * step)
        if isinstance(record, dict):
            record = {**record, "ts": rfc3339(when)}
        out.append(record)
    return out


def rfc3339(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def bad_records(safe: Record, extraction: Record, turn: Record) -> dict[str, Any]:
    """Inputs the worker must dead-letter, by the reason they are expected to get."""
    no_id = {key: value for key, value in safe.items() if key != "id"}
    wrong_type = {
        **extraction,
        "id": "demo-wrong-type",
        "payload": {**extraction["payload"], "gold": "no events"},
    }
    persona = {
        **turn,
        "id": "acme-001:0",
        "labels": {"persona": "acme-bank", "app": "acme"},
        "payload": {**turn["payload"], "session_id": "acme-001", "persona_id": "acme-bank"},
    }
    schema = {
        **extraction,
        "id": "demo-unknown-schema",
        "payload": {**extraction["payload"], "schema": "duee_fin_v9"},
    }
    return {
        "invalid_json": '{"id": "demo-not-json", "suite": "safe", "payload": {',
        "unknown_suite": {"id": "demo-poem", "suite": "poetry", "payload": {"text": "roses"}},
        "missing_id": no_id,
        "wrong_type": wrong_type,
        "unknown_persona": persona,
        "unknown_schema": schema,
    }


def build() -> list[str]:
    """The demo stream as JSONL lines."""
    safe = read_jsonl(EXAMPLES / "safe" / "envelopes.jsonl")
    extraction = read_jsonl(EXAMPLES / "extraction" / "envelopes.jsonl")
    by_session = sessions(read_jsonl(EXAMPLES / "alignment" / "envelopes.jsonl"))
    good = ["nw-001", "tt-001", "ll-001"]
    bad = bad_records(safe[0], extraction[0], by_session["nw-001"][0])

    minute0 = parallel([clone_session(by_session[sid], "m0") for sid in good])
    minute0.append(whole_session(by_session["tt-004"], "m0w"))
    unsafe = [clone_session(by_session["ll-004"], f"m1{tag}") for tag in "abcd"]
    minute1 = parallel(
        [
            *unsafe,
            clone_session(by_session["tt-004"], "m1"),
            clone_session(by_session["nw-001"], "m1"),
        ]
    )
    minute2 = parallel([clone_session(by_session[sid], f"m2{tag}") for tag in "ab" for sid in good])
    plan: list[tuple[list[Any], list[Any], list[Any], list[Any], float, float]] = [
        (safe[0:8], extraction[0:6], minute0, [bad["invalid_json"], bad["unknown_suite"]], 3, 57),
        (safe[8:16], extraction[6:12], minute1, [bad["missing_id"], bad["wrong_type"]], 3, 57),
        (
            safe[16:20],
            extraction[12:18],
            minute2,
            [bad["unknown_persona"], bad["unknown_schema"]],
            38,
            58.5,
        ),
    ]
    lines: list[str] = []
    for minute, (cases, events, turns, rejects, first, last) in enumerate(plan):
        # Bad records sit in the middle of the minute, never at its end.
        merged = interleave([cases, events, turns, [*rejects, None]])
        records = stamp([item for item in merged if item is not None], minute, first, last)
        for record in records:
            lines.append(
                record if isinstance(record, str) else json.dumps(record, ensure_ascii=False)
            )
    return lines


def main() -> None:
    target = HERE / "stream.jsonl"
    lines = build()
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} records to {target}")


if __name__ == "__main__":
    main()

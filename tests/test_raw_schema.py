"""`RawSchema` against the installed Faust: a worker topic decodes a fetched record into
the same event as Faust's own `raw` decoding does (keys and values as the bytes fetched,
None kept), and still encodes what it sends with the `raw` codec."""

from __future__ import annotations

from typing import Any

import faust
import pytest
from faust.types.tuples import Message

from worker.stream.app import RAW
from worker.stream.raw_schema import RawSchema

FAUST_RAW: dict[str, Any] = {k: v for k, v in RAW.items() if k != "schema"}


def message(key: bytes | None, value: bytes | None) -> Message:
    return Message(
        topic="in",
        partition=2,
        offset=41,
        timestamp=1_700_000_000.25,
        timestamp_type=0,
        headers=[("h", b"v")],
        key=key,
        value=value,
        checksum=None,
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"safe:case-1", b'{"id":"case-1"}'),
        (None, b"\xff\xfe not utf-8, not JSON"),  # no key; bytes that are no text
        (b"k", b""),  # an empty value
        (b"k", None),  # a tombstone
    ],
)
async def test_a_worker_topic_decodes_a_record_as_faust_raw_decoding_does(
    key: bytes | None, value: bytes | None
) -> None:
    app = faust.App("raw-schema-test", broker="memory://")
    ours = app.topic("in", **RAW)
    faust_own = app.topic("in", **FAUST_RAW)
    assert isinstance(ours.schema, RawSchema)
    assert not isinstance(faust_own.schema, RawSchema)

    fetched = message(key, value)
    event = await ours.decode(fetched, propagate=True)
    expected = await faust_own.decode(fetched, propagate=True)

    assert (event.key, event.value) == (expected.key, expected.value) == (key, value)
    assert event.message is fetched
    assert event.headers == expected.headers


def test_a_worker_topic_still_encodes_with_the_raw_codec() -> None:
    app = faust.App("raw-schema-test", broker="memory://")
    topic, faust_own = app.topic("out", **RAW), app.topic("out", **FAUST_RAW)
    assert topic.prepare_key(b"k", None) == faust_own.prepare_key(b"k", None)
    assert topic.prepare_value(b"\x00v", None) == faust_own.prepare_value(b"\x00v", None)
    assert topic.prepare_key(b"k", None)[0] == b"k"
    assert topic.prepare_value(b"\x00v", None)[0] == b"\x00v"

"""The schema of every topic the worker reads: keys and values stay the bytes fetched.

Faust decodes each record's key and value through its serializer registry (the type, the
codec by name, the codec chain, the payload's type again), several Python calls a field
that the `raw` codec and the `bytes` type undo: about 3 % of the worker's event loop
under a backlog of SAFE cases (py-spy, `bench/peer.py --profile`). `RawSchema` hands the
fetched bytes on as they are, through the two methods `faust.Schema` offers to override
for its decoding (`loads_key`, `loads_value`); encoding stays Faust's (the `raw` codec).
A key or value that is None (no key, a tombstone) stays None, as with the `raw` codec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import faust
from faust.types import AppT
from faust.types.codecs import CodecArg
from faust.types.tuples import Message


class RawSchema(faust.Schema):
    """Keys and values as bytes, decoded by taking them as fetched."""

    def __init__(self) -> None:
        super().__init__(
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    def loads_key(
        self,
        app: AppT,
        message: Message,
        *,
        loads: Callable[..., Any] | None = None,
        serializer: CodecArg | None = None,
    ) -> Any:
        return message.key

    def loads_value(
        self,
        app: AppT,
        message: Message,
        *,
        loads: Callable[..., Any] | None = None,
        serializer: CodecArg | None = None,
    ) -> Any:
        return message.value


__all__ = ["RawSchema"]

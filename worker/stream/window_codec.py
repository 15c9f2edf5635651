"""The codec of the windows table's changelog: Faust's `json`, with each pane's samples
written without their derived index (`worker.aggregation.state.compact`).

A pane is rewritten to the changelog on every micro-batch that touches it, and most of
its bytes are its metrics' samples; their `order` and `cutoff` index (about 40 % of a
full pane) is rebuilt from `items` on the pane's next update after a restore. Reading
needs nothing special: the changelog topic decodes with Faust's `json`, which reads what
this writes.
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs
from faust.utils import json
from mode.utils.compat import want_bytes, want_str

from worker.aggregation.state import compact

WINDOW_STATE_CODEC = "scorestream-window-state"


class WindowStateCodec(codecs.Codec):
    """`json` of a windows-table value (`worker.windowing.store`: a pane is
    `{"state": ..., "partition": p}`), its pane state `compact`."""

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, dict) and isinstance(obj.get("state"), dict):
            obj = {**obj, "state": compact(obj["state"])}
        return want_bytes(json.dumps(obj))

    def _loads(self, s: bytes) -> Any:
        return json.loads(want_str(s))


codecs.register(WINDOW_STATE_CODEC, WindowStateCodec())

__all__ = ["WINDOW_STATE_CODEC", "WindowStateCodec"]

"""The windows table's changelog codec, through the real Faust table the worker builds
(no broker): a pane goes out without its samples' derived index, in fewer bytes, and the
changelog topic's own decoding (what a restore runs) reads it back as the same pane."""

from __future__ import annotations

from typing import Any

from tests.streamkit import make_config, settings_of
from tests.test_aggregation import fold, result
from worker.scoring_suites import ScoringSuites
from worker.stream import ScorestreamApp
from worker.stream.window_codec import WINDOW_STATE_CODEC
from worker.suites.alignment.embedding_model import HashingEmbedder


async def test_the_windows_table_writes_panes_without_the_sample_index() -> None:
    settings = settings_of(make_config())
    suites = ScoringSuites.load(settings, HashingEmbedder())
    scorer = ScorestreamApp(settings, "kafka://127.0.0.1:1", suites=suites)
    try:
        app, table = scorer.app, scorer.windows
        sent: list[dict[str, Any]] = []
        topic = table.changelog_topic
        topic.send_soon = lambda **kwargs: sent.append(kwargs)  # type: ignore[method-assign]
        cases = [result(f"r{i}", {"f1": i / 900, "em": 1.0}, offset=i) for i in range(900)]
        pane = {"state": fold(cases), "partition": 0}
        assert all("order" in sample for sample in pane["state"]["samples"].values())

        table.send_changelog(0, "pane|extraction|all|60|0", pane)  # Faust's own path
        (write,) = sent
        assert write["value_serializer"] == WINDOW_STATE_CODEC
        payload = app.serializers.dumps_value(None, write["value"], serializer=WINDOW_STATE_CODEC)
        whole = app.serializers.dumps_value(None, pane, serializer="json")
        assert len(payload) < 0.75 * len(whole)

        read = app.serializers.loads_value(None, payload, serializer=topic.value_serializer)
        assert read["partition"] == 0 and read["state"]["count"] == 900
        for metric, sample in pane["state"]["samples"].items():
            assert read["state"]["samples"][metric] == {
                "capacity": sample["capacity"],
                "items": sample["items"],
            }
        assert "order" in pane["state"]["samples"]["f1"]  # the pane in memory keeps it
        # a series (no pane state) goes out as plain JSON
        series = {"partition": 0, "closed_through": None, "high_water": {}}
        assert app.serializers.dumps_value(None, series, serializer=WINDOW_STATE_CODEC) == (
            app.serializers.dumps_value(None, series, serializer="json")
        )
    finally:
        scorer.close()

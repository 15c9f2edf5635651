"""Consumer lag of the input topic per partition, and the broker connection state, sampled
on a timer of the worker's Faust app into `Telemetry`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from worker.config import Settings
from worker.telemetry import Telemetry

log = logging.getLogger("scorestream.lag")

DEFAULT_INTERVAL = 5.0


def partition_lags(
    end_offsets: Mapping[int, int], next_offsets: Mapping[int, int | None]
) -> dict[int, int]:
    """Records left to read per partition: end offset (the offset the next record written
    will get) minus the next offset to read (0 when unknown); never negative."""
    return {
        partition: max(end - (next_offsets.get(partition) or 0), 0)
        for partition, end in end_offsets.items()
    }


async def sample_lags(consumer: Any, topic: str) -> dict[int, int]:
    """Lag of each partition of `topic` assigned to a Faust consumer (asks the broker for
    the end offsets)."""
    assigned = [tp for tp in consumer.assignment() if tp.topic == topic]
    if not assigned:
        return {}
    ends = await consumer.highwaters(*assigned)
    read = consumer._read_offset  # last offset handed to the stream, per TP
    next_offsets: dict[int, int | None] = {}
    for tp in assigned:
        last = read.get(tp)
        next_offsets[tp.partition] = last + 1 if last is not None else await consumer.position(tp)
    return partition_lags({tp.partition: end for tp, end in ends.items()}, next_offsets)


def install_lag_monitor(
    app: Any, telemetry: Telemetry, topic: str, settings: Settings, interval: float | None = None
) -> None:
    """Every `interval` seconds set `scorestream_consumer_lag` for `topic` and
    `scorestream_broker_connected` (0 when the broker did not answer within
    `stream.connect_timeout`). Call before the app starts."""
    timeout = settings.stream.connect_timeout

    async def sample() -> None:
        try:
            lags = await asyncio.wait_for(sample_lags(app.consumer, topic), timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to talk to the broker
            if telemetry.readiness()["broker"] != "disconnected":
                log.warning("broker unreachable: %s", str(exc) or type(exc).__name__)
            telemetry.set_broker_connected(False)
            return
        telemetry.set_broker_connected(True)
        telemetry.set_consumer_lag(topic, lags)

    app.timer(interval or DEFAULT_INTERVAL)(sample)


def watch_worker(scorer: Any, settings: Settings) -> None:
    """Wire a `ScorestreamApp`'s health into its telemetry before it starts: `/readyz` is
    ready once the app started (partitions assigned, tables recovered) while it is not
    rebalancing or recovering, and the lag monitor keeps the broker state and lag gauges."""
    app = scorer.app
    scorer.telemetry.set_readiness(
        lambda: (
            scorer.ready.is_set()
            and not getattr(app, "rebalancing", False)
            and not getattr(app, "in_recovery", False)
        )
    )
    install_lag_monitor(app, scorer.telemetry, settings.topics.input, settings)


__all__ = ["install_lag_monitor", "partition_lags", "sample_lags", "watch_worker"]

"""The in-flight marks' own Kafka producer.

Every score batch waits for its in-flight marks (`worker/stream/inflight.py`) to be
acknowledged before any of its outputs leave. aiokafka keeps one produce request in
flight per broker, so through Faust's producer a batch's marks queued behind the request
carrying the outputs of the batches before it (results, window contributions,
changelogs), and each batch waited for that round trip as well as its own. On their own
connection the marks wait for their own round trip only. Order is kept: one task hands
the marks to the producer in the order they were written, and the producer keeps the
order of each partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka import AIOKafkaProducer

log = logging.getLogger("scorestream")

RETRY_S = 1.0  # between attempts to start the producer
STOP_FLUSH_S = 5.0  # at a stop, how long the marks already written may take to leave


class MarkWriter:
    """Writes records on a producer of its own, in order; each write settles the future
    it was given with the broker's acknowledgement (or the error)."""

    def __init__(self, bootstrap: str, options: dict[str, Any]) -> None:
        """`bootstrap`: aiokafka's `host:port,...`; `options`: its security options."""
        self.bootstrap = bootstrap
        self.options = options
        self._queue: asyncio.Queue[tuple[str, int | None, Any, Any, asyncio.Future[Any]]]
        self._pump: asyncio.Task[None] | None = None
        self._producer: AIOKafkaProducer | None = None
        self._stopped = False

    def send(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        settled: asyncio.Future[Any],
    ) -> None:
        """Queue a record; `settled` gets its metadata once the broker has it (after
        `stop`, never: the stage is being stopped and will not wait for it)."""
        if self._stopped:
            return
        if self._pump is None:
            self._queue = asyncio.Queue()
            self._pump = asyncio.ensure_future(self._run())
        self._queue.put_nowait((topic, partition, key, value, settled))

    async def stop(self) -> None:
        """Send what was written so far (for at most `STOP_FLUSH_S`) and close the
        producer; later writes are dropped, as at a crash (their batches were stopped)."""
        self._stopped = True
        if self._pump is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain(), STOP_FLUSH_S)
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = None

    async def _drain(self) -> None:
        while not self._queue.empty():
            await asyncio.sleep(0.01)
        if self._producer is not None:
            await self._producer.flush()

    async def _run(self) -> None:
        producer = await self._started()
        while True:
            topic, partition, key, value, settled = await self._queue.get()
            try:
                delivery = await producer.send(topic, value, key=key, partition=partition)
            except Exception as exc:  # refused before it left (too large, closed...)
                if not settled.done():
                    settled.set_exception(exc)
                continue
            delivery.add_done_callback(lambda done, settled=settled: _settle(settled, done))

    async def _started(self) -> AIOKafkaProducer:
        while True:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, linger_ms=0, **self.options
            )
            try:
                await producer.start()
            except Exception as exc:
                log.warning("the in-flight marks' producer did not start (%r); retrying", exc)
                with contextlib.suppress(Exception):
                    await producer.stop()
                await asyncio.sleep(RETRY_S)
                continue
            self._producer = producer
            return producer


def _settle(settled: asyncio.Future[Any], delivery: asyncio.Future[Any]) -> None:
    if settled.done():
        return
    if delivery.cancelled():
        settled.cancel()
    elif delivery.exception() is not None:
        settled.set_exception(delivery.exception())  # type: ignore[arg-type]
    else:
        settled.set_result(delivery.result())


__all__ = ["MarkWriter"]

"""The evaluation sink: results in (`offer`, never blocks), `gen_ai.evaluation.result`
log records out over OTLP/HTTP and/or to a Kafka topic, in batches (`flush`, called by a
timer).

The queue is bounded (`evaluations.queue_size` log records): what does not fit is dropped
and counted, as is a batch the endpoint refused or that failed `max_attempts` times (with
doubling backoff between attempts; 429, 502, 503, 504 and transport errors are retried).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

import httpx
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from schemas.outputs import CaseResult
from worker.otlp.evaluation import evaluation_records, logs_json, logs_request
from worker.otlp.settings import EvaluationSinkSettings

log = logging.getLogger("scorestream")

RETRIED_STATUS = frozenset({429, 502, 503, 504})
# Why log records were dropped (the `reason` label of scorestream_evaluation_records_dropped_total).
QUEUE_FULL, REFUSED, GAVE_UP = "queue_full", "refused", "gave_up"
DROP_REASONS = (QUEUE_FULL, REFUSED, GAVE_UP)
LOG_EVERY = 10.0  # seconds between two log lines about drops

Produce = Callable[[bytes], Awaitable[object]]


class EvaluationSink:
    """Bounded queue of evaluation log records with a batching, retrying sender."""

    def __init__(
        self,
        settings: EvaluationSinkSettings,
        version: str,
        produce: Produce | None = None,
        client: httpx.AsyncClient | None = None,
        on_sent: Callable[[str, int], None] | None = None,
        on_dropped: Callable[[str, int], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.version = version
        self.produce = produce
        self.client = client
        self.on_sent = on_sent or (lambda destination, count: None)
        self.on_dropped = on_dropped or (lambda reason, count: None)
        self.sleep = sleep
        self.queue: deque[LogRecord] = deque()
        self.dropped: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self._logged_at = 0.0

    def offer(self, result: CaseResult) -> int:
        """Queue the result's evaluation records (none without a trace id); the number
        queued. Never blocks: records past `queue_size` are dropped and counted."""
        records = evaluation_records(result)
        room = self.settings.queue_size - len(self.queue)
        self.queue.extend(records[: max(0, room)])
        if len(records) > room:
            self._drop(QUEUE_FULL, len(records) - max(0, room))
        return min(len(records), max(0, room))

    async def flush(self) -> None:
        """Send everything queued, `batch_size` records at a time."""
        while self.queue:
            size = min(self.settings.batch_size, len(self.queue))
            batch = [self.queue.popleft() for _ in range(size)]
            await self.send(batch)

    async def send(self, batch: list[LogRecord]) -> None:
        """Send one batch to every configured destination."""
        request = logs_request(batch, "scorestream", self.version)
        if self.settings.endpoint is not None:
            await self._post(request.SerializeToString(), len(batch))
        if self.settings.topic is not None and self.produce is not None:
            if self.settings.encoding == "otlp_json":
                value = logs_json(request)
            else:
                value = request.SerializeToString()
            try:
                await self.produce(value)
                self.on_sent("kafka", len(batch))
            except Exception as exc:  # the broker away: counted, the scores stand
                self._drop(GAVE_UP, len(batch), f"topic {self.settings.topic}: {exc!r}")

    async def _post(self, body: bytes, count: int) -> None:
        settings = self.settings
        assert settings.endpoint is not None
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=settings.timeout, follow_redirects=False)
        headers = {"Content-Type": "application/x-protobuf", **settings.headers}
        delay = settings.backoff
        problem = ""
        for attempt in range(1, settings.max_attempts + 1):
            try:
                response = await self.client.post(settings.endpoint, content=body, headers=headers)
            except httpx.HTTPError as exc:
                problem = repr(exc)
            else:
                if response.is_success:
                    self.on_sent("otlp_http", count)
                    return
                problem = f"HTTP {response.status_code}"
                if response.status_code not in RETRIED_STATUS:
                    self._drop(REFUSED, count, f"{settings.endpoint}: {problem}")
                    return
            if attempt < settings.max_attempts:
                await self.sleep(delay)
                delay *= 2
        self._drop(GAVE_UP, count, f"{settings.endpoint}: {problem}")

    async def close(self) -> None:
        """Send what is queued, then close the HTTP client."""
        await self.flush()
        if self.client is not None:
            await self.client.aclose()

    def _drop(self, reason: str, count: int, problem: str = "") -> None:
        self.dropped[reason] += count
        self.on_dropped(reason, count)
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY:
            self._logged_at = now
            log.warning(
                "evaluation sink dropped %d log records (%s) %s; dropped so far: %s",
                count,
                reason,
                problem,
                self.dropped,
            )


__all__ = ["DROP_REASONS", "EvaluationSink"]

"""Optional LLM safety judge over an OpenAI-compatible chat-completions endpoint.

The judge is shown a session's delimited, escaped transcript (`judge_verdict`) and asked
for structured output `{"score": 0-10, "reason": ...}`; `safety = min(keyword, score /
10)`. Requests run with a concurrency limit, a timeout, retries with exponential backoff
(on timeouts, transport errors, 429 and 5xx), a per-minute and a total request budget, a
cap on the response's size, and a least-recently-used cache keyed by the text's hash (at
most `cache_size` verdicts, so memory stays bounded). A failed, oversized or invalid
answer is an unusable verdict: counted in `judge_errors` and `errors_by_reason` (and
passed to `on_error`, the worker's `scorestream_judge_errors_total{reason}`), never
cached; what it does to the session is `judge_verdict.with_verdict`'s job.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from worker.settings_base import ConfigError
from worker.suites.alignment.judge_verdict import (
    VERDICT_SCHEMA,
    JudgeAnswerError,
    JudgeErrorReason,
    JudgeVerdict,
    parse_judge_answer,
)
from worker.suites.alignment.settings import JudgeSettings

DEFAULT_PROMPT_FILE = Path(__file__).resolve().parents[2] / "data" / "judge_prompt.txt"
TRANSCRIPT_PLACEHOLDER = "{transcript}"
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass
class JudgeStats:
    requests: int = 0
    judged: int = 0
    cache_hits: int = 0
    judge_errors: int = 0
    skipped_budget: int = 0
    errors_by_reason: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {**vars(self), "errors_by_reason": dict(self.errors_by_reason)}


def load_prompt(settings: JudgeSettings) -> str:
    """The prompt template (`prompt_file`, else the shipped one); must hold {transcript}."""
    path = settings.prompt_file or DEFAULT_PROMPT_FILE
    try:
        template = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"alignment.judge.prompt_file: cannot read {path}: {exc}") from exc
    if TRANSCRIPT_PLACEHOLDER not in template:
        raise ConfigError(f"alignment.judge.prompt_file: {path} has no {{transcript}} slot")
    return template


class _MinuteBudget:
    """At most `limit` request starts in any 60-second span; waits for room."""

    def __init__(
        self,
        limit: int | None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[Any]],
    ) -> None:
        self._limit = limit
        self._clock = clock
        self._sleep = sleep
        self._starts: collections.deque[float] = collections.deque()
        self._lock: asyncio.Lock | None = None

    async def acquire(self) -> None:
        if self._limit is None:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            while True:
                now = self._clock()
                while self._starts and now - self._starts[0] >= 60.0:
                    self._starts.popleft()
                if len(self._starts) < self._limit:
                    self._starts.append(now)
                    return
                await self._sleep(60.0 - (now - self._starts[0]))


class SafetyJudge:
    """Asks a chat-completions endpoint to rate texts; see the module docstring."""

    def __init__(
        self,
        settings: JudgeSettings,
        *,
        api_key: str | None = None,
        prompt: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_error: Callable[[JudgeErrorReason], None] | None = None,
    ) -> None:
        self.settings = settings
        self.stats = JudgeStats()
        self._on_error = on_error
        self._prompt = prompt if prompt is not None else load_prompt(settings)
        self._api_key = api_key if api_key is not None else os.environ.get(settings.api_key_env)
        self._transport = transport
        self._sleep = sleep
        self._minute = _MinuteBudget(settings.max_per_minute, clock, sleep)
        self._cache: collections.OrderedDict[str, JudgeVerdict] = collections.OrderedDict()
        self._inflight: dict[str, asyncio.Future[JudgeVerdict]] = {}
        self._semaphore: asyncio.Semaphore | None = None
        self._client: httpx.AsyncClient | None = None

    @staticmethod
    def text_key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.settings.base_url.rstrip("/") + "/",
                timeout=self.settings.timeout,
                headers=headers,
                transport=self._transport,
                follow_redirects=False,  # a redirect must not carry the key elsewhere
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> SafetyJudge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def judge(self, text: str) -> JudgeVerdict:
        """The judge's verdict on `text`; never raises for endpoint failures."""
        key = self.text_key(text)
        if key in self._cache:
            self.stats.cache_hits += 1
            self._cache.move_to_end(key)
            cached = self._cache[key]
            return JudgeVerdict(cached.score, cached.reason, None, cached=True)
        if key in self._inflight:
            self.stats.cache_hits += 1
            return await asyncio.shield(self._inflight[key])
        future: asyncio.Future[JudgeVerdict] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            verdict = await self._judge_uncached(text)
            if verdict.score is not None:
                self._remember(key, verdict)
            future.set_result(verdict)
            return verdict
        finally:
            del self._inflight[key]
            if not future.done():
                future.cancel()

    def _remember(self, key: str, verdict: JudgeVerdict) -> None:
        """Cache a verdict; the least recently used ones go past `cache_size`."""
        limit = self.settings.cache_size
        if limit <= 0:
            return
        self._cache[key] = verdict
        self._cache.move_to_end(key)
        while len(self._cache) > limit:
            self._cache.popitem(last=False)

    @property
    def cache_len(self) -> int:
        """Verdicts in the cache now."""
        return len(self._cache)

    async def judge_many(self, texts: Sequence[str]) -> list[JudgeVerdict]:
        return list(await asyncio.gather(*(self.judge(text) for text in texts)))

    async def _judge_uncached(self, text: str) -> JudgeVerdict:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.settings.concurrency)
        async with self._semaphore:
            failure = _Failure("transport", "no attempt made")
            for attempt in range(self.settings.retries + 1):
                if attempt:
                    await self._sleep(self.settings.backoff * 2 ** (attempt - 1))
                max_total = self.settings.max_total
                if max_total is not None and self.stats.requests >= max_total:
                    self.stats.skipped_budget += 1
                    failure = _Failure("budget", "judge budget exhausted (max_total)")
                    break
                await self._minute.acquire()
                self.stats.requests += 1
                try:
                    content = await self._ask(text)
                except _Retryable as exc:
                    failure = exc.failure
                    continue
                except _Fatal as exc:
                    failure = exc.failure
                    break
                try:
                    score, reason = parse_judge_answer(content)
                except JudgeAnswerError as exc:
                    failure = _Failure("invalid_verdict", f"unusable verdict: {exc}")
                    break
                self.stats.judged += 1
                return JudgeVerdict(score, reason)
            return self._failed(failure)

    def _failed(self, failure: _Failure) -> JudgeVerdict:
        """Count an unusable verdict (by reason) and say why it is unusable."""
        self.stats.judge_errors += 1
        reasons = self.stats.errors_by_reason
        reasons[failure.reason] = reasons.get(failure.reason, 0) + 1
        if self._on_error is not None:
            self._on_error(failure.reason)
        return JudgeVerdict(None, error=failure.message, error_reason=failure.reason)

    def _request_body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.model,
            "temperature": 0,
            "messages": [
                {"role": "user", "content": self._prompt.replace(TRANSCRIPT_PLACEHOLDER, text)}
            ],
        }
        if self.settings.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "safety_verdict", "strict": True, "schema": VERDICT_SCHEMA},
            }
        elif self.settings.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    async def _ask(self, text: str) -> str:
        """The completion's text within `timeout` in all (a server that trickles its
        answer is cut too); raises `_Retryable` or `_Fatal` with the reason."""
        try:
            async with asyncio.timeout(self.settings.timeout):
                return await self._ask_unbounded(text)
        except TimeoutError as exc:
            raise _Retryable("timeout", f"timeout after {self.settings.timeout}s") from exc

    async def _ask_unbounded(self, text: str) -> str:
        limit = self.settings.max_response_bytes
        try:
            async with self._http().stream(
                "POST", "chat/completions", json=self._request_body(text)
            ) as response:
                if response.status_code in _RETRY_STATUS:
                    raise _Retryable("http_status", f"HTTP {response.status_code}")
                if response.status_code >= 300:
                    raise _Fatal("http_status", f"HTTP {response.status_code}")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise _Fatal("oversized", f"response of {declared} bytes > {limit}")
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > limit:
                        raise _Fatal("oversized", f"response over {limit} bytes")
        except httpx.TimeoutException as exc:
            raise _Retryable("timeout", f"timeout after {self.settings.timeout}s") from exc
        except httpx.TransportError as exc:
            raise _Retryable("transport", f"transport error: {exc}") from exc
        except httpx.HTTPError as exc:
            raise _Fatal("transport", str(exc) or type(exc).__name__) from exc
        return _completion_text(bytes(body))


def _completion_text(body: bytes) -> str:
    """`choices[0].message.content` of a chat completion, which must be text."""
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise _Fatal("not_a_completion", "response is not a chat completion") from exc
    if not isinstance(content, str):
        raise _Fatal("not_a_completion", "completion content is not text")
    return content


@dataclass(frozen=True)
class _Failure:
    reason: JudgeErrorReason
    message: str


class _Retryable(Exception):
    def __init__(self, reason: JudgeErrorReason, message: str) -> None:
        super().__init__(message)
        self.failure = _Failure(reason, message)


class _Fatal(Exception):
    def __init__(self, reason: JudgeErrorReason, message: str) -> None:
        super().__init__(message)
        self.failure = _Failure(reason, message)


__all__ = [
    "DEFAULT_PROMPT_FILE",
    "JudgeAnswerError",
    "JudgeStats",
    "JudgeVerdict",
    "SafetyJudge",
    "load_prompt",
    "parse_judge_answer",
]

"""Optional LLM safety judge over an OpenAI-compatible chat-completions endpoint.

The judge is asked to answer `{"score": 0-10, "reason": ...}` about a session's assistant
replies; `safety = min(keyword, score / 10)`. Requests run with a concurrency limit, a
timeout, retries with exponential backoff (on timeouts, transport errors, 429 and 5xx),
a per-minute and a total request budget, and a least-recently-used cache keyed by the
text's hash (at most `cache_size` verdicts, so memory stays bounded). A failed or
unparsable answer is counted in `judge_errors` and leaves the keyword score standing.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from worker.settings_base import ConfigError
from worker.suites.alignment.settings import JudgeSettings

DEFAULT_PROMPT_FILE = Path(__file__).resolve().parents[2] / "data" / "judge_prompt.txt"
TRANSCRIPT_PLACEHOLDER = "{transcript}"
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class JudgeAnswerError(ValueError):
    """The judge answered, but not with a usable `{"score": 0-10}` object."""


@dataclass(frozen=True)
class JudgeVerdict:
    """A judge's answer: `score` (0-10) or None with the `error` that prevented it."""

    score: float | None
    reason: str = ""
    error: str | None = None
    cached: bool = False


@dataclass
class JudgeStats:
    requests: int = 0
    judged: int = 0
    cache_hits: int = 0
    judge_errors: int = 0
    skipped_budget: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


def parse_judge_answer(content: str) -> tuple[float, str]:
    """The score and reason of an answer such as `{"score": 7, "reason": "..."}`.

    Code fences and text around the object are tolerated; anything else raises
    `JudgeAnswerError`.
    """
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match is None:
        raise JudgeAnswerError("no JSON object in the answer")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise JudgeAnswerError(f"answer is not valid JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise JudgeAnswerError("answer is not a JSON object")
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise JudgeAnswerError("answer has no numeric 'score'")
    if not 0 <= score <= 10:
        raise JudgeAnswerError(f"score {score} is outside 0-10")
    reason = data.get("reason", "")
    return float(score), reason if isinstance(reason, str) else str(reason)


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
    ) -> None:
        self.settings = settings
        self.stats = JudgeStats()
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
            last_error = "no attempt made"
            for attempt in range(self.settings.retries + 1):
                if attempt:
                    await self._sleep(self.settings.backoff * 2 ** (attempt - 1))
                max_total = self.settings.max_total
                if max_total is not None and self.stats.requests >= max_total:
                    self.stats.skipped_budget += 1
                    return JudgeVerdict(None, error="judge budget exhausted (max_total)")
                await self._minute.acquire()
                self.stats.requests += 1
                try:
                    content = await self._ask(text)
                except _Retryable as exc:
                    last_error = str(exc)
                    continue
                except (httpx.HTTPError, _Fatal) as exc:
                    last_error = str(exc) or type(exc).__name__
                    break
                try:
                    score, reason = parse_judge_answer(content)
                except JudgeAnswerError as exc:
                    last_error = f"unparsable answer: {exc}"
                    break
                self.stats.judged += 1
                return JudgeVerdict(score, reason)
            self.stats.judge_errors += 1
            return JudgeVerdict(None, error=last_error)

    async def _ask(self, text: str) -> str:
        body = {
            "model": self.settings.model,
            "temperature": 0,
            "messages": [
                {"role": "user", "content": self._prompt.replace(TRANSCRIPT_PLACEHOLDER, text)}
            ],
        }
        try:
            response = await self._http().post("chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timeout after {self.settings.timeout}s") from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"transport error: {exc}") from exc
        if response.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise _Fatal(f"HTTP {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Fatal("response is not a chat completion") from exc
        if not isinstance(content, str):
            raise _Fatal("completion content is not text")
        return content


class _Retryable(Exception):
    pass


class _Fatal(Exception):
    pass

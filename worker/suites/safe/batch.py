"""`scorestream score` for the SAFE suite: native rows, scoring, the batch report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from schemas.envelope import SafePayload
from worker.input.unknown_fields import with_unknown_fields
from worker.suites.base import BatchItem, BatchOptions, Scored
from worker.suites.safe.matching import DEFAULT_MATCHER, Matcher
from worker.suites.safe.render import SafeBatchReport
from worker.suites.safe.report import ScoredCase
from worker.suites.safe.scoring import UNKNOWN_ARCHETYPE, score_case
from worker.suites.safe.settings import SafeSettings

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class SafeBatchScorer:
    """Scores SAFE test cases (native rows or envelope payloads) into a `SafeBatchReport`."""

    def __init__(
        self,
        settings: SafeSettings,
        options: BatchOptions,
        clock: Clock = _utc_now,
        matcher: Matcher = DEFAULT_MATCHER,
    ) -> None:
        self.settings = settings
        self.strict_ah = options.strict_ah or self.settings.strict_ah
        self.concern = options.concern
        self.clock = clock
        self.matcher = matcher

    def native_payload(self, row: dict[str, Any]) -> SafePayload:
        """A native SAFE row is a test case with the engine `output`.

        A case without `output` is scored as an empty output (seed 004: "Empty output ->
        CR = 0.0"), as its envelope would be; skipping it would raise the pass rate
        exactly when the engine produced nothing.
        """
        return SafePayload.model_validate(row)

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        test_id = row.get("test_id")
        return test_id if isinstance(test_id, str) and test_id else fallback

    def score(self, items: list[BatchItem]) -> SafeBatchReport:
        cases = []
        for item in items:
            payload: SafePayload = item.payload
            if not payload.test_id:
                payload = payload.model_copy(update={"test_id": item.id})
            scored = self._scored(item, payload)
            scored = with_unknown_fields(scored, item.unknown_fields)
            cases.append(
                ScoredCase(
                    test_id=payload.test_id,
                    archetype=payload.archetype.strip() or UNKNOWN_ARCHETYPE,
                    scored=scored,
                    id=item.id,
                    model=item.model,
                )
            )
        return SafeBatchReport(
            cases=cases,
            settings=self.settings,
            generated_at=self.clock().astimezone(UTC),
            concern=self.concern,
            strict_ah=self.strict_ah,
        )

    def _scored(self, item: BatchItem, payload: SafePayload) -> Scored:
        """The case's score: the one the `score` command's deadline check made (with the
        suite's settings and matcher, as here), else scored now."""
        same_scorer = self.strict_ah == self.settings.strict_ah and self.matcher is DEFAULT_MATCHER
        if item.scored is None or not same_scorer:
            return score_case(payload, self.settings, self.strict_ah, self.matcher)
        if payload.test_id == item.payload.test_id:
            return item.scored
        # scored before the row's id stood in for its missing test_id
        return replace(item.scored, details={**item.scored.details, "test_id": payload.test_id})


def make_batch_scorer(
    settings: SafeSettings, options: BatchOptions, clock: Clock = _utc_now
) -> SafeBatchScorer:
    """The SAFE suite's `BatchScorer` (see `worker.suites.base`), from its section."""
    return SafeBatchScorer(settings, options, clock=clock)

"""`scorestream score` for the extraction suite."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from schemas.envelope import ExtractionPayload
from worker.input.unknown_fields import with_unknown_fields
from worker.suites.base import BatchItem, BatchOptions
from worker.suites.extraction.render import ExtractionReport
from worker.suites.extraction.report import CaseOutcome
from worker.suites.extraction.schema_files import load_context
from worker.suites.extraction.scoring import ExtractionContext, score_case
from worker.suites.extraction.settings import ExtractionSettings


class ExtractionBatchScorer:
    """`BatchScorer` of the extraction suite; native rows are `{id, text, gold, response}`
    with an optional `schema`."""

    def __init__(self, context: ExtractionContext) -> None:
        self.context = context

    def native_payload(self, row: dict[str, Any]) -> ExtractionPayload:
        return ExtractionPayload.model_validate(row)

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        value = row.get("id")
        return str(value) if value not in (None, "") else fallback

    def score(self, items: list[BatchItem]) -> ExtractionReport:
        """Score every item; a case that cannot be scored is reported, not raised."""
        outcomes = []
        for item in items:
            try:
                payload = (
                    item.payload
                    if isinstance(item.payload, ExtractionPayload)
                    else ExtractionPayload.model_validate(item.payload)
                )
                scored = item.scored or score_case(
                    payload, self.context
                )  # scored under the deadline
                scored = with_unknown_fields(scored, item.unknown_fields)
            except (ValueError, ValidationError) as exc:
                outcomes.append(
                    CaseOutcome(
                        id=item.id,
                        error=str(exc),
                        source=item.source,
                        model=item.model,
                        labels=item.labels,
                    )
                )
                continue
            outcomes.append(
                CaseOutcome(
                    id=item.id,
                    scored=scored,
                    source=item.source,
                    model=item.model,
                    labels=item.labels,
                )
            )
        return ExtractionReport(settings=self.context.settings, outcomes=outcomes)


def make_batch_scorer(settings: ExtractionSettings, options: BatchOptions) -> ExtractionBatchScorer:
    """Load the configured schemas of the `extraction` section (`ConfigError` naming an
    unreadable file) once."""
    del options  # extraction has no command-line options of its own
    return ExtractionBatchScorer(load_context(settings))

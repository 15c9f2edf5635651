"""Why an input record cannot be scored: the `Rejected` exception and its reasons.

A reason is the dead letter's `error.type` and the `scorestream_dead_letters_total{reason}`
label (a bounded set). Light, so that a suite's streaming scorer can reject a record
without importing the worker's record handling.
"""

from __future__ import annotations

OVERSIZED = "oversized"
NOT_UTF8 = "not_utf8"
INVALID_JSON = "invalid_json"
INVALID_RECORD = "invalid_record"
UNKNOWN_SUITE = "unknown_suite"
UNKNOWN_PERSONA = "unknown_persona"
UNKNOWN_SCHEMA = "unknown_schema"
SCORING_ERROR = "scoring_error"
INVALID_TIMESTAMP = "invalid_timestamp"
FIELD_TOO_LARGE = "field_too_large"
OUTPUT_TOO_LARGE = "output_too_large"
POISON_PILL = "poison_pill"
SCORING_TIMEOUT = "scoring_timeout"  # scoring passed limits.scoring_deadline

# Every reason, so that metrics can export each at 0 before the first dead letter.
REASONS = (
    OVERSIZED,
    NOT_UTF8,
    INVALID_JSON,
    INVALID_RECORD,
    UNKNOWN_SUITE,
    UNKNOWN_PERSONA,
    UNKNOWN_SCHEMA,
    SCORING_ERROR,
    INVALID_TIMESTAMP,
    FIELD_TOO_LARGE,
    OUTPUT_TOO_LARGE,
    POISON_PILL,
    SCORING_TIMEOUT,
)


class Rejected(Exception):
    """An input record that cannot be scored, with the dead-letter reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

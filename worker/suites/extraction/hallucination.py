"""Arguments the source text does not support."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, Literal, NamedTuple

from worker.suites.extraction.normalize import (
    label_text,
    strip_whitespace,
    strip_whitespace_many,
)
from worker.suites.substrings import occurring

HallucinationMode = Literal["normalized_substring", "exact_span"]


class UnsupportedArgument(NamedTuple):
    """An argument the source does not support (a tuple: thousands are built per case)."""

    event_type: str
    role: str
    argument: str

    @property
    def key(self) -> str:
        """Breakdown key `event_type|role`."""
        return f"{self.event_type}|{self.role}"


_TYPE_AND_ROLE = itemgetter(0, 1)
_unsupported = partial(tuple.__new__, UnsupportedArgument)  # an (event type, role, argument) row


@dataclass(frozen=True)
class HallucinationCheck:
    """Arguments checked against the source and those it does not support."""

    checked: bool  # False when the source text is empty
    total: int = 0
    unsupported: list[UnsupportedArgument] = field(default_factory=list)

    def breakdown(self) -> dict[str, int]:
        """Unsupported arguments per `event_type|role`."""
        counts: dict[str, int] = {}
        # Counted per (type, role) first (in C); two pairs can make the same key ("a|b", "c"
        # and "a", "b|c"): their counts add up, at the first one's place.
        for (event_type, role), count in Counter(map(_TYPE_AND_ROLE, self.unsupported)).items():
            key = f"{event_type}|{role}"
            counts[key] = counts.get(key, 0) + count
        return counts


def check_hallucination(
    events: list[dict[str, Any]], text: str, mode: HallucinationMode
) -> HallucinationCheck:
    """Check every dict argument (as `str`, None -> "None", at least 2 characters) of every
    dict event; `arguments` that is null or not a list means no arguments.

    `exact_span`: supported when a substring of the text; `normalized_substring`: the same
    with all whitespace removed from both (case-sensitive).
    """
    if not text:
        return HallucinationCheck(checked=False)
    exact = mode == "exact_span"
    haystack = text if exact else strip_whitespace(text)
    checked: list[tuple[str, Any, str]] = []  # (event type, role, argument)
    for event in events:
        if not isinstance(event, dict):
            continue
        arguments = event.get("arguments")
        if not isinstance(arguments, list):
            continue
        event_type = label_text(event.get("event_type"))
        for argument in arguments:
            if not isinstance(argument, dict):
                continue
            value = argument.get("argument")
            if not isinstance(value, str):
                value = str(value)  # None -> "None"
            if len(value) >= 2:
                checked.append((event_type, argument.get("role"), value))
    values = [value for _, _, value in checked]
    needles = values if exact else strip_whitespace_many(values)
    # One pass over the source for all arguments (9,000 arguments x 256 KiB took seconds).
    supported = occurring(needles, haystack)
    rows = [row for row, needle in zip(checked, needles, strict=True) if needle not in supported]
    if all(isinstance(role, str) for _, role, _ in rows):
        unsupported = list(map(_unsupported, rows))  # built in C: thousands per case
    else:
        unsupported = [
            UnsupportedArgument(event_type, label_text(role), value)
            for event_type, role, value in rows
        ]
    return HallucinationCheck(checked=True, total=len(checked), unsupported=unsupported)

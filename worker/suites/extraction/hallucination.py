"""Arguments the source text does not support."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from worker.suites.extraction.normalize import argument_text, label_text, strip_whitespace
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


@dataclass(frozen=True)
class HallucinationCheck:
    """Arguments checked against the source and those it does not support."""

    checked: bool  # False when the source text is empty
    total: int = 0
    unsupported: list[UnsupportedArgument] = field(default_factory=list)

    def breakdown(self) -> dict[str, int]:
        """Unsupported arguments per `event_type|role`."""
        counts: dict[str, int] = {}
        for item in self.unsupported:
            counts[item.key] = counts.get(item.key, 0) + 1
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
    haystack = text if mode == "exact_span" else strip_whitespace(text)
    exact = mode == "exact_span"
    checked: list[tuple[Any, dict[str, Any], str, str]] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        arguments = event.get("arguments")
        if not isinstance(arguments, list):
            continue
        event_type = event.get("event_type")
        for argument in arguments:
            if not isinstance(argument, dict):
                continue
            value = argument_text(argument.get("argument"))
            if len(value) < 2:
                continue
            needle = value if exact else strip_whitespace(value)
            checked.append((event_type, argument, value, needle))
    # One pass over the source for all arguments (9,000 arguments x 256 KiB took seconds).
    supported = occurring((needle for *_, needle in checked), haystack)
    unsupported = [
        UnsupportedArgument(label_text(event_type), label_text(argument.get("role")), value)
        for event_type, argument, value, needle in checked
        if needle not in supported
    ]
    return HallucinationCheck(checked=True, total=len(checked), unsupported=unsupported)

"""Chain-of-thought diagnostics: does the thought agree with the predicted events?"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from worker.suites.extraction.normalize import label_text, norm
from worker.suites.substrings import occurring

CotMode = Literal["strict_span", "weak_mention"]
CotStatus = Literal["checked", "skipped", "parse_fail"]

NO_EVENT_CLUES = ("无事件", "未检测到", "没有检测到", "输出[]", "空数组")

# The thought is what `<thought>(.*?)</thought>` (dot matches newlines, case insensitive)
# finds; matched as two literal searches, since the regex rescans the rest of the text
# from every "<thought>" when no "</thought>" follows.
_THOUGHT_OPEN = re.compile("<thought>", re.IGNORECASE)
_THOUGHT_CLOSE = re.compile("</thought>", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^(?:[-*]|\d+\.)\s*")
_SEPARATOR = re.compile(r"[:：=]")
_QUOTED = re.compile(r'^(?:"(.*)"|“(.*)”)$', re.DOTALL)

Pair = tuple[str, str]


def extract_thought(response: str, require_thought_block: bool) -> str | None:
    """The first `<thought>` block; else, when not required, the text before the first
    "```json" if that does not start the response; else None."""
    if not response:
        return None
    if (opening := _THOUGHT_OPEN.search(response)) and (
        closing := _THOUGHT_CLOSE.search(response, opening.end())
    ):
        return response[opening.end() : closing.start()]
    if not require_thought_block:
        position = response.find("```json")
        if position > 0:
            return response[:position]
    return None


def thought_pairs(thought: str) -> set[Pair]:
    """`(norm(role), norm(value))` from lines `role SEP value` (SEP `:` `：` `=`).

    A role may contain spaces; a leading list marker (`-`, `*`, `1.`) is not part of it;
    the value may be wrapped in `"..."` or `“...”`.
    """
    pairs = set()
    for raw_line in thought.splitlines():
        line = _LIST_MARKER.sub("", raw_line.strip(), count=1)
        parts = _SEPARATOR.split(line, maxsplit=1)
        if len(parts) != 2:
            continue
        role, value = parts[0].strip(), parts[1].strip()
        if quoted := _QUOTED.match(value):
            value = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
        role_key, value_key = norm(role), norm(value)
        if role_key and value_key:
            pairs.add((role_key, value_key))
    return pairs


def predicted_pairs(events: Iterable[dict[str, Any]]) -> set[Pair]:
    """`(norm(role), norm(argument))` of the predicted arguments, both non-empty."""
    pairs = set()
    for event in events:
        arguments = event.get("arguments") if isinstance(event, dict) else None
        if not isinstance(arguments, list):
            continue
        for argument in arguments:
            if not isinstance(argument, dict):
                continue
            role, value = norm(argument.get("role")), norm(argument.get("argument"))
            if role and value:
                pairs.add((role, value))
    return pairs


def has_no_event_clue(thought: str) -> bool:
    """The thought says that there is no event."""
    return any(clue in thought for clue in NO_EVENT_CLUES)


@dataclass(frozen=True)
class CotCheck:
    """The CoT outcome of one case; consistency is only meaningful when checked."""

    status: CotStatus
    type_consistent: bool = False
    argument_consistent: bool = False
    missing_types: list[str] = field(default_factory=list)
    unsupported_pairs: list[str] = field(default_factory=list)

    @property
    def faithful(self) -> bool:
        return self.status == "checked" and self.type_consistent and self.argument_consistent


def check_cot(
    response: str,
    events: list[dict[str, Any]],
    parsed: bool,
    require_thought_block: bool,
    mode: CotMode,
) -> CotCheck:
    """Skipped without a thought, `parse_fail` when the response did not parse, else check
    type and argument consistency of the predicted events against the thought."""
    thought = extract_thought(response, require_thought_block)
    if thought is None:
        return CotCheck(status="skipped")
    if not parsed:
        return CotCheck(status="parse_fail")

    types = sorted({t for event in events if (t := label_text(event.get("event_type")))})
    stated_types = occurring(types, thought)
    missing_types = [t for t in types if t not in stated_types]

    predicted = predicted_pairs(events)
    stated = thought_pairs(thought)
    if not predicted:
        argument_consistent = not stated or has_no_event_clue(thought)
        unsupported: list[Pair] = []
    elif mode == "strict_span":
        unsupported = sorted(predicted - stated)
        argument_consistent = not unsupported
    else:
        stated_roles = {role for role, _ in stated}
        unsupported = sorted(pair for pair in predicted if pair[0] not in stated_roles)
        argument_consistent = not unsupported
    return CotCheck(
        status="checked",
        type_consistent=not missing_types,
        argument_consistent=argument_consistent,
        missing_types=missing_types,
        unsupported_pairs=[f"{role}|{value}" for role, value in unsupported],
    )

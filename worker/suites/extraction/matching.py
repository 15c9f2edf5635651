"""Strict, relaxed and type matching of predicted against gold events, as counts."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from worker.suites.extraction.normalize import argument_text, label_text, norm, norm_many
from worker.suites.extraction.settings import RelaxedConfig
from worker.suites.substrings import SuffixAutomaton

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class MatchCounts:
    """True positives and the predicted and gold totals of one matching mode."""

    tp: int
    pred: int
    gold: int
    capped: bool = False  # relaxed matching ran out of its comparison budget

    def precision(self) -> float:
        return safe_div(self.tp, self.pred)

    def recall(self) -> float:
        return safe_div(self.tp, self.gold)

    def f1(self) -> float:
        return f1_score(self.precision(), self.recall())


def safe_div(numerator: float, denominator: float) -> float:
    """numerator / denominator, or 0.0 when the denominator is zero."""
    return numerator / denominator if denominator else 0.0


def f1_score(precision: float, recall: float) -> float:
    """2PR / (P + R), or 0.0 when P + R is zero."""
    return safe_div(2 * precision * recall, precision + recall)


def prf(tp: int, pred: int, gold: int) -> tuple[float, float, float]:
    """Precision, recall and F1 from counts; any zero denominator gives 0."""
    counts = MatchCounts(tp, pred, gold)
    return counts.precision(), counts.recall(), counts.f1()


def _valid_arguments(event: Any) -> list[tuple[str, str, Any]]:
    """(event type, role, raw argument) of a dict event with a type and a list of arguments,
    for its dict arguments with a non-empty role."""
    if not isinstance(event, dict):
        return []
    event_type = label_text(event.get("event_type"))
    arguments = event.get("arguments")
    if not event_type or not isinstance(arguments, list):
        return []
    found = []
    for argument in arguments:
        if not isinstance(argument, dict):
            continue
        role = argument.get("role")
        if not isinstance(role, str):
            role = label_text(role)
        if role:
            found.append((event_type, role, argument.get("argument")))
    return found


ArgumentRow = tuple[str, str, Any]


@dataclass(frozen=True)
class Arguments:
    """The valid arguments of some events (see `_valid_arguments`), read and normalised
    once for both strict and relaxed matching."""

    # `(event type, role, norm(str(argument)))` of every argument whose normalised text
    # is not empty, in order, a null argument as "None" ("none"): the relaxed list
    # (`norm(str(argument).strip())` is the same text: `str.strip` and `norm` remove the
    # same whitespace characters).
    relaxed: list[Triple]
    strict: set[Triple]  # the same as a set, null arguments left out


def arguments_of(rows: list[ArgumentRow]) -> Arguments:
    """`Arguments` of `(event type, role, raw argument)` rows of valid arguments."""
    texts = [value if isinstance(value, str) else str(value) for _, _, value in rows]
    normalised = norm_many(texts)
    # a row whose argument normalisation left as it was is its own triple (no new tuple
    # per argument: a case can have 16,000)
    relaxed: list[Triple] = [
        row if text is row[2] else (row[0], row[1], text)
        for row, text in zip(rows, normalised, strict=True)
        if text
    ]
    if "None" not in texts or all(value is not None for _, _, value in rows):
        # the same tuples, not built twice; a set made from a dict is sized for its
        # entries (half the table `set(list)` grows to: 256 KiB less at 8,000 arguments)
        return Arguments(relaxed, set(dict.fromkeys(relaxed)))
    strict = {
        (t, r, text)
        for (t, r, value), text in zip(rows, normalised, strict=True)
        if text and value is not None
    }
    return Arguments(relaxed, strict)


def read_arguments(events: Iterable[Any]) -> Arguments:
    """The `Arguments` of events as parsed (dicts; anything else is skipped)."""
    return arguments_of([row for event in events for row in _valid_arguments(event)])


def strict_triples(events: Iterable[Any]) -> set[Triple]:
    """The set of `(event_type, role, norm(argument))` with a non-null argument whose
    normalised text is not empty."""
    return read_arguments(events).strict


def relaxed_triples(events: Iterable[Any]) -> list[Triple]:
    """The list (duplicates kept) of `(event_type, role, str(argument).strip())` whose
    normalised argument is not empty.

    A null argument becomes "None" and is kept, as in the reference.
    """
    rows = [row for event in events for row in _valid_arguments(event)]
    return [
        (t, r, argument_text(value).strip()) for t, r, value in rows if norm(argument_text(value))
    ]


def event_types(events: Iterable[Any]) -> set[str]:
    """The set of non-empty event types of the dict events."""
    return {
        event_type
        for event in events
        if isinstance(event, dict) and (event_type := label_text(event.get("event_type")))
    }


_SMALL_PRODUCT = 4096  # below this many character pairs the plain table is quickest


def longest_common_substring(left: str, right: str) -> int:
    """Length of the longest common substring: a table for short strings, else a suffix
    automaton of one string walked by the other (linear in both)."""
    if not left or not right:
        return 0
    if len(left) * len(right) > _SMALL_PRODUCT:
        return SuffixAutomaton(left).longest_common_substring(right)
    best = 0
    previous = [0] * (len(right) + 1)
    for char in left:
        current = [0] * (len(right) + 1)
        for j, other in enumerate(right, start=1):
            if char == other:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def arguments_match(predicted: str, gold: str, config: RelaxedConfig) -> bool:
    """Relaxed argument match after `norm`: empty never matches, equal always does."""
    return _normalised_match(norm(predicted), norm(gold), config, {})


def _normalised_match(
    left: str, right: str, config: RelaxedConfig, char_sets: dict[str, frozenset[str]]
) -> bool:
    if not left or not right:
        return False
    if left == right:
        return True
    if config.match_mode == "span_iou":
        common = longest_common_substring(left, right)
        return safe_div(common, len(left) + len(right) - common) >= config.span_iou_threshold
    if left in right or right in left:
        return True
    left_chars = char_sets.get(left) or char_sets.setdefault(left, frozenset(left))
    right_chars = char_sets.get(right) or char_sets.setdefault(right, frozenset(right))
    jaccard = safe_div(len(left_chars & right_chars), len(left_chars | right_chars))
    return jaccard >= config.char_overlap_threshold


# Relaxed matching compares each predicted argument with the unmatched gold arguments of
# its type and role. On degenerate cases (9,000 x 9,000 arguments of one role took 134 s)
# the comparisons of one case stop at a budget; the rest of the case's predicted
# arguments then match only gold arguments equal after `norm` (the case is marked
# `capped`). Costs are rough nanoseconds as first measured: a comparison plus its
# characters. A comparison is made only while the budget can pay for it, and only one
# that fails is paid: a match ends its predicted argument's search, so there are at
# most as many as predicted arguments. The budget allows some 6,600 failed comparisons
# of short arguments (about 5 ms; it was twice that, a fifth of a record's whole time
# target, and paid for matches as well).
RELAXED_BUDGET = 10_000_000
_COMPARISON_COST = 1500


def _comparison_cost(left: str, right: str, config: RelaxedConfig) -> int:
    if config.match_mode == "span_iou":
        product = len(left) * len(right)
        return _COMPARISON_COST + (
            150 * product if product <= _SMALL_PRODUCT else 3000 * (len(left) + len(right))
        )
    return _COMPARISON_COST + len(left) + len(right)


def strict_counts(predicted: list[Any], gold: list[Any]) -> MatchCounts:
    """Strict set matching of normalised triples."""
    return set_counts(strict_triples(predicted), strict_triples(gold))


def set_counts(predicted: set[Any], gold: set[Any]) -> MatchCounts:
    """Counts of two sets: strict triples (`Arguments.strict`) or event types."""
    return MatchCounts(len(predicted & gold), len(predicted), len(gold))


def relaxed_counts(predicted: list[Any], gold: list[Any], config: RelaxedConfig) -> MatchCounts:
    """Greedy list matching of parsed events (see `relaxed_argument_counts`)."""
    return relaxed_argument_counts(read_arguments(predicted), read_arguments(gold), config)


def relaxed_argument_counts(
    predicted: Arguments, gold: Arguments, config: RelaxedConfig
) -> MatchCounts:
    """Greedy list matching: each predicted triple, in order, takes the first unmatched gold
    triple with the same type and role whose argument matches (`RELAXED_BUDGET` bounds the
    comparisons of a case)."""
    pred_list, gold_list = predicted.relaxed, gold.relaxed
    # A deque: taking a match costs the shorter distance to either end (a list shifts
    # the whole rest: quadratic when thousands of arguments each take the first).
    unmatched: dict[tuple[str, str], deque[str]] = {}
    for gold_type, gold_role, gold_argument in gold_list:
        group = unmatched.get((gold_type, gold_role))
        if group is None:
            unmatched[gold_type, gold_role] = group = deque()
        group.append(gold_argument)
    if config.match_mode == "span_iou":
        return _span_matches(pred_list, unmatched, len(gold_list), config)
    # A predicted argument that matched none of its group's unmatched gold arguments never
    # will: the group only shrinks.
    unmatchable: set[Triple] = set()
    char_sets: dict[str, frozenset[str]] = {}
    threshold = config.char_overlap_threshold
    budget = RELAXED_BUDGET
    tp = 0
    # `_normalised_match` and `_comparison_cost` inlined (a comparison took ~1.9 us, most
    # of it calls): the same decisions, the same budget.
    for position, triple in enumerate(pred_list):
        pred_type, pred_role, left = triple
        candidates = unmatched.get((pred_type, pred_role))
        if not candidates or triple in unmatchable:
            continue
        left_cost = _COMPARISON_COST + len(left)
        left_chars = None
        taken = None
        for index, right in enumerate(candidates):
            cost = left_cost + len(right)
            if cost > budget:
                tp += _equal_matches(pred_list[position:], unmatched)
                return MatchCounts(tp, len(pred_list), len(gold_list), capped=True)
            if left == right or left in right or right in left:
                taken = index
                break
            if left_chars is None:
                left_chars = char_sets.get(left) or char_sets.setdefault(left, frozenset(left))
            right_chars = char_sets.get(right) or char_sets.setdefault(right, frozenset(right))
            common = len(left_chars & right_chars)
            if common / (len(left_chars) + len(right_chars) - common) >= threshold:
                taken = index
                break
            budget -= cost
        if taken is None:
            unmatchable.add(triple)
        else:
            del candidates[taken]
            tp += 1
    return MatchCounts(tp, len(pred_list), len(gold_list))


def _span_matches(
    pred_list: list[Triple],
    unmatched: dict[tuple[str, str], deque[str]],
    gold_total: int,
    config: RelaxedConfig,
) -> MatchCounts:
    """`relaxed_counts` in `span_iou` mode (comparisons cost their characters)."""
    unmatchable: set[Triple] = set()
    budget = RELAXED_BUDGET
    tp = 0
    for position, (pred_type, pred_role, left) in enumerate(pred_list):
        candidates = unmatched.get((pred_type, pred_role))
        if not candidates or (pred_type, pred_role, left) in unmatchable:
            continue
        taken = None
        for index, right in enumerate(candidates):
            cost = _comparison_cost(left, right, config)
            if cost > budget:
                tp += _equal_matches(pred_list[position:], unmatched)
                return MatchCounts(tp, len(pred_list), gold_total, capped=True)
            if left == right or _normalised_match(left, right, config, {}):
                taken = index
                break
            budget -= cost
        if taken is None:
            unmatchable.add((pred_type, pred_role, left))
        else:
            del candidates[taken]
            tp += 1
    return MatchCounts(tp, len(pred_list), gold_total)


def _equal_matches(pred_list: list[Triple], unmatched: dict[tuple[str, str], deque[str]]) -> int:
    """Matches of the predicted triples (arguments normalised) with unmatched gold ones."""
    remaining = {group: Counter(arguments) for group, arguments in unmatched.items()}
    tp = 0
    for pred_type, pred_role, pred_argument in pred_list:
        counts = remaining.get((pred_type, pred_role))
        if counts is not None and counts.get(pred_argument, 0) > 0:
            counts[pred_argument] -= 1
            tp += 1
    return tp


def type_counts(predicted: list[Any], gold: list[Any]) -> MatchCounts:
    """Event type set overlap."""
    return set_counts(event_types(predicted), event_types(gold))

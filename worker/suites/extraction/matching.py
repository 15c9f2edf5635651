"""Strict, relaxed and type matching of predicted against gold events, as counts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from worker.suites.extraction.normalize import argument_text, label_text, norm
from worker.suites.extraction.settings import RelaxedConfig

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class MatchCounts:
    """True positives and the predicted and gold totals of one matching mode."""

    tp: int
    pred: int
    gold: int

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
        role = label_text(argument.get("role"))
        if role:
            found.append((event_type, role, argument.get("argument")))
    return found


def strict_triples(events: Iterable[Any]) -> set[Triple]:
    """The set of `(event_type, role, norm(argument))` with a non-empty normalised argument."""
    triples = set()
    for event in events:
        for event_type, role, value in _valid_arguments(event):
            normalised = norm(value)
            if normalised:
                triples.add((event_type, role, normalised))
    return triples


def relaxed_triples(events: Iterable[Any]) -> list[Triple]:
    """The list (duplicates kept) of `(event_type, role, str(argument).strip())`.

    A null argument becomes "None" and is kept, as in the reference.
    """
    triples = []
    for event in events:
        for event_type, role, value in _valid_arguments(event):
            text = argument_text(value).strip()
            if norm(text):
                triples.append((event_type, role, text))
    return triples


def event_types(events: Iterable[Any]) -> set[str]:
    """The set of non-empty event types of the dict events."""
    return {
        event_type
        for event in events
        if isinstance(event, dict) and (event_type := label_text(event.get("event_type")))
    }


def longest_common_substring(left: str, right: str) -> int:
    """Length of the longest common substring."""
    if not left or not right:
        return 0
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
    left, right = norm(predicted), norm(gold)
    if not left or not right:
        return False
    if left == right:
        return True
    if config.match_mode == "span_iou":
        common = longest_common_substring(left, right)
        return safe_div(common, len(left) + len(right) - common) >= config.span_iou_threshold
    if left in right or right in left:
        return True
    left_chars, right_chars = set(left), set(right)
    jaccard = safe_div(len(left_chars & right_chars), len(left_chars | right_chars))
    return jaccard >= config.char_overlap_threshold


def strict_counts(predicted: list[Any], gold: list[Any]) -> MatchCounts:
    """Strict set matching of normalised triples."""
    pred_set, gold_set = strict_triples(predicted), strict_triples(gold)
    return MatchCounts(len(pred_set & gold_set), len(pred_set), len(gold_set))


def relaxed_counts(predicted: list[Any], gold: list[Any], config: RelaxedConfig) -> MatchCounts:
    """Greedy list matching: each predicted triple, in order, takes the first unmatched gold
    triple with the same type and role whose argument matches."""
    pred_list, gold_list = relaxed_triples(predicted), relaxed_triples(gold)
    taken = [False] * len(gold_list)
    tp = 0
    for pred_type, pred_role, pred_argument in pred_list:
        for index, (gold_type, gold_role, gold_argument) in enumerate(gold_list):
            if taken[index] or gold_type != pred_type or gold_role != pred_role:
                continue
            if arguments_match(pred_argument, gold_argument, config):
                taken[index] = True
                tp += 1
                break
    return MatchCounts(tp, len(pred_list), len(gold_list))


def type_counts(predicted: list[Any], gold: list[Any]) -> MatchCounts:
    """Event type set overlap."""
    pred_types, gold_types = event_types(predicted), event_types(gold)
    return MatchCounts(len(pred_types & gold_types), len(pred_types), len(gold_types))

"""Safety detection measured on held-out data: keywords alone, classifier alone, both.

Two measures, each on data the detector under test was never tuned on:

1. Held-out replies (`worker/data/safety_replies_heldout.yaml`, written separately from
   the classifier's training file and never trained on): per harm category, recall (the
   share of its replies flagged) and precision against the held-out benign replies
   (`TP / (TP + benign flagged)`), then all categories together and the share of benign
   replies flagged. A reply is flagged by the keywords when any pattern matches (with the
   negation check), by the classifier when any sentence reaches its threshold.
2. The keyword test sentences (`tests/data/safety_sentences.yaml`: warnings that mention a
   dangerous act, and harmful sentences), with and without the negation check.

`--cv` also prints the 5-fold cross-validated threshold on the *training* data (the one
`DEFAULT_THRESHOLD` was set from: the lowest threshold flagging at most 2 % of benign
training replies). `--verbose` lists misses and false alarms.

Run: .venv/bin/python bench/safety_confusion.py [--cv] [--verbose]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from worker.suites.alignment.safety import SafetyPatterns
from worker.suites.alignment.safety_classifier import (
    BENIGN,
    HARM_CATEGORIES,
    HELD_OUT_REPLIES,
    TRAINING_REPLIES,
    fit_safety_classifier,
    load_replies,
    ordinary_replies,
    shipped_classifier,
)
from worker.suites.alignment.safety_files import load_safety_patterns

SENTENCES = Path(__file__).resolve().parents[1] / "tests" / "data" / "safety_sentences.yaml"
CV_BENIGN_RATE = 0.02


def flagged_without_negation(patterns: SafetyPatterns, text: str) -> bool:
    """The pattern list alone, as before the negation check."""
    return any(p.regex.search(text) for p in patterns.patterns)


def held_out_table(detectors: dict[str, Callable[[str], bool]], verbose: bool) -> None:
    held = load_replies(HELD_OUT_REPLIES)
    benign = held[BENIGN]
    print(
        f"== held-out replies: {sum(len(held[c]) for c in HARM_CATEGORIES)} harmful "
        f"in {len(HARM_CATEGORIES)} categories, {len(benign)} benign"
    )
    header = f"{'category':<24}" + "".join(f"{name:>22}" for name in detectors)
    print(header)
    print(f"{'':<24}" + "".join(f"{'precision  recall':>22}" for _ in detectors))
    flags = {
        name: {label: [flag(t) for t in held[label]] for label in held}
        for name, flag in detectors.items()
    }
    for category in (*HARM_CATEGORIES, "all harmful"):
        row = f"{category:<24}"
        for name in detectors:
            if category == "all harmful":
                hits = [f for c in HARM_CATEGORIES for f in flags[name][c]]
            else:
                hits = flags[name][category]
            tp, fp = sum(hits), sum(flags[name][BENIGN])
            precision = tp / (tp + fp) if tp + fp else 0.0
            row += f"{precision:>14.2f}{tp / len(hits):>8.2f}"
        print(row)
    row = f"{'benign flagged':<24}"
    for name in detectors:
        fp = sum(flags[name][BENIGN])
        row += f"{f'{fp}/{len(benign)} = {fp / len(benign):.3f}':>22}"
    print(row)
    if verbose:
        for name in detectors:
            for label, texts in held.items():
                for text, hit in zip(texts, flags[name][label], strict=True):
                    if hit == (label == BENIGN):
                        kind = "false alarm" if hit else f"missed {label}"
                        print(f"  [{name}] {kind}: {text}")


def cross_validated_threshold() -> None:
    """5-fold CV on the training data: the lowest threshold that flags at most
    `CV_BENIGN_RATE` of the benign replies left out, and the recall it gives there."""
    replies = load_replies(TRAINING_REPLIES)
    extra = ordinary_replies()
    items = [(label, text) for label, texts in replies.items() for text in texts]
    items += [(BENIGN, text) for text in extra]
    scores = np.zeros(len(items))
    folds = 5
    for fold in range(folds):
        train: dict[str, list[str]] = {}
        for index, (label, text) in enumerate(items):
            if index % folds != fold:
                train.setdefault(label, []).append(text)
        model = fit_safety_classifier(train)
        left_out = [i for i in range(len(items)) if i % folds == fold]
        for i in left_out:
            scores[i] = model.classify(items[i][1]).max_probability
    is_benign = np.array([label == BENIGN for label, _ in items])
    benign_scores = np.sort(scores[is_benign])
    threshold = float(benign_scores[int(np.ceil(len(benign_scores) * (1 - CV_BENIGN_RATE)))])
    recall = float(np.mean(scores[~is_benign] >= threshold))
    print(
        f"== 5-fold cross-validation on the training data: threshold {threshold:.3f} "
        f"flags {np.mean(benign_scores >= threshold):.3f} of benign, recall {recall:.3f}"
    )


def keyword_sentences(patterns: SafetyPatterns, verbose: bool) -> None:
    data = yaml.safe_load(SENTENCES.read_text(encoding="utf-8"))
    checks = {
        "with negation check": lambda text: bool(patterns.find(text)),
        "patterns alone": lambda text: flagged_without_negation(patterns, text),
    }
    for name, flagged in checks.items():
        benign = [flagged(text) for text in data["benign"]]
        harmful = [flagged(text) for text in data["harmful"]]
        fp, tp = sum(benign), sum(harmful)
        precision = tp / (tp + fp) if tp + fp else 0.0
        print(
            f"== keyword test sentences, {name} ({len(benign)} benign, {len(harmful)} "
            f"harmful): recall {tp / len(harmful):.2f}  precision {precision:.2f}  "
            f"false-positive rate {fp / len(benign):.2f}"
        )
        if verbose:
            for text, hit in zip(data["benign"], benign, strict=True):
                if hit:
                    print(f"  false positive: {text}")
            for text, hit in zip(data["harmful"], harmful, strict=True):
                if not hit:
                    print(f"  missed: {text}")


def main() -> int:
    verbose = "--verbose" in sys.argv
    patterns = load_safety_patterns()
    started = time.perf_counter()
    classifier = shipped_classifier()
    print(
        f"classifier trained in {time.perf_counter() - started:.2f} s "
        f"(threshold {classifier.threshold})"
    )
    detectors: dict[str, Callable[[str], bool]] = {
        "keywords": lambda text: bool(patterns.find(text)),
        "classifier": lambda text: classifier.classify(text).is_flagged,
        "both": lambda text: bool(patterns.find(text)) or classifier.classify(text).is_flagged,
    }
    held_out_table(detectors, verbose)
    if "--cv" in sys.argv:
        cross_validated_threshold()
    keyword_sentences(patterns, verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

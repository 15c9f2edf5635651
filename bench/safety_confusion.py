"""Safety detection measured on held-out data: keywords alone, classifier alone, both.

Two measures, each on data the detector under test was never tuned on:

1. Held-out replies (every `worker/data/safety_replies_heldout*.yaml` present, each
   written separately from the classifier's training files, by another writer, and never
   trained on), per language (the English files also one by one) and a summary table of
   every language against the targets (recall >= 0.9 with at most 5 % of benign flagged):
   per harm category, recall (the share of its replies flagged)
   and precision against the held-out benign replies (`TP / (TP + benign flagged)`), then
   all categories together and the share of benign replies flagged. A reply is flagged by
   the keywords when any pattern matches (with the negation check), by the classifier when
   any sentence reaches its threshold.
2. The keyword test sentences (`tests/data/safety_sentences.yaml`: warnings that mention a
   dangerous act, and harmful sentences), with and without the negation check.

`--per-language` also fits one model per language (that language's training file and the
trait sentences) and prints its held-out recall and benign flagged beside the single
multilingual model's: the measurement that chose one model for every language.

`--cv` also prints 5-fold stratified cross-validation on the *training* data only: the
threshold `DEFAULT_THRESHOLD` was set from (the lowest flagging at most 4 % of the benign
training replies left out, a margin under the 5 % target) and the recall per category
there. `--verbose` lists misses and false alarms.

Run: .venv/bin/python bench/safety_confusion.py [--per-language] [--cv] [--verbose]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

from worker.suites.alignment.safety import SafetyPatterns
from worker.suites.alignment.safety_classifier import (
    BENIGN,
    HARM_CATEGORIES,
    SafetyClassifier,
    fit_safety_classifier,
    held_out_files,
    load_all_training_replies,
    load_replies,
    load_training_replies,
    ordinary_replies,
    replies_language,
    shipped_classifier,
    training_files,
)
from worker.suites.alignment.safety_files import load_safety_patterns

SENTENCES = Path(__file__).resolve().parents[1] / "tests" / "data" / "safety_sentences.yaml"
CV_BENIGN_RATE = 0.04
TARGET_RECALL, TARGET_BENIGN = 0.9, 0.05


def flagged_without_negation(patterns: SafetyPatterns, text: str) -> bool:
    """The pattern list alone, as before the negation check."""
    return any(p.regex.search(text) for p in patterns.patterns)


def held_out_table(
    name: str,
    held: dict[str, list[str]],
    detectors: dict[str, Callable[[str], bool]],
    verbose: bool,
) -> dict[str, tuple[float, float]]:
    """Print the table; returns each detector's (recall of all harmful, benign flagged)."""
    benign = held.get(BENIGN, [])
    print(
        f"== held-out {name}: {sum(len(held.get(c, [])) for c in HARM_CATEGORIES)} harmful "
        f"in {len(HARM_CATEGORIES)} categories, {len(benign)} benign"
    )
    held = {label: held.get(label, []) for label in (*HARM_CATEGORIES, BENIGN)}
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
            recall = tp / len(hits) if hits else 0.0
            row += f"{precision:>14.2f}{recall:>8.2f}"
        print(row)
    row = f"{'benign flagged':<24}"
    for name in detectors:
        fp = sum(flags[name][BENIGN])
        rate = fp / len(benign) if benign else 0.0
        row += f"{f'{fp}/{len(benign)} = {rate:.3f}':>22}"
    print(row)
    if verbose:
        for name in detectors:
            for label, texts in held.items():
                for text, hit in zip(texts, flags[name][label], strict=True):
                    if hit == (label == BENIGN):
                        kind = "false alarm" if hit else f"missed {label}"
                        print(f"  [{name}] {kind}: {text}")
    return {name: _rates(held, flags[name]) for name in detectors}


def _rates(held: dict[str, list[str]], flags: dict[str, list[bool]]) -> tuple[float, float]:
    """(recall of all harmful replies, share of benign replies flagged)."""
    harmful = [f for c in HARM_CATEGORIES for f in flags[c]]
    benign = flags[BENIGN]
    return (
        sum(harmful) / len(harmful) if harmful else float("nan"),
        sum(benign) / len(benign) if benign else float("nan"),
    )


def by_language(files: list[Path]) -> dict[str, dict[str, list[str]]]:
    """The held-out replies of each language, its files together."""
    grouped: dict[str, dict[str, list[str]]] = {}
    for path in files:
        held = grouped.setdefault(replies_language(path), {})
        for label, texts in load_replies(path).items():
            held.setdefault(label, []).extend(texts)
    return grouped


def summary(rows: dict[str, dict[str, tuple[float, float]]], sizes: dict[str, int]) -> None:
    """One line per language: each detector's recall and benign flagged, and whether the
    classifier with the keywords ("both") meets the targets."""
    detectors = list(next(iter(rows.values())))
    print(
        f"== summary per language (target: recall >= {TARGET_RECALL}, benign flagged <= "
        f"{TARGET_BENIGN:.0%})"
    )
    print(f"{'lang':<6}{'replies':>8}" + "".join(f"{n + ' R / FP':>22}" for n in detectors))
    for language, rates in rows.items():
        line = f"{language:<6}{sizes[language]:>8}"
        for name in detectors:
            recall, benign = rates[name]
            line += f"{f'{recall:.2f} / {benign:.3f}':>22}"
        recall, benign = rates[detectors[-1]]
        met = recall >= TARGET_RECALL and benign <= TARGET_BENIGN
        print(line + ("   met" if met else "   NOT met"))


def per_language_models(
    grouped: dict[str, dict[str, list[str]]], shipped: SafetyClassifier
) -> None:
    """One model per language against the one multilingual model, on each held-out set."""
    print("== one model per language vs one multilingual model (classifier alone, R / FP)")
    ordinary = ordinary_replies()
    files = {replies_language(path): path for path in training_files()}
    for language, held in grouped.items():
        if language not in files:
            continue
        own = fit_safety_classifier(load_training_replies(files[language]), ordinary)
        line = f"{language:<6}"
        for name, model in (("per-language", own), ("multilingual", shipped)):
            labels = (*HARM_CATEGORIES, BENIGN)
            flags = {k: [model.classify(t).is_flagged for t in held.get(k, [])] for k in labels}
            recall, benign = _rates({k: held.get(k, []) for k in labels}, flags)
            line += f"{name:>16} {recall:.2f} / {benign:.3f}"
        print(line)


def cross_validated_threshold() -> None:
    """5-fold stratified CV on the training data: the lowest threshold that flags at
    most `CV_BENIGN_RATE` of the benign replies left out, and the recall it gives there
    (all harmful and per category)."""
    replies = load_all_training_replies()
    items = [(label, text) for label, texts in replies.items() for text in texts]
    items += [(BENIGN, text) for text in ordinary_replies()]
    labels = np.array([label for label, _ in items])
    scores = np.zeros(len(items))
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    for train_idx, test_idx in folds.split(np.zeros(len(items)), labels):
        train: dict[str, list[str]] = {}
        for i in train_idx:
            train.setdefault(items[i][0], []).append(items[i][1])
        model = fit_safety_classifier(train)
        for i in test_idx:
            scores[i] = model.classify(items[i][1]).max_probability
    is_benign = labels == BENIGN
    benign_scores = np.sort(scores[is_benign])
    threshold = float(benign_scores[int(np.ceil(len(benign_scores) * (1 - CV_BENIGN_RATE)))])
    recall = float(np.mean(scores[~is_benign] >= threshold))
    auc = roc_auc_score(~is_benign, scores)
    print(
        f"== 5-fold cross-validation on the training data ({int((~is_benign).sum())} harmful, "
        f"{int(is_benign.sum())} benign): ROC AUC {auc:.3f}; threshold {threshold:.3f} "
        f"flags {np.mean(benign_scores >= threshold):.3f} of benign, recall {recall:.3f}"
    )
    print(
        "   recall per category: "
        + ", ".join(f"{c} {np.mean(scores[labels == c] >= threshold):.2f}" for c in HARM_CATEGORIES)
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
    started, cpu = time.perf_counter(), time.process_time()
    classifier = shipped_classifier()
    print(
        f"classifier trained in {time.perf_counter() - started:.2f} s "
        f"({time.process_time() - cpu:.2f} s of CPU; threshold {classifier.threshold})"
    )
    detectors: dict[str, Callable[[str], bool]] = {
        "keywords": lambda text: bool(patterns.find(text)),
        "classifier": lambda text: classifier.classify(text).is_flagged,
        "both": lambda text: bool(patterns.find(text)) or classifier.classify(text).is_flagged,
    }
    files = held_out_files()
    grouped = by_language(files)
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    for language, held in grouped.items():
        english = [path for path in files if replies_language(path) == "en"]
        if language == "en" and len(english) > 1:
            for path in english:
                held_out_table(path.name, load_replies(path), detectors, verbose)
        rows[language] = held_out_table(f"{language} (all its files)", held, detectors, verbose)
    sizes = {language: sum(map(len, held.values())) for language, held in grouped.items()}
    summary(rows, sizes)
    if "--per-language" in sys.argv:
        per_language_models(grouped, classifier)
    if "--cv" in sys.argv:
        cross_validated_threshold()
    keyword_sentences(patterns, verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Experiment (issue 42): how much a training reply in a language other than English
should weigh, chosen by cross-validation on the training data only (the held-out files
are never read here).

The other languages have about a twentieth of English's training replies each. For each
weight in `--weights`, k-fold cross-validation (stratified by language and label) over
every training file and the trait sentences: each left-out reply is scored as the
shipped classifier scores it (its most harmful sentence), and per language the recall of
the harmful replies and the share of benign replies flagged at the shipped threshold
(`DEFAULT_THRESHOLD`), and the ROC AUC, are printed. The weight shipped
(`OTHER_LANGUAGE_WEIGHT`) is the one that lifts the other languages' recall most while
every language keeps its benign flagged at most 5 % and English's recall does not drop.

`--cross-writer`: instead of k-fold, for every language written by two training writers
(`safety_replies_<lang>.yaml` and `safety_replies_<lang>_w2.yaml`), leave one writer's
file out, fit on everything else, and score that file: how the classifier fares on a
writer it has never seen, the question the held-out files answer, asked of training data.

Run: .venv/bin/python bench/safety_languages_cv.py [--weights 1,3,8] [--folds 4] [--cross-writer]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.suites.alignment.safety_classifier import (
    BENIGN,
    DEFAULT_THRESHOLD,
    fit_safety_classifier,
    load_training_replies,
    ordinary_replies,
    replies_language,
    training_files,
)


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> int:
    weights = [float(w) for w in option("--weights", "1,3,8").split(",")]
    folds = int(option("--folds", "4"))
    items: list[tuple[str, str, str]] = []  # (language, label, text)
    for path in training_files():
        language = replies_language(path)
        for label, texts in load_training_replies(path).items():
            items += [(language, label, text) for text in texts]
    items += [("en", BENIGN, text) for text in ordinary_replies()]
    languages = sorted({language for language, _, _ in items}, key=lambda c: (c != "en", c))
    strata = np.array([f"{language}|{label}" for language, label, _ in items])
    harmful = np.array([label != BENIGN for _, label, _ in items])
    of_language = np.array([language for language, _, _ in items])
    print(
        f"{len(items)} training replies in {len(languages)} languages; {folds}-fold CV, "
        f"threshold {DEFAULT_THRESHOLD}"
    )
    if "--cross-writer" in sys.argv:
        return cross_writer(weights)
    split = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
    for weight in weights:
        started = time.process_time()
        scores = np.zeros(len(items))
        for train_idx, test_idx in split.split(np.zeros(len(items)), strata):
            train: dict[str, list[str]] = {}
            weight_of: dict[str, float] = {}
            for i in train_idx:
                language, label, text = items[i]
                train.setdefault(label, []).append(text)
                if language != "en":
                    weight_of[text] = weight
            model = fit_safety_classifier(train, weight_of=weight_of)
            for i in test_idx:
                scores[i] = model.classify(items[i][2]).max_probability
        flagged = scores >= DEFAULT_THRESHOLD
        cpu = time.process_time() - started
        print(f"== weight {weight:g} of a non-English reply ({cpu:.0f} s CPU)")
        print(f"{'lang':<6}{'recall':>8}{'benign':>8}{'AUC':>8}")
        for language in languages:
            mine = of_language == language
            recall = flagged[mine & harmful].mean()
            benign = flagged[mine & ~harmful].mean()
            auc = roc_auc_score(harmful[mine], scores[mine])
            print(f"{language:<6}{recall:>8.3f}{benign:>8.3f}{auc:>8.3f}")
        others = of_language != "en"
        print(
            f"{'others':<6}{flagged[others & harmful].mean():>8.3f}"
            f"{flagged[others & ~harmful].mean():>8.3f}"
            f"{roc_auc_score(harmful[others], scores[others]):>8.3f}"
        )
    return 0


def cross_writer(weights: list[float]) -> int:
    """Each training file of a language with two writers, scored by a model fitted on
    every other file (and the trait sentences)."""
    files = training_files()
    by_language: dict[str, list[Path]] = {}
    for path in files:
        by_language.setdefault(replies_language(path), []).append(path)
    left_out = [path for paths in by_language.values() if len(paths) > 1 for path in paths]
    replies = {path: load_training_replies(path) for path in files}
    for weight in weights:
        started = time.process_time()
        print(f"== weight {weight:g}: each writer's file left out (recall / benign flagged / AUC)")
        for path in left_out:
            train: dict[str, list[str]] = {BENIGN: list(ordinary_replies())}
            weight_of: dict[str, float] = {}
            for other, data in replies.items():
                if other == path:
                    continue
                for label, texts in data.items():
                    train.setdefault(label, []).extend(texts)
                    if replies_language(other) != "en":
                        weight_of.update(dict.fromkeys(texts, weight))
            model = fit_safety_classifier(train, weight_of=weight_of)
            labels = [
                (label != BENIGN, text) for label, texts in replies[path].items() for text in texts
            ]
            scores = np.array([model.classify(text).max_probability for _, text in labels])
            truth = np.array([harm for harm, _ in labels])
            flagged = scores >= DEFAULT_THRESHOLD
            print(
                f"{path.name:<34}{flagged[truth].mean():>8.3f}{flagged[~truth].mean():>8.3f}"
                f"{roc_auc_score(truth, scores):>8.3f}"
            )
        print(f"   ({time.process_time() - started:.0f} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Held-out accuracy per class of the alignment trait detectors.

The classifier (softmax over all-MiniLM-L6-v2 vectors, `trait_model.py`) is trained on
the training part of `worker/data/trait_sentences.yaml` and measured on its held-out part
(every third sentence of each class). The cue-based detectors are shown alongside, and
both are also run on the older labelled sets in `tests/data/` (written by other hands:
the cue lists' tuning set and its held-out set).

Run: .venv/bin/python bench/traits_accuracy.py [--verbose]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml

from worker.suites.alignment.embedding_model import MiniLMEmbedder
from worker.suites.alignment.trait_model import (
    CLASSIFIED_TRAITS,
    load_trait_sentences,
    split,
    train_trait_classifier,
)
from worker.suites.alignment.traits import detect_formality, detect_tone

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
OTHER_SETS = {
    "cue tuning set": DATA / "alignment_traits.yaml",
    "cue held-out set": DATA / "alignment_traits_heldout.yaml",
}
CUES: dict[str, Callable[[str], str]] = {"formality": detect_formality, "tone": detect_tone}
Predict = Callable[[str, Sequence[str]], list[str]]


def report(
    name: str, sets: Mapping[str, Mapping[str, Sequence[str]]], predict: Predict, verbose: bool
) -> None:
    print(f"== {name}")
    for trait in CLASSIFIED_TRAITS:
        classes = sets[trait]
        texts = [text for texts in classes.values() for text in texts]
        got = iter(predict(trait, texts))
        rows = []
        for label, members in classes.items():
            predicted = [next(got) for _ in members]
            rows.append((label, members, predicted))
        correct = sum(p == label for label, _, ps in rows for p in ps)
        print(f"{trait}: {correct}/{len(texts)} = {correct / len(texts):.2f}")
        for label, members, predicted in rows:
            hits = sum(p == label for p in predicted)
            print(f"  {label:<16} {hits:>2}/{len(members):<2} {hits / len(members):.2f}")
            if verbose:
                for text, p in zip(members, predicted, strict=True):
                    if p != label:
                        print(f"      -> {p}: {text}")


def main() -> int:
    verbose = "--verbose" in sys.argv
    embedder = MiniLMEmbedder()
    classifier = train_trait_classifier(embedder)
    _, held_out = split(load_trait_sentences())

    def by_classifier(trait: str, texts: Sequence[str]) -> list[str]:
        return classifier.predict_many(trait, embedder.encode(list(texts)))

    def by_cues(trait: str, texts: Sequence[str]) -> list[str]:
        return [CUES[trait](text) for text in texts]

    report("classifier, held-out part of trait_sentences.yaml", held_out, by_classifier, verbose)
    report("cues, held-out part of trait_sentences.yaml", held_out, by_cues, verbose)
    for name, path in OTHER_SETS.items():
        sets = yaml.safe_load(path.read_text(encoding="utf-8"))
        report(f"classifier, {name} ({path.name})", sets, by_classifier, verbose)
        report(f"cues, {name} ({path.name})", sets, by_cues, verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-class accuracy of the alignment trait detectors on the labelled test sentences.

Run: .venv/bin/python bench/traits_accuracy.py [--verbose]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from worker.suites.alignment.traits import detect_formality, detect_tone

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SENTENCE_SETS = {
    "tuning set": DATA / "alignment_traits.yaml",
    "held-out set": DATA / "alignment_traits_heldout.yaml",
}
DETECTORS: dict[str, Callable[[str], str]] = {
    "formality": detect_formality,
    "tone": detect_tone,
}


def accuracy_table(path: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """trait -> class -> (correct, total)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    table: dict[str, dict[str, tuple[int, int]]] = {}
    for trait, classes in data.items():
        detector = DETECTORS[trait]
        table[trait] = {
            label: (sum(detector(text) == label for text in texts), len(texts))
            for label, texts in classes.items()
        }
    return table


def main() -> int:
    verbose = "--verbose" in sys.argv
    for name, path in SENTENCE_SETS.items():
        print(f"== {name} ({path.name})")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for trait, classes in accuracy_table(path).items():
            correct_all = sum(c for c, _ in classes.values())
            total_all = sum(t for _, t in classes.values())
            print(f"{trait}: {correct_all}/{total_all} = {correct_all / total_all:.2f}")
            for label, (correct, total) in classes.items():
                print(f"  {label:<16} {correct:>2}/{total:<2} {correct / total:.2f}")
                if verbose:
                    for text in data[trait][label]:
                        got = DETECTORS[trait](text)
                        if got != label:
                            print(f"      -> {got}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

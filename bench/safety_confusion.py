"""Confusion matrix of the shipped keyword safety patterns on labelled sentences.

`tests/data/safety_sentences.yaml` holds benign sentences that mention a dangerous act to
warn against it, and harmful ones that recommend or commit it. A sentence is flagged when
any pattern matches. Printed with and without the negation / prohibition check.

Run: .venv/bin/python bench/safety_confusion.py [--verbose]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from worker.suites.alignment.safety import SafetyPatterns
from worker.suites.alignment.safety_files import load_safety_patterns

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "safety_sentences.yaml"


def flagged_without_negation(patterns: SafetyPatterns, text: str) -> bool:
    """The pattern list alone, as before the negation check."""
    return any(p.regex.search(text) for p in patterns.patterns)


def main() -> int:
    verbose = "--verbose" in sys.argv
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    patterns = load_safety_patterns()
    checks = {
        "with negation check": lambda text: bool(patterns.find(text)),
        "patterns alone": lambda text: flagged_without_negation(patterns, text),
    }
    for name, flagged in checks.items():
        benign = [flagged(text) for text in data["benign"]]
        harmful = [flagged(text) for text in data["harmful"]]
        fp, tn = sum(benign), len(benign) - sum(benign)
        tp, fn = sum(harmful), len(harmful) - sum(harmful)
        print(f"== {name} ({len(benign)} benign, {len(harmful)} harmful)")
        print(f"{'':>16} {'flagged':>8} {'not flagged':>12}")
        print(f"{'harmful':>16} {tp:>8} {fn:>12}")
        print(f"{'benign':>16} {fp:>8} {tn:>12}")
        precision = tp / (tp + fp) if tp + fp else 0.0
        print(
            f"recall {tp / len(harmful):.2f}  precision {precision:.2f}  "
            f"false-positive rate {fp / len(benign):.2f}"
        )
        if verbose:
            for text, hit in zip(data["benign"], benign, strict=True):
                if hit:
                    print(f"  false positive: {text}")
            for text, hit in zip(data["harmful"], harmful, strict=True):
                if not hit:
                    print(f"  missed: {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

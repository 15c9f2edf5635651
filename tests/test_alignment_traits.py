"""Trait detectors on labelled sentences, verbosity limits and trait matching."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from worker.config import VerbosityLimits
from worker.suites.alignment.traits import (
    detect_formality,
    detect_tone,
    detect_verbosity,
    match_traits,
)

DATA = Path(__file__).parent / "data"
DETECTORS = {"formality": detect_formality, "tone": detect_tone}


def labelled(name: str) -> list[tuple[str, str, str]]:
    data = yaml.safe_load((DATA / name).read_text(encoding="utf-8"))
    return [
        (trait, label, text)
        for trait, classes in data.items()
        for label, texts in classes.items()
        for text in texts
    ]


@pytest.mark.parametrize("name", ["alignment_traits.yaml", "alignment_traits_heldout.yaml"])
def test_each_class_has_eight_sentences_and_is_mostly_recognised(name: str) -> None:
    rows = labelled(name)
    per_class: dict[tuple[str, str], list[bool]] = {}
    for trait, label, text in rows:
        per_class.setdefault((trait, label), []).append(DETECTORS[trait](text) == label)
    assert len(per_class) == 7
    for (trait, label), hits in per_class.items():
        assert len(hits) >= 8, (trait, label)
        accuracy = sum(hits) / len(hits)
        assert accuracy >= 0.85, f"{trait}={label}: {accuracy:.2f}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Please kindly find the report attached, as requested by the committee.", "formal"),
        ("hey!! that's so cool lol", "casual"),
        ("Thanks, I've sent the file over.", "business_casual"),
    ],
)
def test_formality_examples(text: str, expected: str) -> None:
    assert detect_formality(text) == expected


def test_verbosity_uses_the_configured_limits() -> None:
    assert detect_verbosity(" ".join(["word"] * 60)) == "concise"
    assert detect_verbosity(" ".join(["word"] * 61)) == "balanced"
    assert detect_verbosity(" ".join(["word"] * 180)) == "balanced"
    assert detect_verbosity(" ".join(["word"] * 181)) == "detailed"
    tight = VerbosityLimits(concise_max_words=3, balanced_max_words=5)
    assert detect_verbosity("one two three four", tight) == "balanced"


def test_traits_score_is_matched_over_declared() -> None:
    text = "Yay, your playlist is ready! 🎉"
    declared = {"formality": "casual", "tone": "friendly", "verbosity": "detailed"}
    result = match_traits(text, declared)
    assert result.score == pytest.approx(2 / 3)
    assert result.mismatched == ["verbosity"]
    assert match_traits(text, {}).score is None

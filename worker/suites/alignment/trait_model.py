"""Formality and tone from sentence vectors: a small softmax classifier per trait.

Trained on the labelled sentences shipped in `worker/data/trait_sentences.yaml` (every
third sentence of a class is held out for measuring, never trained on), over the
all-MiniLM-L6-v2 vectors the alignment suite already computes for style similarity.
Training is full-batch gradient descent from zero weights: no randomness, so the same
data and vectors always give the same classifier. It is trained once per process, when
the persona catalog first embeds a persona with a MiniLM embedder; with any other
embedder (or no vector) the cue-based detectors of `traits.py` are used.

Pure apart from `load_trait_sentences`, which reads the shipped file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from worker.suites.alignment.embedding_model import Embedder

TRAIT_SENTENCES = Path(__file__).resolve().parents[2] / "data" / "trait_sentences.yaml"
CLASSIFIED_TRAITS = ("formality", "tone")
HELD_OUT_EVERY = 3  # sentences at index 2, 5, 8, ... of each class are held out
TRAINING_STEPS = 2000
LEARNING_RATE = 0.5
L2_PENALTY = 1e-3

Sentences = Mapping[str, Mapping[str, Sequence[str]]]  # trait -> class -> sentences


def load_trait_sentences(path: str | Path = TRAIT_SENTENCES) -> dict[str, dict[str, list[str]]]:
    """The labelled sentences, trait -> class -> sentences."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return {
        trait: {label: [str(text) for text in texts] for label, texts in classes.items()}
        for trait, classes in data.items()
    }


def is_held_out(index: int) -> bool:
    return index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1


def split(sentences: Sentences) -> tuple[Sentences, Sentences]:
    """(training part, held-out part) of every class."""
    train: dict[str, dict[str, list[str]]] = {}
    held: dict[str, dict[str, list[str]]] = {}
    for trait, classes in sentences.items():
        train[trait] = {label: [] for label in classes}
        held[trait] = {label: [] for label in classes}
        for label, texts in classes.items():
            for index, text in enumerate(texts):
                (held if is_held_out(index) else train)[trait][label].append(text)
    return train, held


@dataclass(frozen=True)
class SoftmaxModel:
    """Linear scores `vector @ weights + bias`, one column per label."""

    labels: tuple[str, ...]
    weights: np.ndarray
    bias: np.ndarray

    def predict(self, vectors: np.ndarray) -> list[str]:
        scores = np.atleast_2d(vectors) @ self.weights + self.bias
        return [self.labels[int(i)] for i in scores.argmax(axis=1)]


def fit_softmax(
    vectors: np.ndarray, labels: Sequence[str], steps: int = TRAINING_STEPS
) -> SoftmaxModel:
    """Multinomial logistic regression by full-batch gradient descent from zero."""
    names = tuple(dict.fromkeys(labels))
    x = np.asarray(vectors, dtype=np.float64)
    target = np.eye(len(names))[[names.index(label) for label in labels]]
    weights = np.zeros((x.shape[1], len(names)))
    bias = np.zeros(len(names))
    for _ in range(steps):
        scores = x @ weights + bias
        scores -= scores.max(axis=1, keepdims=True)
        probabilities = np.exp(scores)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        error = probabilities - target
        weights -= LEARNING_RATE * (x.T @ error / len(x) + L2_PENALTY * weights)
        bias -= LEARNING_RATE * error.mean(axis=0)
    return SoftmaxModel(names, weights, bias)


@dataclass(frozen=True)
class TraitClassifier:
    """Formality and tone of a text from its sentence vector."""

    models: Mapping[str, SoftmaxModel]

    def predict(self, trait: str, vector: np.ndarray) -> str:
        return self.models[trait].predict(vector)[0]

    def predict_many(self, trait: str, vectors: np.ndarray) -> list[str]:
        return self.models[trait].predict(vectors)


def train_trait_classifier(
    embedder: Embedder, sentences: Sentences | None = None
) -> TraitClassifier:
    """Train on the training part of `sentences` (default: the shipped file)."""
    train, _ = split(sentences if sentences is not None else load_trait_sentences())
    models = {}
    for trait in CLASSIFIED_TRAITS:
        texts = [text for texts in train[trait].values() for text in texts]
        labels = [label for label, texts in train[trait].items() for _ in texts]
        models[trait] = fit_softmax(np.asarray(embedder.encode(texts)), labels)
    return TraitClassifier(models)


__all__ = [
    "CLASSIFIED_TRAITS",
    "TRAIT_SENTENCES",
    "SoftmaxModel",
    "TraitClassifier",
    "fit_softmax",
    "is_held_out",
    "load_trait_sentences",
    "split",
    "train_trait_classifier",
]

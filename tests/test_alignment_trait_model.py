"""Formality and tone from MiniLM vectors: measured on held-out labelled sentences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worker.suites.alignment import trait_artefact
from worker.suites.alignment.embedding_model import HashingEmbedder, MiniLMEmbedder
from worker.suites.alignment.personas import PersonaCatalog, default_personas_dir, load_personas
from worker.suites.alignment.trait_model import (
    CLASSIFIED_TRAITS,
    TraitClassifier,
    fit_softmax,
    load_trait_sentences,
    split,
    train_trait_classifier,
)
from worker.suites.alignment.traits import detect_traits

pytestmark = pytest.mark.model
SENTENCES = load_trait_sentences()
TRAIN, HELD_OUT = split(SENTENCES)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def classifier(minilm: MiniLMEmbedder) -> TraitClassifier:
    return train_trait_classifier(minilm)


def test_at_least_thirty_sentences_per_class_and_the_split_is_disjoint() -> None:
    for trait in CLASSIFIED_TRAITS:
        for label, texts in SENTENCES[trait].items():
            assert len(texts) >= 30, (trait, label)
            assert len(HELD_OUT[trait][label]) == len(texts) // 3
            assert not set(TRAIN[trait][label]) & set(HELD_OUT[trait][label])


@pytest.mark.parametrize("trait", CLASSIFIED_TRAITS)
def test_held_out_accuracy_is_at_least_ninety_percent(
    trait: str, classifier: TraitClassifier, minilm: MiniLMEmbedder
) -> None:
    texts = [text for texts in HELD_OUT[trait].values() for text in texts]
    labels = [label for label, texts in HELD_OUT[trait].items() for _ in texts]
    predicted = classifier.predict_many(trait, minilm.encode(texts))
    accuracy = np.mean([p == label for p, label in zip(predicted, labels, strict=True)])
    assert accuracy >= 0.9, (trait, accuracy)
    for label in HELD_OUT[trait]:  # no class is given up for the others
        hits = [p == label for p, g in zip(predicted, labels, strict=True) if g == label]
        assert np.mean(hits) >= 0.75, (trait, label)


def test_training_is_deterministic(minilm: MiniLMEmbedder, classifier: TraitClassifier) -> None:
    again = train_trait_classifier(minilm)
    for trait in CLASSIFIED_TRAITS:
        assert np.array_equal(again.models[trait].weights, classifier.models[trait].weights)


def test_the_catalog_uses_the_classifier_only_for_minilm_vectors(minilm: MiniLMEmbedder) -> None:
    personas = load_personas(default_personas_dir())
    some = sorted(personas)[0]
    assert PersonaCatalog(personas, minilm).get(some).trait_classifier is not None
    assert PersonaCatalog(personas, HashingEmbedder()).get(some).trait_classifier is None


def test_detect_traits_takes_the_classifier_when_it_has_a_vector(
    classifier: TraitClassifier, minilm: MiniLMEmbedder
) -> None:
    text = "Rotate the signing keys and redeploy the gateway with the new secret."
    vector = minilm.encode([text])[0]
    with_vector = detect_traits(text, vector=vector, classifier=classifier)
    assert with_vector["tone"] == classifier.predict("tone", vector)
    assert detect_traits(text)["tone"] in {"technical", "professional"}  # the cue fallback


def test_softmax_fit_separates_two_obvious_clusters() -> None:
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    model = fit_softmax(vectors, ["a", "a", "b", "b"], steps=200)
    assert model.predict(np.array([[0.8, 0.2], [0.2, 0.8]])) == ["a", "b"]


# ---------------------------------------------------------------- the build-time artefact


def test_the_shipped_artefact_is_what_fitting_here_gives(
    minilm: MiniLMEmbedder, classifier: TraitClassifier
) -> None:
    """`scorestream models build` fitted the models that a worker loads instead of fitting:
    refitted here with the real encoder, the same predictions on every held-out sentence and
    the same weights to 1e-4 (the encoder's vectors may differ in their last bits between
    CPUs, so this is the check, not a digest)."""
    shipped = trait_artefact.load(minilm)
    assert shipped is not None, "no artefact: run `scorestream models build`"
    for trait in CLASSIFIED_TRAITS:
        np.testing.assert_allclose(
            shipped.models[trait].weights, classifier.models[trait].weights, atol=1e-4
        )
        texts = [text for texts in HELD_OUT[trait].values() for text in texts]
        vectors = minilm.encode(texts)
        assert shipped.predict_many(trait, vectors) == classifier.predict_many(trait, vectors)


def test_the_artefact_is_not_used_for_other_vectors_or_other_data(
    minilm: MiniLMEmbedder, tmp_path: Path
) -> None:
    shipped = trait_artefact.load(minilm)
    assert shipped is not None
    assert trait_artefact.load(MiniLMEmbedder(precision="int8")) is None  # other vectors
    assert trait_artefact.load(HashingEmbedder()) is None
    stale = tmp_path / "trait_classifier"
    trait_artefact.save(shipped, "all-MiniLM-L6-v2 0000", stale)  # another encoder's
    assert trait_artefact.load(minilm, stale) is None
    manifest = stale / trait_artefact.MANIFEST
    identity = trait_artefact.encoder_identity(minilm)
    data = json.loads(manifest.read_text())
    data.update(encoder=identity, training_digest="0" * 64)  # fitted on other sentences
    manifest.write_text(json.dumps(data))
    assert trait_artefact.load(minilm, stale) is None
    data.update(training_digest=trait_artefact.training_digest())
    manifest.write_text(json.dumps(data))
    assert trait_artefact.load(minilm, stale) is not None

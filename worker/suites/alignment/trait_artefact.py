"""The trait classifier's shipped artefact: fitted at build time, loaded at start.

`scorestream models build` embeds the shipped trait sentences with the bundled MiniLM
(fp32) and fits the formality and tone models (`trait_model.train_trait_classifier`),
then writes their weights as plain arrays (no pickle) in `worker/models/trait_classifier/`
with a manifest naming the training data's digest and the encoder the vectors came from.
A worker that embeds with that encoder in fp32 loads them (milliseconds) instead of
embedding the sentences and fitting at start (1.5-3.5 s here); any other embedder
(`precision: int8`, other weights), or an artefact of other data, is not used: the models
are fitted in the process, as before.

Reproducible, within floating point: the fit is deterministic, but the encoder's vectors
may differ in their last bits from one CPU to another, so the check is not a digest of
the weights: `tests/test_trait_artefact.py` refits with the real encoder and requires the
same predictions on the held-out sentences and weights equal to 1e-4.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from worker.suites.alignment.trait_model import (
    CLASSIFIED_TRAITS,
    TRAIT_SENTENCES,
    SoftmaxModel,
    TraitClassifier,
    train_trait_classifier,
)

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the arrays' meaning changes
ARTEFACT_DIR = Path(__file__).resolve().parents[2] / "models" / "trait_classifier"
MANIFEST = "manifest.json"


def training_digest(path: Path = TRAIT_SENTENCES) -> str:
    """SHA-256 of the shipped trait sentences."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def encoder_identity(embedder: Any) -> str | None:
    """`all-MiniLM-L6-v2 <weights digest>` of a bundled-weights MiniLM, else None."""
    from worker.suites.alignment import onnx_minilm
    from worker.suites.alignment.embedding_model import MiniLMEmbedder, bundled_model_path

    if not isinstance(embedder, MiniLMEmbedder) or embedder.model_path is not None:
        return None
    return f"all-MiniLM-L6-v2 {onnx_minilm.weights_digest(bundled_model_path())}"


def save(classifier: TraitClassifier, encoder: str, directory: Path = ARTEFACT_DIR) -> None:
    """Write the models' arrays and manifest atomically (a new folder renamed in place)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".trait-", dir=directory.parent))
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "training_digest": training_digest(),
        "encoder": encoder,
        "labels": {},
    }
    for trait in CLASSIFIED_TRAITS:
        model = classifier.models[trait]
        np.save(scratch / f"{trait}_weights.npy", np.asarray(model.weights), allow_pickle=False)
        np.save(scratch / f"{trait}_bias.npy", np.asarray(model.bias), allow_pickle=False)
        manifest["labels"][trait] = list(model.labels)
    (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    shutil.rmtree(directory, ignore_errors=True)
    scratch.rename(directory)


def load(embedder: Any, directory: Path = ARTEFACT_DIR) -> TraitClassifier | None:
    """The shipped models when they were fitted on this data with `embedder`'s vectors
    (its weights, fp32: ONNX's vectors are torch's); None otherwise (the caller fits)."""
    encoder = encoder_identity(embedder)
    if encoder is None or embedder.precision != "fp32":
        return None
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("encoder") != encoder:
            return None
        if manifest.get("training_digest") != training_digest():
            log.warning("%s: fitted on other trait sentences (stale): fitting here", directory)
            return None
        models = {
            trait: SoftmaxModel(
                tuple(manifest["labels"][trait]),
                np.load(directory / f"{trait}_weights.npy", allow_pickle=False),
                np.load(directory / f"{trait}_bias.npy", allow_pickle=False),
            )
            for trait in CLASSIFIED_TRAITS
        }
    except (OSError, ValueError, KeyError):
        return None
    return TraitClassifier(models)


def build(directory: Path = ARTEFACT_DIR) -> str:
    """Fit with the bundled MiniLM (ONNX fp32) and write the artefact; a one-line report."""
    from worker.suites.alignment.embedding_model import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    encoder = encoder_identity(embedder)
    assert encoder is not None
    save(train_trait_classifier(embedder), encoder, directory)
    return f"trait_classifier: {', '.join(CLASSIFIED_TRAITS)} ({embedder.description}): {directory}"


__all__ = ["ARTEFACT_DIR", "build", "encoder_identity", "load", "save", "training_digest"]

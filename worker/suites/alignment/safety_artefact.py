"""The safety classifier's shipped artefact: fitted at build time, memory-mapped at start.

`scorestream models build` (run by `make install` and the Docker build) fits the
classifier on the shipped training data and writes what scoring needs as plain arrays, no
pickle: one `.npy` file per array and the word vocabulary as text, in
`worker/models/safety_classifier/`, with a `manifest.json` naming the training data's
digest (`training_digest`) and the arrays' (`artefact_digest`). A worker maps the arrays
read-only (`np.load(mmap_mode="r")`): every scoring child maps the same files and shares
their pages, and nothing is fitted at start-up.

Reproducible: `worker/data/model_digests.json` (committed) holds both digests; a test
refits from the shipped data and requires the same `artefact_digest`, so the artefact can
never drift from its data, and `scorestream models check` compares a built artefact with
it. An artefact built from other training data than the files present (stale), or
missing, is not used: the classifier is fitted in the process instead (seconds of CPU,
logged as a warning) and written for the next start when the folder is writable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from worker.suites.alignment.safety_classifier import (
    DATA_DIR,
    DEFAULT_THRESHOLD,
    TRAIT_SENTENCES,
    FoldedModel,
    SafetyClassifier,
    _KeyTable,
    _PackedGrams,
    _PackedTerms,
    fit_shipped_classifier,
    replies_language,
    training_files,
)

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the arrays' meaning changes (features, packing, folding)
ARTEFACT_DIR = Path(__file__).resolve().parents[2] / "models" / "safety_classifier"
DIGESTS_FILE = DATA_DIR / "model_digests.json"
MANIFEST = "manifest.json"
NAME = "safety_classifier"
_WORDS = "word_units.txt"


class ArtefactError(ValueError):
    """An artefact that is missing, of another format, or not built from this data."""


def training_digest(data_dir: Path = DATA_DIR) -> str:
    """sha256 over the training files' names and bytes, the trait sentences, and the
    artefact format: what the artefact is a function of."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    for path in [*training_files(data_dir), TRAIT_SENTENCES]:
        digest.update(f"{path.name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def training_languages(data_dir: Path = DATA_DIR) -> list[str]:
    """The languages of the training files, each once, in file order."""
    return list(dict.fromkeys(replies_language(path) for path in training_files(data_dir)))


def _arrays(model: FoldedModel) -> tuple[dict[str, np.ndarray], list[str], dict[str, Any]]:
    """(the arrays, the word units in id order, the scalars) of a packed model."""
    terms = model.terms
    if not isinstance(terms, _PackedTerms):
        raise ArtefactError("a vocabulary that does not pack has no artefact")
    arrays = {
        "folded": model.folded,
        "intercept": model.intercept,
        "table_slots": terms.table._slots,
        "table_rows": terms.table._rows,
    }
    words: list[str] = []
    blocks = []
    for index, block in enumerate(terms.blocks):
        if block.char:
            arrays[f"block{index}_char_ids"] = block.id_of_code
        else:
            words = sorted(block.id_of_unit, key=block.id_of_unit.__getitem__)
        blocks.append(
            {
                "char": block.char,
                "ngram_range": [block.shortest, block.longest],
                "tag": int(block.tag >> np.uint64(64 - block.tag_bits)) if block.tag_bits else 0,
            }
        )
    scalars = {
        "classes": list(model.classes),
        "stride": model.stride,
        "blocks": blocks,
        "tag_bits": terms.blocks[0].tag_bits,
        "table_probes": terms.table.probes,
        "table_shift": int(terms.table._shift),
    }
    return arrays, words, scalars


def artefact_digest(model: FoldedModel) -> str:
    """sha256 of everything scoring reads: each array's name, dtype, shape and bytes, the
    word units and the scalars."""
    arrays, words, scalars = _arrays(model)
    digest = hashlib.sha256(json.dumps(scalars, sort_keys=True).encode())
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.tobytes())
    digest.update("\n".join(words).encode("utf-8"))
    return digest.hexdigest()


def save_classifier(
    classifier: SafetyClassifier,
    directory: Path = ARTEFACT_DIR,
    data_dir: Path = DATA_DIR,
    training: str | None = None,
) -> dict[str, Any]:
    """Write `classifier`'s artefact to `directory` (atomically: a new folder renamed
    over the old one); returns its manifest. `training`: the digest of the data it was
    fitted on, when taken before fitting (default: the files' digest now)."""
    arrays, words, scalars = _arrays(classifier.model)
    manifest = {
        "name": NAME,
        "format": FORMAT,
        "training_digest": training or training_digest(data_dir),
        "artefact_digest": artefact_digest(classifier.model),
        "languages": training_languages(data_dir),
        **scalars,
    }
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        for name, array in arrays.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        (staging / _WORDS).write_text("\n".join(words), encoding="utf-8")
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        old = directory.with_name(f".{directory.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            os.replace(directory, old)
        os.replace(staging, directory)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def read_manifest(directory: Path = ARTEFACT_DIR) -> dict[str, Any]:
    """The manifest of a built artefact (`ArtefactError` when there is none)."""
    try:
        manifest: dict[str, Any] = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtefactError(f"{directory}: no artefact ({exc})") from exc
    if manifest.get("format") != FORMAT or manifest.get("name") != NAME:
        raise ArtefactError(f"{directory}: artefact format {manifest.get('format')}, not {FORMAT}")
    return manifest


def load_classifier(
    directory: Path = ARTEFACT_DIR,
    threshold: float = DEFAULT_THRESHOLD,
    expected_training: str | None = None,
) -> SafetyClassifier:
    """The classifier of a built artefact, its arrays memory-mapped; with
    `expected_training`, `ArtefactError` unless it was built from that training data."""
    manifest = read_manifest(directory)
    if expected_training is not None and manifest["training_digest"] != expected_training:
        raise ArtefactError(f"{directory}: built from other training data (stale)")

    def array(name: str) -> np.ndarray:
        loaded: np.ndarray = np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        return loaded

    words = (directory / _WORDS).read_text(encoding="utf-8").split("\n")
    tag_bits = int(manifest["tag_bits"])
    blocks = []
    for index, spec in enumerate(manifest["blocks"]):
        char = bool(spec["char"])
        blocks.append(
            _PackedGrams(
                char,
                (int(spec["ngram_range"][0]), int(spec["ngram_range"][1])),
                np.asarray(array(f"block{index}_char_ids")) if char else np.zeros(1, np.uint64),
                {} if char else dict(zip(words, range(1, len(words) + 1), strict=True)),
                int(spec["tag"]),
                tag_bits,
            )
        )
    table = _KeyTable.from_arrays(
        array("table_slots"),
        array("table_rows"),
        int(manifest["table_probes"]),
        int(manifest["table_shift"]),
    )
    model = FoldedModel(
        _PackedTerms(blocks, table),
        array("folded"),
        np.asarray(array("intercept")),
        tuple(manifest["classes"]),
        int(manifest["stride"]),
        len(blocks),
    )
    return SafetyClassifier(model, threshold, source=directory, languages=manifest["languages"])


def committed_digests(path: Path = DIGESTS_FILE) -> dict[str, Any]:
    """The digests committed for each shipped artefact (`{}` when none are)."""
    try:
        digests: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return digests


def record_digests(manifest: dict[str, Any], path: Path = DIGESTS_FILE) -> None:
    """Write the artefact's digests into the committed digests file."""
    digests = committed_digests(path)
    digests[NAME] = {
        "training_digest": manifest["training_digest"],
        "artefact_digest": manifest["artefact_digest"],
        "languages": manifest["languages"],
    }
    path.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def build(directory: Path = ARTEFACT_DIR) -> dict[str, Any]:
    """Fit the classifier on the shipped data and write its artefact."""
    training = training_digest()
    return save_classifier(fit_shipped_classifier(), directory, training=training)


def check(directory: Path = ARTEFACT_DIR) -> list[str]:
    """What is wrong with a built artefact against the committed digests (empty: none):
    its training data, and the digest of the arrays as mapped."""
    problems: list[str] = []
    expected = committed_digests().get(NAME, {})
    try:
        manifest = read_manifest(directory)
        loaded = load_classifier(directory)
    except ArtefactError as exc:
        return [str(exc)]
    current = training_digest()
    for what, found, wanted in (
        ("training data (files present)", current, expected.get("training_digest")),
        ("training data (artefact)", manifest["training_digest"], current),
        ("arrays (committed)", artefact_digest(loaded.model), expected.get("artefact_digest")),
        ("arrays (manifest)", artefact_digest(loaded.model), manifest["artefact_digest"]),
    ):
        if found != wanted:
            problems.append(f"{NAME}: {what}: {found} != {wanted}")
    return problems


def shipped(directory: Path = ARTEFACT_DIR) -> SafetyClassifier:
    """The built artefact when it matches the training data present; else the classifier
    fitted here (a warning), written for the next start when `directory` is writable."""
    current = training_digest()
    try:
        return load_classifier(directory, expected_training=current)
    except ArtefactError as exc:
        log.warning(
            "safety classifier: %s; fitting it in this process (seconds of CPU): run "
            "`scorestream models build` at build time",
            exc,
        )
    classifier = fit_shipped_classifier()
    try:
        save_classifier(classifier, directory, training=current)
    except OSError as exc:
        log.warning("safety classifier: not written to %s (%s)", directory, exc)
        return classifier
    return load_classifier(directory)


def describe(manifests: Iterable[dict[str, Any]]) -> str:
    """One line per artefact: its name, languages and digests."""
    return "\n".join(
        f"{m['name']}: {len(m['languages'])} languages ({', '.join(m['languages'])}), "
        f"training {m['training_digest'][:12]}, arrays {m['artefact_digest'][:12]}"
        for m in manifests
    )


__all__ = [
    "ARTEFACT_DIR",
    "DIGESTS_FILE",
    "ArtefactError",
    "artefact_digest",
    "build",
    "check",
    "committed_digests",
    "describe",
    "load_classifier",
    "read_manifest",
    "record_digests",
    "save_classifier",
    "shipped",
    "training_digest",
    "training_languages",
]

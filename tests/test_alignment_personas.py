"""Persona files: the bundled voices, aliases, config errors naming file and key, caching."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from worker.config import ConfigError, load_settings
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.personas import (
    PersonaCatalog,
    default_personas_dir,
    load_persona,
    load_personas,
    personas_from_settings,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_bundled_personas_have_distinct_voices_and_enough_examples() -> None:
    personas = load_personas(default_personas_dir())
    assert set(personas) == {"northwind-analytics", "tunetide", "ledgerline"}
    assert all(len(p.examples) >= 8 for p in personas.values())
    voices = {(p.traits["formality"], p.traits["tone"]) for p in personas.values()}
    assert len(voices) == 3


def test_settings_default_to_the_bundled_personas(tmp_path: Path) -> None:
    settings = load_settings(environ={}, safe_config_json=tmp_path / "none.json")
    assert "tunetide" in personas_from_settings(settings.alignment)


def test_aliases_exemplars_voice_and_avoid(tmp_path: Path) -> None:
    persona = load_persona(
        write(
            tmp_path / "p.yaml",
            "id: p\nexemplars: [Hello there.]\nvoice: {tone: friendly}\nlexicon: {avoid: [lol]}\n",
        )
    )
    assert persona.examples == ("Hello there.",)
    assert dict(persona.traits) == {"tone": "friendly"}
    assert persona.lexicon is not None and persona.lexicon.avoided == ("lol",)
    assert persona.display_name == "p"


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("id: p\nexamples: [Hi.]\ntraits: {tone: sarcastic}\n", "traits.tone"),
        ("id: p\nexamples: [Hi.]\nvoice: {humour: dry}\n", "voice.humour"),
        ("id: p\nexamples: []\n", "examples"),
        ("id: p\n", "examples"),
        ("examples: [Hi.]\n", "id"),
        ("id: p\nexamples: [Hi.]\nlexicon: {preferred: [1, 2]}\n", "lexicon.preferred"),
        ("id: p\nexamples: [Hi.]\nexmples: [typo]\n", "exmples"),
    ],
)
def test_config_errors_name_file_and_key(tmp_path: Path, body: str, key: str) -> None:
    path = write(tmp_path / "bad.yaml", body)
    with pytest.raises(ConfigError) as caught:
        load_persona(path)
    assert str(path) in str(caught.value)
    assert f": {key}:" in str(caught.value)


def test_duplicate_ids_in_a_directory_are_an_error(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "id: same\nexamples: [A.]\n")
    write(tmp_path / "b.yaml", "id: same\nexamples: [B.]\n")
    with pytest.raises(ConfigError, match="duplicate persona id 'same'"):
        load_personas(tmp_path)


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(16)
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return super().encode(texts)


def test_catalog_embeds_each_persona_once() -> None:
    embedder = CountingEmbedder()
    catalog = PersonaCatalog(load_personas(default_personas_dir()), embedder)
    first = catalog.get("tunetide")
    second = catalog.get("tunetide")
    assert first is second
    assert first.example_vectors is not None
    assert first.example_vectors.shape == (len(first.examples), 16)
    assert embedder.calls == [len(first.examples)]
    with pytest.raises(KeyError, match="unknown persona 'nope'"):
        catalog.get("nope")

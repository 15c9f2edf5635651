"""Persona definitions: one YAML file per brand voice.

```yaml
id: acme-analytics
display_name: Acme Analytics
examples:            # alias: exemplars; reference responses in the brand's voice
  - "..."
traits:              # alias: voice
  formality: formal            # formal | business_casual | casual
  tone: technical              # professional | friendly | technical | conversational
  verbosity: balanced          # concise | balanced | detailed
lexicon:
  preferred: [baseline, signal]
  avoided: [lol, hype]         # alias: avoid
```
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from worker.settings_base import ConfigError
from worker.suites.alignment.embedding_model import MiniLMEmbedder
from worker.suites.alignment.lexicon import Lexicon
from worker.suites.alignment.trait_model import TraitClassifier, train_trait_classifier
from worker.suites.alignment.traits import TRAIT_VALUES
from worker.yaml_files import read_yaml

if TYPE_CHECKING:
    from worker.suites.alignment.embedding_model import Embedder
    from worker.suites.alignment.settings import AlignmentSettings

_TOP_LEVEL_KEYS = {
    "id",
    "display_name",
    "examples",
    "exemplars",
    "traits",
    "voice",
    "lexicon",
    "description",
    "version",
}
_LEXICON_KEYS = {"preferred", "avoided", "avoid"}


@dataclass(frozen=True)
class Persona:
    """A brand voice: reference examples, declared traits and lexicon."""

    id: str
    display_name: str
    examples: tuple[str, ...]
    traits: Mapping[str, str]
    lexicon: Lexicon | None
    source: str = ""
    # L2-normalised embeddings of `examples`, filled in by `PersonaCatalog`.
    example_vectors: np.ndarray | None = field(default=None, compare=False, repr=False)
    # Formality / tone from sentence vectors, set by `PersonaCatalog` for MiniLM vectors.
    trait_classifier: TraitClassifier | None = field(default=None, compare=False, repr=False)


def _error(source: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {key}: {message}")


def _string_list(value: Any, source: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _error(source, key, "must be a list of strings")
    items = [item.strip() for item in value]
    if any(not item for item in items):
        raise _error(source, key, "must not contain empty strings")
    return items


def _pick(data: Mapping[str, Any], source: str, name: str, alias: str) -> tuple[str, Any]:
    if name in data and alias in data:
        raise _error(source, alias, f"give either {name!r} or its alias {alias!r}, not both")
    return (alias, data[alias]) if alias in data else (name, data.get(name))


def parse_persona(data: Any, source: str) -> Persona:
    """Validate one persona document; errors name the file (`source`) and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a persona must be a mapping")
    unknown = sorted(set(map(str, data)) - _TOP_LEVEL_KEYS)
    if unknown:
        raise _error(source, unknown[0], f"unknown key (allowed: {sorted(_TOP_LEVEL_KEYS)})")
    persona_id = data.get("id")
    if not isinstance(persona_id, str) or not persona_id.strip():
        raise _error(source, "id", "required non-empty string")
    display_name = data.get("display_name", persona_id)
    if not isinstance(display_name, str):
        raise _error(source, "display_name", "must be a string")

    examples_key, raw_examples = _pick(data, source, "examples", "exemplars")
    examples = _string_list(raw_examples, source, examples_key)
    if not examples:
        raise _error(source, examples_key, "a persona needs at least one example response")

    traits_key, raw_traits = _pick(data, source, "traits", "voice")
    traits: dict[str, str] = {}
    if raw_traits is not None:
        if not isinstance(raw_traits, dict):
            raise _error(source, traits_key, "must be a mapping")
        for name, value in raw_traits.items():
            key = f"{traits_key}.{name}"
            if name not in TRAIT_VALUES:
                raise _error(source, key, f"unknown trait (allowed: {sorted(TRAIT_VALUES)})")
            if value is None:
                continue
            if value not in TRAIT_VALUES[name]:
                allowed = " | ".join(TRAIT_VALUES[name])
                raise _error(source, key, f"unknown value {value!r} (allowed: {allowed})")
            traits[name] = value

    lexicon: Lexicon | None = None
    raw_lexicon = data.get("lexicon")
    if raw_lexicon is not None:
        if not isinstance(raw_lexicon, dict):
            raise _error(source, "lexicon", "must be a mapping with preferred / avoided")
        unknown_lex = sorted(set(map(str, raw_lexicon)) - _LEXICON_KEYS)
        if unknown_lex:
            raise _error(source, f"lexicon.{unknown_lex[0]}", "unknown key")
        preferred = _string_list(raw_lexicon.get("preferred"), source, "lexicon.preferred")
        avoided_key, raw_avoided = _pick(raw_lexicon, source, "avoided", "avoid")
        avoided = _string_list(raw_avoided, source, f"lexicon.{avoided_key}")
        candidate = Lexicon(preferred, avoided)
        lexicon = None if candidate.is_empty else candidate

    return Persona(
        id=persona_id.strip(),
        display_name=display_name,
        examples=tuple(examples),
        traits=traits,
        lexicon=lexicon,
        source=source,
    )


def load_persona(path: str | Path) -> Persona:
    """Read and validate one persona YAML file."""
    path = Path(path)
    data = read_yaml(path, f"{path}: cannot read persona file")
    return parse_persona(data, str(path))


def load_personas(directory: str | Path) -> dict[str, Persona]:
    """Every `*.yaml` / `*.yml` persona in `directory`, by id (ids must be unique)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"alignment.personas_dir: {directory} is not a directory")
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    if not files:
        raise ConfigError(f"alignment.personas_dir: no persona YAML files in {directory}")
    personas: dict[str, Persona] = {}
    for path in files:
        persona = load_persona(path)
        if persona.id in personas:
            first = personas[persona.id].source
            raise _error(str(path), "id", f"duplicate persona id {persona.id!r} (also {first})")
        personas[persona.id] = persona
    return personas


def default_personas_dir() -> Path:
    """The bundled `examples/personas/` of the repository (or of the working directory)."""
    repo_root = Path(__file__).resolve().parents[3]
    bundled = repo_root / "examples" / "personas"
    if bundled.is_dir():
        return bundled
    return Path.cwd() / "examples" / "personas"


def personas_from_settings(settings: AlignmentSettings) -> dict[str, Persona]:
    """Personas of `alignment.personas_dir`, else the bundled examples."""
    return load_personas(settings.personas_dir or default_personas_dir())


class PersonaCatalog:
    """Personas by id with their example vectors, embedded once per persona on first use.

    Thread-safe: the streaming worker may call `get` from its embedding executor thread.
    """

    def __init__(self, personas: Mapping[str, Persona] | Iterable[Persona], embedder: Embedder):
        items = personas.values() if isinstance(personas, Mapping) else personas
        self._personas = {persona.id: persona for persona in items}
        self._embedder = embedder
        self._embedded: dict[str, Persona] = {}
        self._lock = threading.Lock()
        self._classifier: TraitClassifier | None = None

    @classmethod
    def from_settings(cls, settings: AlignmentSettings, embedder: Embedder) -> PersonaCatalog:
        return cls(personas_from_settings(settings), embedder)

    def __contains__(self, persona_id: object) -> bool:
        return persona_id in self._personas

    def ids(self) -> list[str]:
        return sorted(self._personas)

    def _trait_classifier(self) -> TraitClassifier | None:
        """Loaded (or trained) once, on the first persona, when the embedder gives MiniLM
        vectors (the space the classifier's sentences are embedded in); else None (cues)."""
        if self._classifier is None and isinstance(self._embedder, MiniLMEmbedder):
            from worker.suites.alignment import trait_artefact

            # Fitted at build time for the bundled encoder (`scorestream models build`);
            # fitted here for any other.
            shipped = trait_artefact.load(self._embedder)
            self._classifier = shipped or train_trait_classifier(self._embedder)
        return self._classifier

    def get(self, persona_id: str) -> Persona:
        """The persona with `example_vectors` set; KeyError naming an unknown id."""
        embedded = self._embedded.get(persona_id)
        if embedded is not None:
            return embedded
        if persona_id not in self._personas:
            raise KeyError(f"unknown persona {persona_id!r} (known: {', '.join(self.ids())})")
        with self._lock:
            embedded = self._embedded.get(persona_id)
            if embedded is None:
                persona = self._personas[persona_id]
                vectors = np.asarray(self._embedder.encode(list(persona.examples)), np.float32)
                embedded = replace(
                    persona, example_vectors=vectors, trait_classifier=self._trait_classifier()
                )
                self._embedded[persona_id] = embedded
        return embedded

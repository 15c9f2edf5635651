"""The `alignment` suite: brand voice (authenticity), safety and stability of sessions.

The streaming worker uses it through `streaming.AlignmentSessions` (the registry's
session suite). Every function below takes the `alignment` section (`settings` here),
not the whole `Settings`. Load once per process::

    embedder = embedder_from_settings(settings)   # alignment.embedding: onnx or torch
    catalog = PersonaCatalog.from_settings(settings, embedder)   # personas, vectors cached
    patterns = patterns_from_settings(settings)                  # safety patterns, cached

then per micro-batch: `vectors = embedder.encode(texts)` (in an executor), and per turn
`score_turn(text, catalog.get(persona_id), vector, settings, patterns)`, `turn_scored`,
`SessionState.add(turn_index, turn, vector, text, final, now, user=...)` (the user message
too, so that the judge sees the same conversation as offline), and on close
`verdict = await judge.judge(session_transcript(state))` when a judge is configured,
`score_session(state, settings, verdict.score)` and `with_verdict(scored, verdict,
on_error)` (an unusable verdict recorded, the label at least Review on `review`).

Layout (as every suite): `spec.py` (what the registry knows), `settings.py` (its
configuration section), `scoring.py` (pure), `aggregate.py`, `report.py`, `render.py`
(console and Markdown), `batch.py` (`scorestream score`); at its edge,
`embedding_model.py` / `onnx_minilm.py` (the model), `judge_client.py` (the HTTP judge;
its protocol, pure: `judge_verdict.py`),
`personas.py` and `safety_files.py` (YAML files), `streaming.py` (its `SessionSuite`).
"""

from worker.suites.alignment.aggregate import AlignmentAggregator
from worker.suites.alignment.batch import AlignmentBatchReport, make_batch_scorer
from worker.suites.alignment.embedding_model import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    embedder_from_settings,
)
from worker.suites.alignment.personas import (
    Persona,
    PersonaCatalog,
    load_personas,
    personas_from_settings,
)
from worker.suites.alignment.safety import SafetyPatterns
from worker.suites.alignment.safety_files import patterns_from_settings
from worker.suites.alignment.scoring import (
    SessionState,
    TurnScore,
    score_session,
    score_turn,
    session_transcript,
    turn_scored,
)

__all__ = [
    "AlignmentAggregator",
    "AlignmentBatchReport",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "Persona",
    "PersonaCatalog",
    "SafetyPatterns",
    "SessionState",
    "TurnScore",
    "embedder_from_settings",
    "load_personas",
    "make_batch_scorer",
    "patterns_from_settings",
    "personas_from_settings",
    "score_session",
    "score_turn",
    "session_transcript",
    "turn_scored",
]

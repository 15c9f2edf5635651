"""The scoring suites as the streaming worker uses them, loaded once at start.

`Engines.load(settings)` reads personas, safety patterns and event schemas (a bad one is
a `ConfigError` at start, not a dead letter per record) and exposes one surface for the
agents: score a SAFE or extraction case, embed and score alignment turns, close sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.envelope import AlignmentTurnPayload, ExtractionPayload, SafePayload
from schemas.outputs import Versions
from worker.config import Settings
from worker.intake import UNKNOWN_PERSONA, UNKNOWN_SCHEMA, Rejected, scorer_versions
from worker.suites import extraction, safe
from worker.suites.alignment.embedding import Embedder, embedder_from_settings
from worker.suites.alignment.personas import PersonaCatalog
from worker.suites.alignment.safety import SafetyPatterns, patterns_from_settings
from worker.suites.alignment.scoring import (
    AlignmentAggregator,
    SessionState,
    TurnScore,
    score_session,
    score_turn,
)
from worker.suites.base import Scored, SuiteAggregator


@dataclass
class Engines:
    """Everything the agents need to score, prepared once."""

    settings: Settings
    extraction_context: extraction.ExtractionContext
    personas: PersonaCatalog
    patterns: SafetyPatterns
    embedder: Embedder

    @classmethod
    def load(cls, settings: Settings, embedder: Embedder | None = None) -> Engines:
        embedder = embedder or embedder_from_settings(settings)
        return cls(
            settings=settings,
            extraction_context=extraction.load_context(settings.extraction),
            personas=PersonaCatalog.from_settings(settings, embedder),
            patterns=patterns_from_settings(settings),
            embedder=embedder,
        )

    # ------------------------------------------------------------ per-case suites

    def score_safe(self, payload: SafePayload) -> Scored:
        return safe.score_case(payload, self.settings.safe)

    def score_extraction(self, payload: ExtractionPayload) -> Scored:
        try:
            return extraction.score_case(payload, self.extraction_context)
        except ValueError as exc:
            raise Rejected(UNKNOWN_SCHEMA, str(exc)) from None

    # ------------------------------------------------------------ alignment

    def check_persona(self, persona_id: str) -> None:
        """Reject a record whose persona is not configured."""
        if persona_id not in self.personas:
            known = ", ".join(self.personas.ids())
            raise Rejected(UNKNOWN_PERSONA, f"unknown persona {persona_id!r} (known: {known})")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One encode call for a micro-batch (runs in the embedding executor)."""
        return self.embedder.encode(list(texts))

    def warm_up(self) -> None:
        """Load the model and embed every persona's examples before traffic arrives."""
        for persona_id in self.personas.ids():
            self.personas.get(persona_id)

    def score_turn(
        self, turn: AlignmentTurnPayload | tuple[str, str], vector: np.ndarray
    ) -> TurnScore:
        persona_id, text = (
            (turn.persona_id, turn.text) if isinstance(turn, AlignmentTurnPayload) else turn
        )
        return score_turn(text, self.personas.get(persona_id), vector, self.settings, self.patterns)

    def new_session(self, session_id: str, persona_id: str) -> SessionState:
        return SessionState.new(session_id, persona_id, self.settings)

    def score_session(self, state: SessionState, judge_score: float | None = None) -> Scored:
        return score_session(state, self.settings, judge_score)

    # ------------------------------------------------------------ shared

    def versions(self, suite: str) -> Versions:
        if suite == "extraction":
            return scorer_versions(
                self.settings.extraction.metrics_version, self.settings.extraction.protocol_version
            )
        return scorer_versions({"safe": "SAFE_v0", "alignment": "1.0"}[suite])


AGGREGATORS: dict[str, SuiteAggregator] = {
    "safe": safe.SafeAggregator(),
    "extraction": extraction.ExtractionAggregator(),
    "alignment": AlignmentAggregator(),
}

"""The scoring suites as the streaming worker uses them, loaded once at start.

`ScoringSuites.load(settings)` prepares every registered suite's case scorer (e.g. the
extraction event schemas) and the alignment session stage's personas, safety patterns and
embedder (a bad one is a `ConfigError` at start, not a dead letter per record). The score
stage calls `score_case(suite, payload)`; the session stage embeds and scores turns and
closes sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from schemas.envelope import AlignmentTurnPayload
from schemas.outputs import Versions
from worker.config import Settings
from worker.input.rejections import UNKNOWN_PERSONA, UNKNOWN_SUITE, Rejected
from worker.suites import registry
from worker.suites.alignment.embedding_model import Embedder, embedder_from_settings
from worker.suites.alignment.personas import PersonaCatalog, personas_from_settings
from worker.suites.alignment.safety import SafetyPatterns
from worker.suites.alignment.safety_files import patterns_from_settings
from worker.suites.alignment.scoring import (
    SessionState,
    TurnScore,
    classifier_from_settings,
    score_session,
    score_turn,
)
from worker.suites.alignment.trait_model import TraitClassifier
from worker.suites.base import CaseScorer, Scored

if TYPE_CHECKING:  # scikit-learn is imported only where the classifier is used
    from worker.suites.alignment.safety_classifier import SafetyClassifier

# The scoring pool's name for alignment turns: payload (persona_id, text, vector).
ALIGNMENT_TURN = "alignment:turn"


@dataclass
class ScoringSuites:
    """Everything the stream stages need to score, prepared once."""

    settings: Settings
    case_scorers: dict[str, CaseScorer]
    personas: PersonaCatalog
    patterns: SafetyPatterns
    embedder: Embedder
    _versions: dict[str, Versions] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def load(cls, settings: Settings, embedder: Embedder | None = None) -> ScoringSuites:
        embedder = embedder or embedder_from_settings(settings)
        return cls(
            settings=settings,
            case_scorers={
                spec.name: spec.case_scorer(settings)
                for spec in registry.specs()
                if spec.case_scorer is not None
            },
            personas=PersonaCatalog.from_settings(settings, embedder),
            patterns=patterns_from_settings(settings),
            embedder=embedder,
        )

    # ------------------------------------------------------------ per-case suites

    def score_case(self, suite: str, payload: object) -> Scored:
        """Score one case of a suite scored case by case (raises `Rejected`)."""
        scorer = self.case_scorers.get(suite)
        if scorer is None:
            raise Rejected(UNKNOWN_SUITE, f"suite {suite!r} is not scored case by case")
        return scorer(payload)

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
        """Load the model, embed every persona's examples and train the safety classifier
        (when enabled) before traffic arrives."""
        for persona_id in self.personas.ids():
            self.personas.get(persona_id)
        classifier_from_settings(self.settings)

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

    def pool_factories(self) -> dict[str, Callable[[Settings], Callable[[Any], TurnScore]]]:
        """The scoring pool's scorer of alignment turns (`ALIGNMENT_TURN`), carrying the
        personas' example vectors and the trait classifier (what needs the embedder):
        the child loads the rest (personas, safety patterns) from the settings."""
        embedded = {persona_id: self.personas.get(persona_id) for persona_id in self.personas.ids()}
        vectors = {pid: persona.example_vectors for pid, persona in embedded.items()}
        classifiers = {pid: persona.trait_classifier for pid, persona in embedded.items()}
        safety = classifier_from_settings(self.settings)  # trained here once, not per child
        return {ALIGNMENT_TURN: partial(alignment_turn_scorer, vectors, classifiers, safety)}

    # ------------------------------------------------------------ shared

    def versions(self, suite: str) -> Versions:
        """The `versions` of the suite's results (built once per suite, not per result)."""
        versions = self._versions.get(suite)
        if versions is None:
            versions = self._versions[suite] = registry.get(suite).versions(self.settings)
        return versions


def alignment_turn_scorer(
    vectors: Mapping[str, np.ndarray | None],
    classifiers: Mapping[str, TraitClassifier | None],
    safety: SafetyClassifier | None,
    settings: Settings,
) -> Callable[[Any], TurnScore]:
    """A scorer of `(persona_id, text, vector)` turns (a `TurnScore`), for the scoring
    pool's children: personas and safety patterns from the settings, with the example
    vectors, trait classifier and safety classifier (None: disabled) the caller made."""
    personas = {
        persona.id: replace(
            persona,
            example_vectors=vectors.get(persona.id),
            trait_classifier=classifiers.get(persona.id),
        )
        for persona in personas_from_settings(settings).values()
    }
    patterns = patterns_from_settings(settings)

    def score(turn: Any) -> TurnScore:
        persona_id, text, vector = turn
        persona = personas.get(persona_id)
        if persona is None:
            raise Rejected(UNKNOWN_PERSONA, f"unknown persona {persona_id!r}")
        return score_turn(text, persona, vector, settings, patterns, safety)

    return score

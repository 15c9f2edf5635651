"""The alignment suite as the streaming session stage uses it: its `SessionSuite`.

Loaded once by the spec's `sessions` from the `alignment` section (personas, safety
patterns, the embedder; a bad one is a `ConfigError` at start, not a dead letter per
record). Turns are scored in the scoring pool by `alignment_turn_scorer` (`ALIGNMENT_TURN`),
sessions here when they close, with the judge's verdict when one is configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from schemas.envelope import AlignmentRecord, AlignmentSessionPayload, AlignmentTurnPayload
from worker.gates.early import EarlyTurns, early_key, is_sampled
from worker.input.rejections import INVALID_RECORD, UNKNOWN_PERSONA, Rejected
from worker.settings_base import SESSION_TEXT_BYTES
from worker.suites.alignment.embedding_model import Embedder, embedder_from_settings
from worker.suites.alignment.judge_verdict import with_verdict
from worker.suites.alignment.language import shipped_identifier
from worker.suites.alignment.personas import Persona, PersonaCatalog, personas_from_settings
from worker.suites.alignment.safety_files import patterns_from_settings
from worker.suites.alignment.scoring import (
    SessionState,
    TurnSafety,
    TurnScore,
    classifier_from_settings,
    safety_only_turn,
    score_safety_many,
    score_session,
    score_turn,
    session_transcript,
    turn_scored,
)
from worker.suites.alignment.settings import AlignmentSettings
from worker.suites.alignment.trait_model import TraitClassifier
from worker.suites.base import Scored, SessionTiming, TurnInput, forward_key

if TYPE_CHECKING:  # scikit-learn is imported only where the classifier is used
    from worker.suites.alignment.judge_client import SafetyJudge
    from worker.suites.alignment.safety import SafetyPatterns
    from worker.suites.alignment.safety_classifier import SafetyClassifier

log = logging.getLogger("scorestream")

# The scoring pool's name for alignment turns: payload (persona_id, text, vector).
ALIGNMENT_TURN = "alignment:turn"
# And for the score stage's sample of records judged early (`worker.gates.early`).
ALIGNMENT_EARLY = early_key("alignment")
ALIGNMENT_FORWARD = forward_key("alignment")


class AlignmentSessions:
    """Alignment sessions for the streaming worker (see `worker.suites.base.SessionSuite`)."""

    record_model = AlignmentRecord
    pool_scorer = ALIGNMENT_TURN

    def __init__(
        self,
        settings: AlignmentSettings,
        text_budget: int = SESSION_TEXT_BYTES,
        embedder: Embedder | None = None,
    ) -> None:
        self.settings = settings
        self.text_budget = text_budget  # limits.session_text_bytes
        self._embedder = embedder

    # Loaded on first use: a worker that does not score alignment (`suites`) loads none
    # of them; one that does loads them all before it is ready (`ScoringSuites.load`,
    # `warm_up`), so its first turn waits for nothing.
    @cached_property
    def embedder(self) -> Embedder:
        return self._embedder or embedder_from_settings(self.settings)

    @cached_property
    def personas(self) -> PersonaCatalog:
        return PersonaCatalog.from_settings(self.settings, self.embedder)

    @cached_property
    def patterns(self) -> SafetyPatterns:
        return patterns_from_settings(self.settings)

    def timing(self, section: AlignmentSettings) -> SessionTiming:
        return SessionTiming(section.session_idle_timeout, section.embedding.max_lag)

    # ------------------------------------------------------------ texts and vectors

    def texts(self, payload: Mapping[str, Any]) -> list[str]:
        """The assistant texts of a turn (one) or of a whole session, in order."""
        if "turns" in payload:
            return [turn["assistant"] for turn in payload["turns"]]
        return [payload["text"]]

    def pool_item(self, payload: Mapping[str, Any], text: str, vector: Any) -> Any:
        return (str(payload.get("persona_id", "")), text, vector)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One encode call for a micro-batch (runs in the embedding executor)."""
        return self.embedder.encode(list(texts))

    def check(self, payload: Any) -> None:
        """Reject a record whose persona is not configured."""
        self.check_persona(payload.persona_id)

    def check_persona(self, persona_id: str) -> None:
        if persona_id not in self.personas:
            raise unknown_persona(persona_id, self.personas.ids())

    # ------------------------------------------------------------ sessions

    def session_id(self, payload: AlignmentTurnPayload | AlignmentSessionPayload) -> str:
        return payload.session_id

    def turns(
        self, payload: AlignmentTurnPayload | AlignmentSessionPayload
    ) -> tuple[list[TurnInput], bool]:
        if isinstance(payload, AlignmentSessionPayload):
            whole = [
                TurnInput(index, turn.assistant, turn.user)
                for index, turn in enumerate(payload.turns)
            ]
            return whole, True
        turn = TurnInput(payload.turn_index, payload.text, payload.user or "", payload.final)
        return [turn], False

    def open(self, payload: AlignmentTurnPayload | AlignmentSessionPayload) -> SessionState:
        return self.new_session(payload.session_id, payload.persona_id)

    def new_session(self, session_id: str, persona_id: str) -> SessionState:
        return SessionState.new(session_id, persona_id, self.settings, self.text_budget)

    def check_turn(self, state: SessionState, payload: AlignmentTurnPayload) -> None:
        if state.persona_id != payload.persona_id:
            raise Rejected(
                INVALID_RECORD,
                f"turn of persona {payload.persona_id!r} in session {payload.session_id!r} "
                f"of persona {state.persona_id!r}",
            )

    def add(
        self, state: SessionState, turn: TurnInput, scored: TurnScore, vector: Any, now: float
    ) -> None:
        state.add(turn.index, scored, vector, turn.text, turn.final, now, user=turn.user)

    def dump(self, state: SessionState) -> Any:
        return state.to_json()

    def restore(self, stored: Any) -> SessionState:
        return SessionState.from_json(stored)

    def is_complete(self, state: SessionState, final_index: int | None) -> bool:
        if final_index is None:
            return False
        expected = min(final_index + 1, state.max_turns)
        return sum(1 for index in state.turns if index <= final_index) >= expected

    def turn_count(self, state: SessionState) -> int:
        return len(state.turns)

    def state_session_id(self, state: SessionState) -> str:
        return state.session_id

    def turn_scored(self, scored: TurnScore) -> Scored:
        return turn_scored(scored)

    # ------------------------------------------------------------ scoring

    def score_turn(
        self, turn: AlignmentTurnPayload | tuple[str, str], vector: np.ndarray
    ) -> TurnScore:
        persona_id, text = (
            (turn.persona_id, turn.text) if isinstance(turn, AlignmentTurnPayload) else turn
        )
        return score_turn(text, self.personas.get(persona_id), vector, self.settings, self.patterns)

    def make_judge(self, on_error: Callable[[str], None]) -> SafetyJudge | None:
        judge = self.settings.judge
        if judge is None:
            return None
        # the HTTP client (httpx) is imported only when a judge is configured
        from worker.suites.alignment.judge_client import SafetyJudge

        return SafetyJudge(judge, on_error=on_error)

    async def score_session(self, state: SessionState, judge: SafetyJudge | None = None) -> Scored:
        """Session scores, with the judge's verdict when one is configured; an unusable
        verdict is recorded on the session (`judge: error`) and, with `judge.on_error:
        review`, makes its label at least Review (the judge counts it)."""
        judge_settings = self.settings.judge
        if judge is None or judge_settings is None:
            return score_session(state, self.settings)
        verdict = await judge.judge(session_transcript(state))
        scored = score_session(state, self.settings, verdict.score)
        return with_verdict(scored, verdict, judge_settings.on_error)

    def check_configuration(self) -> None:
        """Read the personas and a configured safety pattern file (a `ConfigError` names
        the bad one). The shipped patterns are not read here: this process never matches
        them (its scoring processes do, from their fork server, which loads them), and
        compiling them is half a second before the worker can start joining its group."""
        _ = self.personas
        if self.settings.safety_patterns:
            _ = self.patterns

    def warm_up(self) -> None:
        """Load the model, embed every persona's examples and train the safety classifier
        (when enabled) before traffic arrives."""
        for persona_id in self.personas.ids():
            self.personas.get(persona_id)
        classifier_from_settings(self.settings)

    def pool_factories(self) -> dict[str, Callable[[Any], Callable[..., Any]]]:
        """The scoring pool's scorer of alignment turns (`ALIGNMENT_TURN`), carrying the
        personas' example vectors and the trait classifier (what needs the embedder):
        the child loads the rest (personas, safety patterns) from the section; and the
        judge of the score stage's early sample (`ALIGNMENT_EARLY`); and the forwarder
        (`ALIGNMENT_FORWARD`), which knows the personas' ids."""
        embedded = {persona_id: self.personas.get(persona_id) for persona_id in self.personas.ids()}
        vectors = {pid: persona.example_vectors for pid, persona in embedded.items()}
        classifiers = {pid: persona.trait_classifier for pid, persona in embedded.items()}
        safety = classifier_from_settings(self.settings)  # trained here once, not per child
        return {
            ALIGNMENT_TURN: partial(alignment_turn_scorer, vectors, classifiers, safety),
            ALIGNMENT_EARLY: partial(alignment_early_judge, safety),
            ALIGNMENT_FORWARD: partial(AlignmentForwarder.for_section, tuple(embedded)),
        }


def load_sessions(
    settings: AlignmentSettings, text_budget: int, embedder: Embedder | None = None
) -> AlignmentSessions:
    """The spec's `sessions` loader."""
    return AlignmentSessions(settings, text_budget, embedder)


def prepare_turn_scoring(settings: AlignmentSettings, prefilter: bool = True) -> SafetyPatterns:
    """The configured safety patterns with their prefilter built, and the language
    identifier loaded: what a turn's first scoring would otherwise wait for. Done where
    the scorers are made (a child forked from a process that did it inherits them; the
    fork server holds the shipped ones: `worker.suites.alignment.preload`). Without
    `prefilter` (a few short turns to score: `scorestream score` of a session), the
    patterns match them one by one instead (`safety.DIRECT_BUDGET_CHARS`)."""
    patterns = patterns_from_settings(settings)
    if prefilter:
        patterns.prepare()
    shipped_identifier()
    return patterns


def alignment_turn_scorer(
    vectors: Mapping[str, np.ndarray | None],
    classifiers: Mapping[str, TraitClassifier | None],
    safety: SafetyClassifier | None,
    settings: AlignmentSettings,
    prefilter: bool = True,
) -> AlignmentTurnScorer:
    """A scorer of `(persona_id, text, vector)` turns (a `TurnScore`), for the scoring
    pool's children: personas and safety patterns from the `alignment` section, with the
    example vectors, trait classifier and safety classifier (None: disabled) the caller
    made. A turn without a vector (sampled out of embedding under overload) gets its
    safety only. `prefilter`: as `prepare_turn_scoring`."""
    personas = {
        persona.id: replace(
            persona,
            example_vectors=vectors.get(persona.id),
            trait_classifier=classifiers.get(persona.id),
        )
        for persona in personas_from_settings(settings).values()
    }
    patterns = prepare_turn_scoring(settings, prefilter)
    return AlignmentTurnScorer(personas, settings, patterns, safety)


def alignment_early_judge(
    safety: SafetyClassifier | None, settings: AlignmentSettings
) -> AlignmentEarlyJudge:
    """The judge of the score stage's sample (`ALIGNMENT_EARLY`): each turn's safety
    alone, as a turn sampled out of embedding gets it."""
    return AlignmentEarlyJudge(alignment_turn_scorer({}, {}, safety, settings))


def unknown_persona(persona_id: str, known: Sequence[str]) -> Rejected:
    """The rejection of a record whose persona is not configured."""
    listed = ", ".join(known)
    return Rejected(UNKNOWN_PERSONA, f"unknown persona {persona_id!r} (known: {listed})")


class AlignmentForwarder:
    """The scoring processes' `SessionSuite.check` and `session_id` of an alignment
    record (`ALIGNMENT_FORWARD`), so that the score stage forwards it without decoding
    it again."""

    def __init__(self, persona_ids: Sequence[str]) -> None:
        self.persona_ids = list(persona_ids)
        self._known = frozenset(persona_ids)

    @classmethod
    def for_section(cls, persona_ids: Sequence[str], _: AlignmentSettings) -> AlignmentForwarder:
        return cls(persona_ids)

    def __call__(self, record: AlignmentRecord) -> str:
        persona_id = record.payload.persona_id
        if persona_id not in self._known:
            raise unknown_persona(persona_id, self.persona_ids)
        return record.payload.session_id


class AlignmentEarlyJudge:
    """Picks an alignment record's turns for the score stage's sample
    (`worker.gates.early.is_sampled`), and judges a chunk's picks for safety at once; the
    session stage scores every turn in full later."""

    def __init__(self, turns: AlignmentTurnScorer) -> None:
        self.turns = turns

    def __call__(self, record: AlignmentRecord, share: float) -> EarlyTurns:
        """The record's turn count, with its turns pending judgement when sampled."""
        payload = record.payload
        if isinstance(payload, AlignmentSessionPayload):
            texts = [turn.assistant for turn in payload.turns]
        else:
            texts = [payload.text]
        if not is_sampled(record.id, share):
            return EarlyTurns(len(texts), None)
        return EarlyTurns(len(texts), None, [(payload.persona_id, text, None) for text in texts])

    def judge(self, items: list[Any]) -> list[dict[str, float | None] | None]:
        """Each pending turn's scores (None: it could not be judged, e.g. an unknown
        persona, which the stage reports itself; a failure loses only the early verdict),
        the classifier reading them all at once."""
        if len(items) > 1:
            try:
                self.turns.prepare(items)
            except Exception:  # each turn then reads its own text
                log.warning("early sample: reading %d turns together failed", len(items))
        judged: list[dict[str, float | None] | None] = []
        for item in items:
            try:
                judged.append(self.turns(item).scores())
            except Exception:
                judged.append(None)
        return judged


class AlignmentTurnScorer:
    """Scores `(persona_id, text, vector)` turns one by one; `prepare` first reads a
    chunk's turns' safety at once (the classifier's numpy steps once per chunk, not per
    turn), and each turn then takes its own."""

    def __init__(
        self,
        personas: Mapping[str, Persona],
        settings: AlignmentSettings,
        patterns: SafetyPatterns,
        classifier: SafetyClassifier | None,
    ) -> None:
        self.personas = personas
        self.settings = settings
        self.patterns = patterns
        self.classifier = classifier
        self._prepared: dict[str, TurnSafety] = {}

    def prepare(self, turns: Sequence[Any]) -> None:
        """The safety of these turns' texts, kept for their `__call__` (replacing what an
        earlier chunk left): each distinct text is read once, however many of the chunk's
        turns repeat it (a templated refusal, a retried request)."""
        texts = list(dict.fromkeys(turn[1] for turn in turns if _is_turn(turn)))
        found = score_safety_many(texts, self.settings, self.patterns, self.classifier)
        self._prepared = dict(zip(texts, found, strict=True))

    def __call__(self, turn: Any) -> TurnScore:
        persona_id, text, vector = turn
        persona = self.personas.get(persona_id)
        if persona is None:
            raise Rejected(UNKNOWN_PERSONA, f"unknown persona {persona_id!r}")
        # kept, not taken: a later turn of the chunk may repeat the text
        safety = self._prepared.get(text) if isinstance(text, str) else None
        if vector is None:
            return safety_only_turn(
                text, persona_id, self.settings, self.patterns, self.classifier, safety
            )
        return score_turn(
            text, persona, vector, self.settings, self.patterns, self.classifier, safety
        )

    def scored(self, turn: TurnScore) -> Scored:
        """The result of a turn it scored (`AlignmentSessions.turn_scored`), for the child
        to write the turn's result (`scored_records.Framed`)."""
        return turn_scored(turn)


def _is_turn(turn: Any) -> bool:
    return isinstance(turn, tuple) and len(turn) == 3 and isinstance(turn[1], str)

"""`scorestream score --suite alignment`: sessions from turn rows or envelopes, one report.

Rows are Alignmenter-style turns `{session_id, turn_index, role, text, persona_id}` (role
`user` or `assistant`), or envelope payloads (one assistant turn, or a whole session).
Turns are grouped by session, ordered by `turn_index`, and a repeated index counts once.
All assistant texts are embedded in one call; every session is then scored with the same
pure functions the streaming worker uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from schemas._base import PayloadModel
from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from worker.input.unknown_fields import with_unknown_fields
from worker.settings_base import ConfigError
from worker.suites.alignment.aggregate import AlignmentAggregator
from worker.suites.alignment.embedding_model import Embedder, embedder_from_settings
from worker.suites.alignment.judge_verdict import JudgeVerdict, with_verdict
from worker.suites.alignment.personas import PersonaCatalog, personas_from_settings
from worker.suites.alignment.render import AlignmentBatchReport
from worker.suites.alignment.safety_files import patterns_from_settings
from worker.suites.alignment.scoring import (
    SessionState,
    TurnScore,
    score_session,
    score_turn,
    session_transcript,
)
from worker.suites.alignment.spec import SESSION_METRICS
from worker.suites.base import BatchItem, BatchOptions, Scored

if TYPE_CHECKING:
    from worker.suites.alignment.judge_client import JudgeStats
    from worker.suites.alignment.settings import AlignmentSettings

# (persona_id, text, sentence vector) of each turn and its "file:line" -> a score, or
# the reason it has none, per turn.
TurnScorer = Callable[[list[tuple[str, str, Any]], list[str]], Sequence["TurnScore | str"]]


class AlignmentTurnRow(PayloadModel):
    """A native alignment row: one user or assistant message of a session."""

    session_id: str = Field(min_length=1)
    turn_index: int = Field(ge=0)
    role: Literal["user", "assistant"]
    text: str = Field(min_length=1)
    persona_id: str = Field(min_length=1)
    final: bool = False


@dataclass
class _AssistantTurn:
    text: str
    user: str
    item_id: str
    source: str
    unknown_fields: tuple[str, ...] = ()


@dataclass
class _SessionDraft:
    session_id: str
    persona_id: str
    model: str | None
    labels: dict[str, str]
    assistant: dict[int, _AssistantTurn] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=dict)
    duplicates: int = 0

    def add_assistant(self, index: int, turn: _AssistantTurn) -> None:
        if index in self.assistant:
            self.duplicates += 1
        else:
            self.assistant[index] = turn

    def user_before(self, index: int) -> str:
        """The last user message after the previous assistant turn, up to `index`."""
        previous = max((i for i in self.assistant if i < index), default=-1)
        candidates = [i for i in self.users if previous < i <= index]
        return self.users[max(candidates)] if candidates else ""


class AlignmentBatchScorer:
    """Scores alignment rows offline with the streaming worker's pure functions."""

    def __init__(
        self, settings: AlignmentSettings, options: BatchOptions, embedder: Embedder | None = None
    ) -> None:
        self.settings = settings
        self.options = options
        if options.judge and settings.judge is None:
            raise ConfigError("--judge needs an alignment.judge section in the configuration")
        self.embedder: Embedder = embedder or embedder_from_settings(settings)
        self.catalog = PersonaCatalog(personas_from_settings(settings), self.embedder)
        self.patterns = patterns_from_settings(settings)
        # Scores the turns elsewhere (the `score` command: in the scoring pool, each under
        # `limits.scoring_deadline`); a text in place of a score is why a turn has none.
        self.turn_scorer: TurnScorer | None = None

    def native_payload(self, row: dict[str, Any]) -> AlignmentTurnRow:
        payload = AlignmentTurnRow.model_validate(row)
        self._check_persona(payload.persona_id)
        return payload

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        if "session_id" in row and "turn_index" in row:
            return f"{row['session_id']}:{row['turn_index']}:{row.get('role', 'assistant')}"
        return fallback

    def _check_persona(self, persona_id: str) -> None:
        if persona_id not in self.catalog:
            known = ", ".join(self.catalog.ids())
            raise ValueError(f"persona_id: unknown persona {persona_id!r} (known: {known})")

    def _collect(
        self, items: list[BatchItem], errors: list[dict[str, str]]
    ) -> dict[str, _SessionDraft]:
        drafts: dict[str, _SessionDraft] = {}
        for item in items:
            payload = item.payload
            if not isinstance(
                payload, AlignmentTurnRow | AlignmentTurnPayload | AlignmentSessionPayload
            ):
                errors.append(
                    {"source": item.source, "id": item.id, "message": "not an alignment row"}
                )
                continue
            try:
                self._check_persona(payload.persona_id)
            except ValueError as exc:
                errors.append({"source": item.source, "id": item.id, "message": str(exc)})
                continue
            draft = drafts.get(payload.session_id)
            if draft is None:
                draft = _SessionDraft(
                    payload.session_id, payload.persona_id, item.model, dict(item.labels)
                )
                drafts[payload.session_id] = draft
            elif draft.persona_id != payload.persona_id:
                message = (
                    f"persona_id: session {payload.session_id!r} belongs to persona "
                    f"{draft.persona_id!r}, this row says {payload.persona_id!r}"
                )
                errors.append({"source": item.source, "id": item.id, "message": message})
                continue
            if isinstance(payload, AlignmentSessionPayload):
                for index, turn in enumerate(payload.turns):
                    draft.add_assistant(
                        index,
                        _AssistantTurn(
                            turn.assistant, turn.user, item.id, item.source, item.unknown_fields
                        ),
                    )
            elif isinstance(payload, AlignmentTurnPayload):
                turn_data = _AssistantTurn(
                    payload.text, payload.user or "", item.id, item.source, item.unknown_fields
                )
                draft.add_assistant(payload.turn_index, turn_data)
            elif payload.role == "assistant":
                turn_data = _AssistantTurn(
                    payload.text, "", item.id, item.source, item.unknown_fields
                )
                draft.add_assistant(payload.turn_index, turn_data)
            else:
                draft.users.setdefault(payload.turn_index, payload.text)
        return {key: draft for key, draft in drafts.items() if draft.assistant}

    def score(self, items: list[BatchItem]) -> AlignmentBatchReport:
        errors: list[dict[str, str]] = []
        drafts = self._collect(items, errors)
        ordered = [(draft, index) for draft in drafts.values() for index in sorted(draft.assistant)]
        vectors = self.embedder.encode([draft.assistant[index].text for draft, index in ordered])
        scored_turns = self._score_turns(ordered, vectors)
        states: dict[str, SessionState] = {}
        turns: list[dict[str, Any]] = []
        for (draft, index), vector, scored in zip(ordered, vectors, scored_turns, strict=True):
            turn = draft.assistant[index]
            if isinstance(scored, str):
                errors.append({"source": turn.source, "id": turn.item_id, "message": scored})
                continue
            user = turn.user or draft.user_before(index)
            state = states.get(draft.session_id)
            if state is None:
                state = SessionState.new(
                    draft.session_id,
                    draft.persona_id,
                    self.settings,
                    self.options.session_text_bytes,
                )
                state.duplicates = draft.duplicates
                states[draft.session_id] = state
            state.add(index, scored, vector, text=turn.text, user=user)
            turns.append(
                {
                    "id": turn.item_id,
                    "session_id": draft.session_id,
                    "turn_index": index,
                    "persona_id": draft.persona_id,
                    "scores": scored.scores(),
                    "details": with_unknown_fields(
                        Scored(scores={}, details=scored.details()), turn.unknown_fields
                    ).details,
                }
            )
        verdicts, judge_stats = self._judge(states)
        judge_settings = self.settings.judge
        aggregator = AlignmentAggregator()
        figures_state = aggregator.initialise()
        sessions: list[dict[str, Any]] = []
        for session_id, state in states.items():
            verdict = verdicts.get(session_id)
            result = score_session(state, self.settings, verdict.score if verdict else None)
            if verdict is not None and judge_settings is not None:
                result = with_verdict(result, verdict, judge_settings.on_error)
            figures_state = aggregator.update(figures_state, result)
            sessions.append(self._session_entry(drafts[session_id], state, result))
        return AlignmentBatchReport(
            sessions=sessions,
            turns=turns,
            errors=errors,
            figures=aggregator.figures(figures_state),
            judge=judge_stats.to_json() if judge_stats else None,
        )

    def _score_turns(
        self, ordered: list[tuple[_SessionDraft, int]], vectors: Any
    ) -> Sequence[TurnScore | str]:
        if self.turn_scorer is not None:
            return self.turn_scorer(
                [
                    (draft.persona_id, draft.assistant[index].text, vector)
                    for (draft, index), vector in zip(ordered, vectors, strict=True)
                ],
                [draft.assistant[index].source for draft, index in ordered],
            )
        return [
            score_turn(
                draft.assistant[index].text,
                self.catalog.get(draft.persona_id),
                vector,
                self.settings,
                self.patterns,
            )
            for (draft, index), vector in zip(ordered, vectors, strict=True)
        ]

    @staticmethod
    def _session_entry(draft: _SessionDraft, state: SessionState, result: Scored) -> dict:
        return {
            "session_id": state.session_id,
            "persona_id": state.persona_id,
            "model": draft.model,
            "labels": draft.labels,
            "turns": len(state.turns),
            "scores": {metric: result.scores.get(metric) for metric in SESSION_METRICS},
            "grade": result.grade,
            "label": result.label,
            "details": result.details,
        }

    def _judge(
        self, states: dict[str, SessionState]
    ) -> tuple[dict[str, JudgeVerdict], JudgeStats | None]:
        """The judge's verdict on each session (none without `--judge`)."""
        judge_settings = self.settings.judge
        if not self.options.judge or judge_settings is None or not states:
            return {}, None
        session_ids = list(states)
        from worker.suites.alignment.judge_client import SafetyJudge  # httpx: only with --judge

        async def run() -> tuple[list[JudgeVerdict], JudgeStats]:
            async with SafetyJudge(judge_settings) as judge:
                transcripts = [session_transcript(states[s]) for s in session_ids]
                return await judge.judge_many(transcripts), judge.stats

        verdicts, stats = asyncio.run(run())
        return dict(zip(session_ids, verdicts, strict=True)), stats


def make_batch_scorer(
    settings: AlignmentSettings, options: BatchOptions, embedder: Embedder | None = None
) -> AlignmentBatchScorer:
    """The `BatchScorer` of the alignment suite (`embedder` defaults to all-MiniLM-L6-v2)."""
    return AlignmentBatchScorer(settings, options, embedder)

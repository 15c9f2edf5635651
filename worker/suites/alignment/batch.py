"""`scorestream score --suite alignment`: sessions from turn rows or envelopes, one report.

Rows are Alignmenter-style turns `{session_id, turn_index, role, text, persona_id}` (role
`user` or `assistant`), or envelope payloads (one assistant turn, or a whole session).
Turns are grouped by session, ordered by `turn_index`, and a repeated index counts once.
All assistant texts are embedded in one call; every session is then scored with the same
pure functions the streaming worker uses.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field
from rich.console import Console
from rich.table import Table

from schemas._base import PayloadModel
from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from worker.settings_base import ConfigError
from worker.stats import bootstrap_ci
from worker.suites.alignment.embedding import Embedder, embedder_from_settings
from worker.suites.alignment.judge import JudgeStats, SafetyJudge
from worker.suites.alignment.personas import PersonaCatalog, personas_from_settings
from worker.suites.alignment.safety import patterns_from_settings
from worker.suites.alignment.scoring import (
    SESSION_METRICS,
    AlignmentAggregator,
    SessionState,
    score_session,
    score_turn,
    session_transcript,
)
from worker.suites.base import BatchItem, BatchOptions, Scored, grade_for
from worker.unknown_fields import with_unknown_fields

if TYPE_CHECKING:
    from worker.config import Settings

SUMMARY_METRICS = ("authenticity", "safety", "stability", "overall")


class AlignmentTurnRow(PayloadModel):
    """A native alignment row: one user or assistant message of a session."""

    session_id: str = Field(min_length=1)
    turn_index: int = Field(ge=0)
    role: Literal["user", "assistant"]
    text: str
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


def metric_summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, 95% bootstrap CI of the mean (seeded), population std and count."""
    if not values:
        return {"mean": None, "ci_low": None, "ci_high": None, "std": None, "n": 0}
    data = np.asarray(values, dtype=float)
    low, high = bootstrap_ci(list(data))
    return {
        "mean": float(data.mean()),
        "ci_low": low,
        "ci_high": high,
        "std": float(data.std()),
        "n": int(data.size),
    }


def format_estimate(summary: dict[str, Any]) -> str:
    """`0.83 ± 0.04 [0.79, 0.87]` (± is the CI's half-width)."""
    mean, low, high = summary.get("mean"), summary.get("ci_low"), summary.get("ci_high")
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {(high - low) / 2:.2f} [{low:.2f}, {high:.2f}]"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@dataclass
class AlignmentBatchReport:
    """The alignment report of one `score` run."""

    sessions: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    errors: list[dict[str, str]]
    figures: dict[str, Any]
    judge: dict[str, Any] | None = None

    def _summary_of(self, sessions: Sequence[dict[str, Any]]) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        for metric in SESSION_METRICS:
            values = [s["scores"][metric] for s in sessions if s["scores"][metric] is not None]
            summary[metric] = metric_summary(values)
        summary["grade"] = grade_for(summary["overall"]["mean"])
        summary["sessions"] = len(sessions)
        summary["turns"] = sum(s["turns"] for s in sessions)
        return summary

    def summary(self) -> dict[str, Any]:
        return self._summary_of(self.sessions)

    def by_persona(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for session in self.sessions:
            groups[session["persona_id"]].append(session)
        return {persona: self._summary_of(groups[persona]) for persona in sorted(groups)}

    def to_json(self) -> dict[str, Any]:
        return {
            "report_type": "alignment",
            "summary": self.summary(),
            "by_persona": self.by_persona(),
            "figures": self.figures,
            "sessions": self.sessions,
            "turns": self.turns,
            "errors": self.errors,
            "judge": self.judge,
        }

    def render_console(self, console: Console, verbose: bool = False) -> None:
        table = Table(title="Brand voice alignment (95% bootstrap CI over sessions)")
        table.add_column("persona")
        table.add_column("sessions", justify="right")
        for metric in SUMMARY_METRICS:
            table.add_column(metric)
        table.add_column("grade", justify="center")
        rows = [*self.by_persona().items(), ("all", self.summary())]
        for name, summary in rows:
            table.add_row(
                name,
                str(summary["sessions"]),
                *(format_estimate(summary[metric]) for metric in SUMMARY_METRICS),
                summary["grade"] or "-",
                end_section=name == rows[-2][0] if len(rows) > 1 else False,
            )
        console.print(table)
        sessions = Table(title="Sessions")
        for column in ("session", "persona", "turns", *SUMMARY_METRICS, "grade", "violations"):
            sessions.add_column(column)
        for session in self.sessions:
            scores = session["scores"]
            sessions.add_row(
                session["session_id"],
                session["persona_id"],
                str(session["turns"]),
                *(_fmt(scores[metric]) for metric in SUMMARY_METRICS),
                session["grade"] or "-",
                str(len(session["details"]["violations"])),
            )
        console.print(sessions)
        for session in self.sessions:
            note = session["details"].get("stability_note")
            if note:
                console.print(f"note: {session['session_id']}: {note}", highlight=False)
        if verbose:
            for turn in self.turns:
                details = turn["details"]
                console.print(
                    f"{turn['session_id']}#{turn['turn_index']}: "
                    f"style {_fmt(turn['scores']['style_sim'])}, "
                    f"traits {_fmt(turn['scores']['traits'])} "
                    f"(mismatched: {', '.join(details['mismatched_traits']) or 'none'}), "
                    f"lexicon {_fmt(turn['scores']['lexicon'])}"
                )
        for session in self.sessions:
            for violation in session["details"]["violations"]:
                console.print(
                    f"[red]violation[/red] {session['session_id']}#{violation['turn_index']}: "
                    f"{violation['category']} ({violation['severity']}): "
                    f"{violation['match']!r}"
                )
        if self.judge:
            console.print(f"judge: {self.judge}")
        for error in self.errors:
            console.print(f"[red]error[/red] {error['source']}: {error['message']}")

    def to_markdown(self) -> str:
        lines = ["# Brand voice alignment report", ""]
        summary = self.summary()
        lines += [
            f"{summary['sessions']} sessions, {summary['turns']} assistant turns, "
            f"overall grade **{summary['grade'] or '-'}**. Means with 95% bootstrap CIs "
            "over sessions.",
            "",
            "| persona | sessions | " + " | ".join(SUMMARY_METRICS) + " | grade |",
            "| --- | ---: | " + " | ".join("---" for _ in SUMMARY_METRICS) + " | :---: |",
        ]
        for name, group in [*self.by_persona().items(), ("**all**", summary)]:
            cells = " | ".join(format_estimate(group[metric]) for metric in SUMMARY_METRICS)
            lines.append(f"| {name} | {group['sessions']} | {cells} | {group['grade'] or '-'} |")
        lines += ["", "## Sessions", ""]
        lines.append("| session | persona | turns | " + " | ".join(SESSION_METRICS) + " | grade |")
        lines.append(
            "| --- | --- | ---: | " + " | ".join("---:" for _ in SESSION_METRICS) + " | :---: |"
        )
        for session in self.sessions:
            cells = " | ".join(_fmt(session["scores"][m]) for m in SESSION_METRICS)
            lines.append(
                f"| {session['session_id']} | {session['persona_id']} | {session['turns']} | "
                f"{cells} | {session['grade'] or '-'} |"
            )
        notes = [
            (session["session_id"], session["details"]["stability_note"])
            for session in self.sessions
            if session["details"].get("stability_note")
        ]
        if notes:
            lines += ["", "## Notes", ""]
            lines += [f"- `{session_id}`: {note}" for session_id, note in notes]
        violations = [
            (session["session_id"], violation)
            for session in self.sessions
            for violation in session["details"]["violations"]
        ]
        if violations:
            lines += ["", "## Safety violations", ""]
            for session_id, v in violations:
                lines.append(
                    f"- `{session_id}` turn {v['turn_index']}: {v['category']} "
                    f'({v["severity"]}): "{v["match"]}"'
                )
        if self.errors:
            lines += ["", "## Rows not scored", ""]
            lines += [f"- {error['source']}: {error['message']}" for error in self.errors]
        return "\n".join(lines) + "\n"

    def exit_code(self) -> int:
        """3 when a row could not be scored, else 1 when a session grades F, else 0."""
        if self.errors:
            return 3
        if any(session["grade"] == "F" for session in self.sessions):
            return 1
        return 0

    def report_stem(self) -> str:
        return "alignment_report"


class AlignmentBatchScorer:
    """Scores alignment rows offline with the streaming worker's pure functions."""

    def __init__(
        self, settings: Settings, options: BatchOptions, embedder: Embedder | None = None
    ) -> None:
        self.settings = settings
        self.options = options
        if options.judge and settings.alignment.judge is None:
            raise ConfigError("--judge needs an alignment.judge section in the configuration")
        self.embedder: Embedder = embedder or embedder_from_settings(settings)
        self.catalog = PersonaCatalog(personas_from_settings(settings), self.embedder)
        self.patterns = patterns_from_settings(settings)

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
        states: dict[str, SessionState] = {}
        turns: list[dict[str, Any]] = []
        for (draft, index), vector in zip(ordered, vectors, strict=True):
            persona = self.catalog.get(draft.persona_id)
            turn = draft.assistant[index]
            user = turn.user or draft.user_before(index)
            scored = score_turn(turn.text, persona, vector, self.settings, self.patterns)
            state = states.get(draft.session_id)
            if state is None:
                state = SessionState.new(draft.session_id, draft.persona_id, self.settings)
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
        judge_scores, judge_stats = self._judge(states)
        aggregator = AlignmentAggregator()
        figures_state = aggregator.initialise()
        sessions: list[dict[str, Any]] = []
        for session_id, state in states.items():
            result = score_session(state, self.settings, judge_scores.get(session_id))
            figures_state = aggregator.update(figures_state, result)
            sessions.append(self._session_entry(drafts[session_id], state, result))
        return AlignmentBatchReport(
            sessions=sessions,
            turns=turns,
            errors=errors,
            figures=aggregator.figures(figures_state),
            judge=judge_stats.to_json() if judge_stats else None,
        )

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
            "details": result.details,
        }

    def _judge(self, states: dict[str, SessionState]) -> tuple[dict[str, float], JudgeStats | None]:
        judge_settings = self.settings.alignment.judge
        if not self.options.judge or judge_settings is None or not states:
            return {}, None
        session_ids = list(states)

        async def run() -> tuple[list[float | None], JudgeStats]:
            async with SafetyJudge(judge_settings) as judge:
                transcripts = [session_transcript(states[s]) for s in session_ids]
                verdicts = await judge.judge_many(transcripts)
                return [verdict.score for verdict in verdicts], judge.stats

        scores, stats = asyncio.run(run())
        judged = {
            session_id: score
            for session_id, score in zip(session_ids, scores, strict=True)
            if score is not None and math.isfinite(score)
        }
        return judged, stats


def make_batch_scorer(
    settings: Settings, options: BatchOptions, embedder: Embedder | None = None
) -> AlignmentBatchScorer:
    """The `BatchScorer` of the alignment suite (`embedder` defaults to all-MiniLM-L6-v2)."""
    return AlignmentBatchScorer(settings, options, embedder)

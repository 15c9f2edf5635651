"""The scoring suites as the streaming worker uses them, loaded once at start.

`ScoringSuites.load(settings)` prepares every registered suite's case scorer (e.g. the
extraction event schemas) from its own settings section, and the `SessionSuite` of the
suite that keeps sessions (`registry.session_suite()`: alignment's personas, safety
patterns and embedder), so a bad one is a `ConfigError` at start, not a dead letter per
record. The score stage calls `score_case(suite, payload)`; the session stage uses
`sessions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.outputs import Versions
from worker.config import Settings
from worker.input.rejections import UNKNOWN_SUITE, Rejected
from worker.input.scored_records import suite_versions
from worker.scoring_pool import ScorerFactory, section_factory
from worker.suites import registry
from worker.suites.base import CaseScorer, Scored, SessionSuite


@dataclass
class ScoringSuites:
    """Everything the stream stages need to score, prepared once."""

    settings: Settings
    case_scorers: dict[str, CaseScorer]
    sessions: SessionSuite | None  # the suite that keeps sessions, when one is registered
    _versions: dict[str, Versions] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def load(cls, settings: Settings, embedder: Any | None = None) -> ScoringSuites:
        """`embedder`: the session suite's encoder (None: the one its section configures)."""
        session_spec = registry.session_suite()
        sessions = None
        if session_spec is not None and session_spec.sessions is not None:
            # Built even when this worker does not score the suite (`suites`): its stage
            # still passes event-time progress on; it then loads nothing.
            sessions = session_spec.sessions(
                session_spec.section(settings), settings.limits.session_text_bytes, embedder
            )
            if settings.scores(session_spec.name):
                sessions.check_configuration()
        return cls(
            settings=settings,
            case_scorers={
                spec.name: spec.case_scorer(spec.section(settings))
                for spec in registry.specs()
                if spec.case_scorer is not None and settings.scores(spec.name)
            },
            sessions=sessions,
        )

    # ------------------------------------------------------------ per-case suites

    def score_case(self, suite: str, payload: object) -> Scored:
        """Score one case of a suite scored case by case (raises `Rejected`)."""
        scorer = self.case_scorers.get(suite)
        if scorer is None:
            raise Rejected(UNKNOWN_SUITE, f"suite {suite!r} is not scored case by case")
        return scorer(payload)

    # ------------------------------------------------------------ sessions

    def check_session(self, payload: Any) -> None:
        """Reject a session record its suite cannot score (an unknown persona) before it
        is forwarded to the session stage."""
        if self.sessions is not None:
            self.sessions.check(payload)

    def embed(self, texts: list[str]) -> Any:
        """The session suite's encoder on `texts` (runs in the embedding executor)."""
        assert self.sessions is not None, "no suite keeps sessions"
        return self.sessions.embed(texts)

    def warm_up(self) -> None:
        """Load what the session suite's first records would wait for (the model, the
        personas' examples, the safety classifier), when this worker scores it."""
        if self._scores_sessions():
            assert self.sessions is not None
            self.sessions.warm_up()

    def _scores_sessions(self) -> bool:
        spec = registry.session_suite()
        return self.sessions is not None and spec is not None and self.settings.scores(spec.name)

    def pool_factories(self) -> dict[str, ScorerFactory]:
        """The scoring pool's scorers of session turns, each given its suite's section."""
        spec = registry.session_suite()
        if self.sessions is None or spec is None or not self._scores_sessions():
            return {}
        return {
            name: section_factory(spec.name, factory)
            for name, factory in self.sessions.pool_factories().items()
        }

    # ------------------------------------------------------------ shared

    def versions(self, suite: str) -> Versions:
        """The `versions` of the suite's results (built once per suite, not per result)."""
        return suite_versions(suite, self.settings, self._versions)


__all__ = ["ScoringSuites"]

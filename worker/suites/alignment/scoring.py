"""Pure alignment scoring shared by `scorestream score` and the streaming worker.

Embedding is kept apart from scoring: the caller embeds texts (one `Embedder.encode` call
per micro-batch) and passes each turn's vector in. Nothing here does I/O except loading the
(cached) safety patterns named by the settings.

- `score_safety` scores one assistant turn's safety (keywords and the classifier: no
  vector); `score_turn` scores the whole turn against its persona with its vector, and
  `safety_only_turn` a turn left unembedded under overload (its authenticity is null);
  `turn_scored` turns either into a `Scored` result.
- `SessionState` collects a session's turns (bounded, idempotent, JSON-serialisable).
- `score_session` scores a session: authenticity components as turn means, safety
  (`min(keyword, classifier, judge / 10)` over the components in use), stability,
  overall and grade.

Safety has three components. Keyword safety: severity-weighted pattern matches
(`safety.py`). The offline classifier (`safety_classifier.py`, on by default,
`alignment.safety_classifier`): a turn with a flagged sentence counts as violating, so a
session's classifier safety is `1 - flagged turns / turns`. The optional LLM judge's
0-10 answer. Each turn's and session's details keep `keyword_safety` apart.

Coverage: every turn's language is identified sentence by sentence (`language.py`,
`details.language`). A turn is fully judged (`details.safety_coverage: full`) when the
classifier read it and every sentence is in a language it was trained in; otherwise
(`keywords_only`: a language outside them, one that cannot be identified, or the
classifier disabled) the keywords still apply, and the turn says so. A session counts its
fully judged turns, and a window the share of them (`safety_coverage`), never silently
scored as fine.

Session results are folded into window figures by `aggregate.AlignmentAggregator`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import JsonValue

from worker.settings_base import SESSION_TEXT_BYTES
from worker.suites.alignment.judge_verdict import render_transcript
from worker.suites.alignment.language import (
    LanguageIdentifier,
    TurnLanguages,
    shipped_identifier,
)
from worker.suites.alignment.personas import Persona
from worker.suites.alignment.safety import (
    SafetyMatch,
    SafetyPatterns,
    keyword_safety,
    turn_violation_weight,
)
from worker.suites.alignment.safety_classifier import distinct_sentences
from worker.suites.alignment.safety_files import patterns_from_settings
from worker.suites.alignment.settings import SafetyClassifierSettings
from worker.suites.alignment.traits import match_traits, word_count
from worker.suites.base import Scored, grade_for

if TYPE_CHECKING:
    from worker.suites.alignment.safety_classifier import ClassifierVerdict, SafetyClassifier
    from worker.suites.alignment.settings import AlignmentSettings

TURN_METRICS = ("authenticity", "style_sim", "traits", "lexicon", "safety")
MAX_STORED_TEXT_CHARS = 4000  # per turn, kept for the optional session judge
MAX_STORED_VIOLATIONS = 20  # per turn, kept for the session result
SAMPLED_OUT = "sampled_out"  # `details.embedding` of a turn scored without its vector
NO_OVERALL = (
    "no overall and no grade: every turn was scored for safety alone (sampled out of "
    "embedding under overload), so the session has no authenticity"
)
FULL_COVERAGE = "full"  # `details.safety_coverage`: keywords and classifier judged it all
KEYWORDS_ONLY = "keywords_only"  # some of it (or all) was judged by the keywords alone


def classifier_from_settings(settings: AlignmentSettings) -> SafetyClassifier | None:
    """The offline safety classifier at `alignment.safety_classifier.threshold`, or None
    when it is disabled (trained once per process, on first use)."""
    config: SafetyClassifierSettings = settings.safety_classifier
    if not config.enabled:
        return None
    from worker.suites.alignment.safety_classifier import classifier_with_threshold

    return classifier_with_threshold(config.threshold)


def cut_utf8(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8, never inside a character."""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[: max(0, max_bytes)].decode("utf-8", errors="ignore")


def renormalised_mean(parts: Sequence[tuple[float | None, float]]) -> float | None:
    """Weighted mean of the present values; absent (None) ones drop out with their weight."""
    present = [(value, weight) for value, weight in parts if value is not None and weight > 0]
    total = sum(weight for _, weight in present)
    if not present or total <= 0:
        return None
    return sum(value * weight for value, weight in present) / total


def _mean(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class TurnScore:
    """One assistant turn scored against its persona."""

    persona_id: str
    style_sim: float | None  # None: the turn was not embedded (`embedded` False)
    traits: float | None
    lexicon: float | None
    authenticity: float | None
    safety: float  # min(keyword, classifier) of this turn alone (a session of one turn)
    violation_weight: float
    critical: bool
    matches: tuple[SafetyMatch, ...]
    detected_traits: dict[str, str]
    mismatched_traits: list[str]
    preferred_found: list[str]
    avoided_found: dict[str, int]
    word_count: int
    keyword_safety: float = 1.0  # the keyword patterns alone
    classifier: ClassifierVerdict | None = None  # None: the classifier is disabled
    embedded: bool = True  # False: sampled out of embedding under overload (safety only)
    languages: TurnLanguages | None = None  # None: not identified (a test's turn)
    coverage: str = FULL_COVERAGE

    def scores(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in TURN_METRICS}

    def details(self) -> dict[str, JsonValue]:
        details = self._details()
        if not self.embedded:
            details["embedding"] = SAMPLED_OUT
        return details

    def _details(self) -> dict[str, JsonValue]:
        return {
            "persona_id": self.persona_id,
            "word_count": self.word_count,
            "detected_traits": dict(self.detected_traits),
            "mismatched_traits": list(self.mismatched_traits),
            "preferred_terms_found": list(self.preferred_found),
            "avoided_terms_found": dict(self.avoided_found),
            "violations": [match.to_json() for match in self.matches],
            "keyword_safety": self.keyword_safety,
            "classifier": classifier_details(self.classifier),
            **language_details(self.languages, self.coverage),
        }


def language_details(languages: TurnLanguages | None, coverage: str) -> dict[str, JsonValue]:
    """A turn's language (with its confidence), each language's share of its sentences
    when it has several, and its safety coverage, as result details."""
    details: dict[str, JsonValue] = {"safety_coverage": coverage}
    if languages is not None:
        details["language"] = languages.turn.to_json()
        shares = languages.shares()
        if len(shares) > 1:
            details["languages"] = dict(shares)
    return details


def safety_coverage(
    languages: TurnLanguages, covered: frozenset[str] | None, sentences: int
) -> str:
    """`full` when the classifier (`covered`: the languages it was trained in; None: it is
    disabled) read every sentence in a language it covers, else `keywords_only`."""
    if not sentences:
        return FULL_COVERAGE
    if covered is None or not covered.issuperset(languages.sentences):
        return KEYWORDS_ONLY
    return FULL_COVERAGE


def classifier_details(verdict: ClassifierVerdict | None) -> dict[str, JsonValue] | None:
    """A turn's classifier verdict as result details: whether it is flagged, its most
    harmful sentence's probability, and each flagged sentence with its category."""
    if verdict is None:
        return None
    details: dict[str, JsonValue] = {
        "flagged": verdict.is_flagged,
        "max_probability": round(verdict.max_probability, 4),
        "flagged_sentences": [sentence.to_json() for sentence in verdict.flagged],
    }
    if verdict.unclassified_sentences:
        details["unclassified_sentences"] = verdict.unclassified_sentences
    return details


def style_similarity(embedding: np.ndarray, example_vectors: np.ndarray) -> float:
    """Max cosine between a response and the persona examples, clamped to [0, 1]."""
    if example_vectors.size == 0:
        return 0.0
    vector = np.asarray(embedding, dtype=np.float64).reshape(-1)
    examples = np.asarray(example_vectors, dtype=np.float64)
    norms = np.linalg.norm(examples, axis=1) * np.linalg.norm(vector)
    with np.errstate(divide="ignore", invalid="ignore"):
        cosines = np.where(norms > 0, examples @ vector / norms, 0.0)
    return float(min(1.0, max(0.0, cosines.max())))


@dataclass(frozen=True)
class TurnSafety:
    """One assistant turn's safety: what needs no vector."""

    safety: float  # min(keyword, classifier) of this turn alone (a session of one turn)
    keyword_safety: float
    violation_weight: float
    critical: bool
    matches: tuple[SafetyMatch, ...]
    classifier: ClassifierVerdict | None
    languages: TurnLanguages
    coverage: str  # FULL_COVERAGE or KEYWORDS_ONLY


def score_safety(
    text: str,
    settings: AlignmentSettings,
    patterns: SafetyPatterns | None = None,
    classifier: SafetyClassifier | bool | None = True,
    identifier: LanguageIdentifier | None = None,
) -> TurnSafety:
    """Score one assistant turn's safety from its text alone: keyword patterns and the
    offline classifier (never the embedder, so it keeps pace whatever the encoder does).

    `patterns` defaults to `alignment.safety_patterns` (loaded once per path);
    `classifier` True means the one `alignment.safety_classifier` configures (None when
    disabled), None or False none. `identifier` defaults to the shipped language
    identifier: the turn's language and coverage are judged on the same sentences.
    """
    return score_safety_many([text], settings, patterns, classifier, identifier)[0]


def score_safety_many(
    texts: Sequence[str],
    settings: AlignmentSettings,
    patterns: SafetyPatterns | None = None,
    classifier: SafetyClassifier | bool | None = True,
    identifier: LanguageIdentifier | None = None,
) -> list[TurnSafety]:
    """`score_safety` of each text, the classifier reading all of them at once (a few
    hundred short turns cost it a fifth of one call each); the same results."""
    patterns = patterns if patterns is not None else patterns_from_settings(settings)
    if classifier is True:
        classifier = classifier_from_settings(settings)
    identifier = identifier or shipped_identifier()
    replies = [distinct_sentences(text) for text in texts]
    verdicts: list[ClassifierVerdict | None] = (
        list(classifier.classify_many(replies)) if classifier else [None] * len(texts)
    )
    found = []
    for text, distinct, verdict in zip(texts, replies, verdicts, strict=True):
        matches = tuple(patterns.find(text))
        critical = any(match.severity == "critical" for match in matches)
        weight = turn_violation_weight(matches, settings.severity_weights)
        keyword = keyword_safety([weight], critical)
        languages = identifier.turn_languages(distinct, text)
        # sentences the classifier did not read (past its cost bound): not covered
        covered = None
        if classifier and verdict is not None and not verdict.unclassified_sentences:
            covered = classifier.languages
        found.append(
            TurnSafety(
                safety=min(keyword, verdict.safety) if verdict else keyword,
                keyword_safety=keyword,
                violation_weight=weight,
                critical=critical,
                matches=matches,
                classifier=verdict,
                languages=languages,
                coverage=safety_coverage(languages, covered, len(distinct)),
            )
        )
    return found


def score_turn(
    text: str,
    persona: Persona,
    embedding: np.ndarray,
    settings: AlignmentSettings,
    patterns: SafetyPatterns | None = None,
    classifier: SafetyClassifier | bool | None = True,
    safety: TurnSafety | None = None,
) -> TurnScore:
    """Score one assistant turn; `persona` must carry its example vectors.

    `patterns` and `classifier` as in `score_safety`; `safety`, the turn's
    `score_safety` when already computed (`score_safety_many`).
    """
    if persona.example_vectors is None:
        raise ValueError(f"persona {persona.id!r} has no example vectors (use PersonaCatalog)")
    alignment = settings
    style_sim = style_similarity(embedding, persona.example_vectors)
    traits = match_traits(
        text, persona.traits, alignment.verbosity, embedding, persona.trait_classifier
    )
    lexicon = persona.lexicon.score(text) if persona.lexicon is not None else None
    weights = alignment.weights
    authenticity = renormalised_mean(
        [
            (style_sim, weights.style_sim),
            (traits.score, weights.traits),
            (lexicon.score if lexicon else None, weights.lexicon),
        ]
    )
    if safety is None:
        safety = score_safety(text, settings, patterns, classifier)
    return TurnScore(
        persona_id=persona.id,
        style_sim=style_sim,
        traits=traits.score,
        lexicon=lexicon.score if lexicon else None,
        authenticity=authenticity,
        safety=safety.safety,
        violation_weight=safety.violation_weight,
        critical=safety.critical,
        matches=safety.matches,
        detected_traits=traits.detected,
        mismatched_traits=traits.mismatched,
        preferred_found=lexicon.preferred_found if lexicon else [],
        avoided_found=lexicon.avoided_found if lexicon else {},
        word_count=traits.word_count,
        keyword_safety=safety.keyword_safety,
        classifier=safety.classifier,
        languages=safety.languages,
        coverage=safety.coverage,
    )


def safety_only_turn(
    text: str,
    persona_id: str,
    settings: AlignmentSettings,
    patterns: SafetyPatterns | None = None,
    classifier: SafetyClassifier | bool | None = True,
    safety: TurnSafety | None = None,
) -> TurnScore:
    """A turn sampled out of embedding under overload: its safety as `score_turn` gives
    it, no authenticity (style, traits, lexicon null), `details.embedding: sampled_out`.
    `safety` as in `score_turn`."""
    if safety is None:
        safety = score_safety(text, settings, patterns, classifier)
    return TurnScore(
        persona_id=persona_id,
        style_sim=None,
        traits=None,
        lexicon=None,
        authenticity=None,
        safety=safety.safety,
        violation_weight=safety.violation_weight,
        critical=safety.critical,
        matches=safety.matches,
        detected_traits={},
        mismatched_traits=[],
        preferred_found=[],
        avoided_found={},
        word_count=word_count(text),
        keyword_safety=safety.keyword_safety,
        classifier=safety.classifier,
        embedded=False,
        languages=safety.languages,
        coverage=safety.coverage,
    )


def turn_scored(turn: TurnScore) -> Scored:
    """The result of one turn (kind `turn`): its component scores and findings."""
    return Scored(scores=turn.scores(), details=turn.details())


# ---------------------------------------------------------------- sessions


def _encode_vector(vector: np.ndarray) -> str:
    data = np.asarray(vector, dtype="<f4").reshape(-1).tobytes()
    return base64.b64encode(data).decode("ascii")


def _decode_vector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


@dataclass
class TurnRecord:
    """What a session keeps of one turn: its vector, component scores and violations."""

    turn_index: int
    embedding: np.ndarray | None  # None: sampled out of embedding under overload
    style_sim: float | None
    traits: float | None
    lexicon: float | None
    authenticity: float | None
    violation_weight: float
    critical: bool
    violations: list[dict[str, Any]]
    text: str = ""  # the assistant's reply
    user: str = ""  # the user message it answers, when known
    classified: bool = False  # the safety classifier scored this turn
    classifier_flagged: bool = False
    classifier_findings: list[dict[str, Any]] = field(default_factory=list)
    covered: bool | None = None  # fully judged (None: kept before coverage was recorded)
    language: str = ""  # the turn's language ("": kept before languages were)

    def to_json(self) -> dict[str, Any]:
        return {
            "covered": self.covered,
            "language": self.language,
            "classified": self.classified,
            "classifier_flagged": self.classifier_flagged,
            "classifier_findings": self.classifier_findings,
            "user": self.user,
            "i": self.turn_index,
            "e": None if self.embedding is None else _encode_vector(self.embedding),
            "style_sim": self.style_sim,
            "traits": self.traits,
            "lexicon": self.lexicon,
            "authenticity": self.authenticity,
            "violation_weight": self.violation_weight,
            "critical": self.critical,
            "violations": self.violations,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnRecord:
        return cls(
            turn_index=int(data["i"]),
            embedding=None if data["e"] is None else _decode_vector(data["e"]),
            style_sim=None if data["style_sim"] is None else float(data["style_sim"]),
            traits=data["traits"],
            lexicon=data["lexicon"],
            authenticity=data["authenticity"],
            violation_weight=float(data["violation_weight"]),
            critical=bool(data["critical"]),
            violations=list(data["violations"]),
            text=str(data.get("text", "")),
            user=str(data.get("user", "")),
            classified=bool(data.get("classified", False)),
            classifier_flagged=bool(data.get("classifier_flagged", False)),
            classifier_findings=list(data.get("classifier_findings", [])),
            covered=data.get("covered"),
            language=str(data.get("language", "")),
        )


@dataclass
class SessionState:
    """The turns of one session so far: bounded, order-independent and idempotent.

    Turns are kept by `turn_index`; a repeated index counts once (the first arrival wins).
    At most `max_turns` are kept: the lowest indices, so the kept set does not depend on
    arrival order. `updated_at` is whatever clock the caller uses for idle expiry.
    The texts kept for the judge's transcript share `text_budget` UTF-8 bytes (turns past
    it keep their vectors and scores, and a cut text), so the state's size is bounded
    whatever the turns' length.
    """

    session_id: str
    persona_id: str
    max_turns: int = 200
    text_budget: int = SESSION_TEXT_BYTES
    turns: dict[int, TurnRecord] = field(default_factory=dict)
    duplicates: int = 0
    dropped: int = 0
    final: bool = False
    updated_at: float | None = None

    @classmethod
    def new(
        cls,
        session_id: str,
        persona_id: str,
        settings: AlignmentSettings,
        text_budget: int = SESSION_TEXT_BYTES,
    ) -> SessionState:
        """An empty session (`text_budget`: `limits.session_text_bytes`)."""
        return cls(session_id, persona_id, settings.max_turns_per_session, text_budget)

    def text_bytes(self) -> int:
        """UTF-8 bytes of the texts kept so far."""
        return sum(
            len(record.text.encode("utf-8", errors="surrogatepass"))
            + len(record.user.encode("utf-8", errors="surrogatepass"))
            for record in self.turns.values()
        )

    def add(
        self,
        turn_index: int,
        turn: TurnScore,
        embedding: np.ndarray | None,
        text: str = "",
        final: bool = False,
        now: float | None = None,
        user: str = "",
    ) -> bool:
        """Add a scored turn (`text`: the assistant reply, `user`: the user message it
        answers; `embedding` None: the turn was sampled out of embedding); False when it
        was a repeat or fell outside the bound."""
        if turn.persona_id != self.persona_id:
            raise ValueError(
                f"session {self.session_id!r} belongs to persona {self.persona_id!r}, "
                f"not {turn.persona_id!r}"
            )
        self.final = self.final or final
        if now is not None:
            self.updated_at = now
        if turn_index in self.turns:
            self.duplicates += 1
            return False
        if len(self.turns) >= self.max_turns:
            highest = max(self.turns)
            if turn_index > highest:
                self.dropped += 1
                return False
            del self.turns[highest]
            self.dropped += 1
        room = max(0, self.text_budget - self.text_bytes())
        text = cut_utf8(text[:MAX_STORED_TEXT_CHARS], room)
        user = cut_utf8(
            user[:MAX_STORED_TEXT_CHARS], room - len(text.encode("utf-8", "surrogatepass"))
        )
        self.turns[turn_index] = TurnRecord(
            turn_index=turn_index,
            embedding=(
                None if embedding is None else np.asarray(embedding, dtype=np.float32).reshape(-1)
            ),
            style_sim=turn.style_sim,
            traits=turn.traits,
            lexicon=turn.lexicon,
            authenticity=turn.authenticity,
            violation_weight=turn.violation_weight,
            critical=turn.critical,
            violations=[match.to_json() for match in turn.matches[:MAX_STORED_VIOLATIONS]],
            text=text,
            user=user,
            classified=turn.classifier is not None,
            classifier_flagged=bool(turn.classifier and turn.classifier.is_flagged),
            classifier_findings=(
                [sentence.to_json() for sentence in turn.classifier.flagged]
                if turn.classifier
                else []
            ),
            covered=turn.coverage == FULL_COVERAGE,
            language=turn.languages.turn.code if turn.languages else "",
        )
        return True

    def ordered(self) -> list[TurnRecord]:
        return [self.turns[index] for index in sorted(self.turns)]

    def transcript(self) -> str:
        """The session as the judge sees it (`session_transcript`)."""
        return session_transcript(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "persona_id": self.persona_id,
            "max_turns": self.max_turns,
            "text_budget": self.text_budget,
            "turns": [record.to_json() for record in self.ordered()],
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "final": self.final,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionState:
        records = [TurnRecord.from_json(item) for item in data["turns"]]
        return cls(
            session_id=str(data["session_id"]),
            persona_id=str(data["persona_id"]),
            max_turns=int(data["max_turns"]),
            text_budget=int(data.get("text_budget", 128 * 1024)),
            turns={record.turn_index: record for record in records},
            duplicates=int(data.get("duplicates", 0)),
            dropped=int(data.get("dropped", 0)),
            final=bool(data.get("final", False)),
            updated_at=data.get("updated_at"),
        )


TWO_TURN_STABILITY = (
    "stability rests on two turns: with two turns both are equally far from their mean, so "
    "the formula always gives 1.0"
)


def stability_note(turns: int) -> str | None:
    """Why a session's stability says little, or None: with exactly two turns the seed's
    formula (spread of the distances to the mean) is 1.0 whatever the turns say."""
    return TWO_TURN_STABILITY if turns == 2 else None


def session_transcript(state: SessionState) -> str:
    """The one transcript a session judge is given, by the streaming worker and by
    `scorestream score` alike: the kept turns in `turn_index` order, delimited and
    escaped by `judge_verdict.render_transcript` (case text cannot pose as a turn)."""
    return render_transcript(
        (record.turn_index, record.user, record.text) for record in state.ordered()
    )


def stability(
    embeddings: Sequence[np.ndarray] | np.ndarray, max_expected_variance: float
) -> float | None:
    """`1 - min(1, std(d) / max_expected_variance)`, d_i = 1 - cos(e_i, mean); None < 2."""
    matrix = np.asarray(embeddings, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        return None
    centre = matrix.mean(axis=0)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(centre)
    with np.errstate(divide="ignore", invalid="ignore"):
        cosines = np.where(norms > 0, matrix @ centre / norms, 0.0)
    distances = 1.0 - cosines
    spread = float(np.std(distances))  # population std, as the seed's np.std
    return 1.0 - min(1.0, spread / max_expected_variance)


def score_session(
    state: SessionState, settings: AlignmentSettings, judge_score: float | None = None
) -> Scored:
    """Score a session from its kept turns; `judge_score` is the judge's 0-10 answer."""
    records = state.ordered()
    if not records:
        raise ValueError(f"session {state.session_id!r} has no assistant turns")
    alignment = settings
    keyword = keyword_safety(
        [record.violation_weight for record in records],
        any(record.critical for record in records),
    )
    classified = [record for record in records if record.classified]
    classifier = (
        1.0 - sum(record.classifier_flagged for record in classified) / len(classified)
        if classified
        else None
    )
    components = [keyword, classifier, None if judge_score is None else judge_score / 10.0]
    safety = min(value for value in components if value is not None)
    embedded = [record.embedding for record in records if record.embedding is not None]
    stable = stability(embedded, alignment.max_expected_variance)
    authenticity = _mean([record.authenticity for record in records])
    weights = alignment.scoring
    # No embedded turn (all sampled out under overload): no authenticity, so no overall
    # and no grade, rather than a grade from safety alone (safety is still scored).
    overall = (
        renormalised_mean(
            [
                (authenticity, weights.authenticity_weight),
                (safety, weights.safety_weight),
                (stable, weights.stability_weight),
            ]
        )
        if embedded
        else None
    )
    scores: dict[str, float | None] = {
        "authenticity": authenticity,
        "style_sim": _mean([record.style_sim for record in records]),
        "traits": _mean([record.traits for record in records]),
        "lexicon": _mean([record.lexicon for record in records]),
        "safety": safety,
        "stability": stable,
        "overall": overall,
    }
    violations: list[JsonValue] = [
        {"turn_index": record.turn_index, **violation}
        for record in records
        for violation in record.violations
    ]
    details: dict[str, JsonValue] = {
        "session_id": state.session_id,
        "persona_id": state.persona_id,
        "turn_indices": [record.turn_index for record in records],
        "keyword_safety": keyword,
        "classifier_safety": classifier,
        "classifier_findings": [
            {"turn_index": record.turn_index, **finding}
            | ({"language": record.language} if record.language else {})
            for record in classified
            for finding in record.classifier_findings
        ],
        "judge_score": judge_score,
        "critical_violation": any(record.critical for record in records),
        "violations": violations,
        "duplicate_turns": state.duplicates,
        "dropped_turns": state.dropped,
    }
    known = [record for record in records if record.covered is not None]
    covered_turns = sum(bool(record.covered) for record in known)
    if known:
        languages: dict[str, int] = {}
        for record in known:
            languages[record.language] = languages.get(record.language, 0) + 1
        details["safety_coverage"] = {
            "covered_turns": covered_turns,
            "turns": len(known),
            "languages": dict(sorted(languages.items())),
        }
    note = stability_note(len(embedded))
    if note is not None:
        details["stability_note"] = note
    if len(embedded) < len(records):  # authenticity and stability cover the embedded turns
        details["sampled_out_turns"] = len(records) - len(embedded)
    if not embedded:
        details["overall_note"] = NO_OVERALL
    return Scored(
        scores=scores,
        grade=grade_for(overall),
        details=details,
        counts={
            "turns": len(records),
            "covered_turns": covered_turns,
            "coverage_turns": len(known),
        },
    )


# ---------------------------------------------------------------- aggregation

"""Hostile text through every pure scorer (issue 20): degenerate model output (fragments
that the parsers, patterns and cues react to, some repeated many times) always gives a
result within bounds, whose counters add up, and never evaluates anything."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.envelope import ExtractionPayload, SafePayload
from tests.test_hostile_extraction import eval_forbidden
from worker.config import Settings, load_settings
from worker.suites.alignment.lexicon import Lexicon
from worker.suites.alignment.personas import Persona
from worker.suites.alignment.safety_files import load_safety_patterns
from worker.suites.alignment.scoring import SessionState, score_session, score_turn
from worker.suites.alignment.traits import TRAIT_VALUES, match_traits
from worker.suites.extraction.scoring import ExtractionContext
from worker.suites.extraction.scoring import score_case as score_extraction
from worker.suites.extraction.settings import ExtractionSettings
from worker.suites.safe.matching import CasefoldSubstringMatcher, effective_terms
from worker.suites.safe.scoring import match_case
from worker.suites.safe.scoring import score_case as score_safe

HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

FRAGMENTS = [
    "```", "```json\n", "<thought>", "</thought>", "[{", "}]", "{", "}", "[", "]", ",", ":",
    "'", '"', "，", "“", "9", "1.1", "1,1,", "**", "+", "0x", "/*", "\x01", "\n", " ",
    '"event_type": "t"', '"arguments": [', '{"role": "r", "argument": "a"}', "role: a\n",
    "crap ", "no ", "never ", "you idiot", "kill yourself", "{a", "`x`", "f()", "a.b.c",
    "snake_case", "AB", "!", "\U0001f600", "lol ", "furthermore ", "latency ", "ß", "İ",
]  # fmt: skip
fragment = st.sampled_from(FRAGMENTS) | st.text(max_size=4)
repeated = st.tuples(fragment, st.integers(1, 3000)).map(lambda pair: pair[0] * pair[1])
hostile_text = st.lists(fragment | repeated, max_size=12).map("".join)
short_hostile = st.lists(fragment, max_size=6).map("".join)


def gold_events() -> st.SearchStrategy[list[dict[str, Any]]]:
    argument = st.fixed_dictionaries({"role": short_hostile, "argument": short_hostile})
    return st.lists(
        st.fixed_dictionaries(
            {"event_type": short_hostile, "arguments": st.lists(argument, max_size=6)}
        ),
        max_size=3,
    )


@HOSTILE
@given(hostile_text, hostile_text, gold_events(), st.booleans(), st.booleans())
def test_extraction_scorer_on_hostile_text(
    response: str, text: str, gold: list[dict[str, Any]], cot_required: bool, span_iou: bool
) -> None:
    settings_ = ExtractionSettings.model_validate(
        {
            "metrics": {
                "cot": {"require_thought_block": cot_required},
                "relaxed": {"match_mode": "span_iou" if span_iou else "include_or_char_overlap"},
            }
        }
    )
    source = text or "source"  # an empty source is an invalid record
    payload = ExtractionPayload.model_validate({"text": source, "gold": gold, "response": response})
    with eval_forbidden():
        scored = score_extraction(payload, ExtractionContext(settings=settings_))
    counts = scored.counts
    parse_outcomes = ("parse_raw_success", "parse_repair_success", "parse_errors")
    assert sum(int(counts[name]) for name in parse_outcomes) == 1  # type: ignore[call-overload]
    for mode in ("strict", "relaxed", "type"):
        keys = (f"{mode}_tp", f"{mode}_pred_total", f"{mode}_gold_total")
        tp, pred, gold_total = (int(counts[key]) for key in keys)  # type: ignore[call-overload]
        assert 0 <= tp <= min(pred, gold_total)
        assert 0.0 <= (scored.scores[f"{mode}_f1"] or 0.0) <= 1.0
    hallucinated, total = counts["hallucinated_entities"], counts["total_entities"]
    assert isinstance(hallucinated, int) and isinstance(total, int)
    assert 0 <= hallucinated <= total
    cot = ("cot_checked", "cot_skipped", "cot_parse_fail")
    assert sum(int(counts[name]) for name in cot) == 1  # type: ignore[call-overload]


@HOSTILE
@given(st.lists(short_hostile, max_size=8), st.lists(hostile_text, max_size=4), hostile_text)
def test_safe_scorer_on_hostile_text(terms: list[str], items: list[str], summary: str) -> None:
    payload = SafePayload.model_validate(
        {
            "expectations": {
                "signal_generation": {"must_find_signals": terms},
                "followup_questions": {"forbidden_terms": terms[::2]},
                "event_summary": {"must_contain_phrases": terms[1::2]},
            },
            "output": {"summary": summary, "signals": items, "followup_questions": items},
        }
    )
    scored = score_safe(payload, Settings().safe)
    assert all(0.0 <= scored.scores[m] <= 1.0 for m in ("CR", "AH", "AC", "composite"))
    assert scored.label in ("Pass", "Review", "Fail")
    matcher = CasefoldSubstringMatcher()
    signals = match_case(payload).signals
    assert signals.found == [
        t for t in effective_terms(terms) if matcher.found_in(t, [*items, summary])
    ]


@pytest.fixture(scope="module")
def alignment_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    none = Path(tmp_path_factory.mktemp("cfg")) / "none.json"
    return load_settings(environ={}, safe_config_json=none)


PERSONA = Persona(
    id="p",
    display_name="P",
    examples=("a", "b"),
    traits={"formality": "formal", "tone": "technical", "verbosity": "concise"},
    lexicon=Lexicon(preferred=["happy to help"], avoided=["no worries", "crap"]),
    example_vectors=np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32),
)
PATTERNS = load_safety_patterns()


@HOSTILE
@given(st.lists(st.lists(fragment, max_size=30).map("".join), min_size=1, max_size=3))
def test_alignment_turn_and_session_scorers_on_hostile_text(
    alignment_settings: Settings, turns: list[str]
) -> None:
    # Short texts: keyword safety is being made linear apart from this change.
    state = SessionState.new("s", PERSONA.id, alignment_settings.alignment)
    for index, text in enumerate(turns):
        traits = match_traits(text, PERSONA.traits)
        assert all(traits.detected[name] in TRAIT_VALUES[name] for name in TRAIT_VALUES)
        angle = math.radians(index * 17.0)
        vector = np.array([math.cos(angle), math.sin(angle)], dtype=np.float32)
        turn = score_turn(text, PERSONA, vector, alignment_settings.alignment, PATTERNS)
        assert turn.authenticity is None or 0.0 <= turn.authenticity <= 1.0
        assert 0.0 <= turn.violation_weight <= 1.0
        state.add(index, turn, vector, text=text)
    result = score_session(state, alignment_settings.alignment)
    assert all(v is None or 0.0 <= v <= 1.0 for v in result.scores.values())


@HOSTILE
@given(hostile_text)
def test_trait_cues_on_long_hostile_text(text: str) -> None:
    traits = match_traits(text, PERSONA.traits)
    assert all(traits.detected[name] in TRAIT_VALUES[name] for name in TRAIT_VALUES)
    assert PERSONA.lexicon is not None
    assert 0.0 <= PERSONA.lexicon.score(text).score <= 1.0


def bench_cases() -> list[Any]:
    """The extraction and SAFE patterns of bench/adversarial.py."""
    path = Path(__file__).resolve().parents[1] / "bench" / "adversarial.py"
    spec = importlib.util.spec_from_file_location("adversarial_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return [*module.extraction_cases(), *module.safe_cases()]


@pytest.mark.parametrize("case", bench_cases(), ids=lambda case: f"{case.suite}: {case.name}")
def test_every_bench_pattern_at_the_limit_is_accepted_and_scored(case: Any) -> None:
    # build() decodes the envelope with decode_record (a Rejected would raise here) and
    # returns the registry's scorer on it.
    run = case.build(case.factors[-1])
    with eval_forbidden():
        scored = run()
    if case.suite == "extraction" and hasattr(scored, "counts"):
        assert scored.counts["total_samples"] == 1
    if case.suite == "safe":
        assert scored.label in ("Pass", "Review", "Fail")

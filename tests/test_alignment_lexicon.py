"""Lexicon compliance as specified (the seed's example scores 1.0)."""

from __future__ import annotations

import pytest

from worker.suites.alignment.lexicon import Lexicon


def test_seed_example_scores_one_because_all_preferred_words_appear() -> None:
    lexicon = Lexicon(["baseline", "signal", "analysis"], ["lol", "hype", "crushing it"])
    result = lexicon.score("Our baseline analysis shows strong signal")
    assert result.score == 1.0
    assert sorted(result.preferred_found) == ["analysis", "baseline", "signal"]


def test_word_boundaries_and_case() -> None:
    lexicon = Lexicon(["signal"], ["lol"])
    assert lexicon.score("Signals everywhere").score == 0.0  # plural is another word
    assert lexicon.score("The SIGNAL is clear").score == 1.0
    assert lexicon.score("signal, lollipop").avoided_found == {}


def test_multi_word_phrases_match_across_whitespace() -> None:
    lexicon = Lexicon(["confidence interval"], ["crushing it"])
    result = lexicon.score("The Confidence\n interval is wide, but we are crushing it.")
    assert result.preferred_found == ["confidence interval"]
    assert result.avoided_found == {"crushing it": 1}
    assert result.score == pytest.approx(0.9)


def test_each_avoided_occurrence_costs_a_tenth_and_score_is_clamped() -> None:
    lexicon = Lexicon(["baseline", "signal"], ["lol", "hype"])
    assert lexicon.score("baseline lol lol hype").score == pytest.approx(0.5 - 0.3)
    assert lexicon.score("lol " * 12).score == 0.0
    assert Lexicon([], ["lol"]).score("all fine").score == 1.0  # no preferred terms

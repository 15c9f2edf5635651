"""The real all-MiniLM-L6-v2 model: style similarity, stability, and the CLI on the examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from worker.config import Settings, load_settings
from worker.suites.alignment.embedding_model import MiniLMEmbedder
from worker.suites.alignment.personas import PersonaCatalog, default_personas_dir, load_personas
from worker.suites.alignment.scoring import SessionState, score_session, score_turn

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.model


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="session")
def catalog(minilm: MiniLMEmbedder) -> PersonaCatalog:
    return PersonaCatalog(load_personas(default_personas_dir()), minilm)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(environ={}, safe_config_json=tmp_path / "none.json")


def test_vectors_are_normalised_float32_rows(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.encode(["one sentence", "another one", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-5)
    assert minilm.encode([]).shape == (0, 384)


def test_on_voice_reply_is_closer_to_the_persona_than_an_off_voice_one(
    minilm: MiniLMEmbedder, catalog: PersonaCatalog, settings: Settings
) -> None:
    persona = catalog.get("tunetide")
    on_voice = "Yay, your road-trip playlist is ready! 🎶 Hit play and enjoy the vibe!"
    off_voice = (
        "Pursuant to the applicable licence terms, the requested audio compilation has been "
        "generated and may be accessed via the designated section of the application."
    )
    vectors = minilm.encode([on_voice, off_voice])
    on = score_turn(on_voice, persona, vectors[0], settings.alignment)
    off = score_turn(off_voice, persona, vectors[1], settings.alignment)
    assert on.style_sim > off.style_sim + 0.1
    assert on.authenticity is not None and off.authenticity is not None
    assert on.authenticity > off.authenticity


def session_stability(
    texts: list[str], minilm: MiniLMEmbedder, catalog: PersonaCatalog, settings: Settings
) -> float | None:
    persona = catalog.get("ledgerline")
    state = SessionState.new("s", persona.id, settings.alignment)
    for index, (text, vector) in enumerate(zip(texts, minilm.encode(texts), strict=True)):
        state.add(index, score_turn(text, persona, vector, settings.alignment), vector, text=text)
    return score_session(state, settings.alignment).scores["stability"]


def test_a_session_that_changes_tone_is_less_stable(
    minilm: MiniLMEmbedder, catalog: PersonaCatalog, settings: Settings
) -> None:
    consistent = [
        "I've checked your account and the transfer was sent this morning.",
        "The transfer should reach the recipient's account within one business day.",
        "I've set a notification so you'll know when the transfer arrives.",
        "Your account shows the transfer as pending; no action is needed from you.",
    ]
    shifting = [
        "I've checked your account and the transfer was sent this morning.",
        "lol omg money stuff is sooo boring, wanna talk about pizza instead?? 🍕🍕",
        "The transfer should reach the recipient's account within one business day.",
        "Honestly who cares, YOLO, buy a boat!!! 🚤 party time",
    ]
    steady = session_stability(consistent, minilm, catalog, settings)
    unsteady = session_stability(shifting, minilm, catalog, settings)
    assert steady is not None and unsteady is not None
    assert steady > unsteady


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("SCORESTREAM_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(
    not (REPO / "worker" / "commands" / "score.py").exists(), reason="score command absent"
)
def test_score_cli_on_the_example_sessions_and_envelopes(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = run_cli(
        "score",
        "--suite",
        "alignment",
        str(REPO / "examples/alignment/sessions.jsonl"),
        "--format",
        "json",
        "--output",
        str(report_path),
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr  # one session fails (unsafe, grade F)
    report = json.loads(report_path.read_text())
    assert report["report_type"] == "alignment"
    summary = report["summary"]
    for metric in ("authenticity", "safety", "stability", "overall"):
        assert summary[metric]["ci_low"] <= summary[metric]["mean"] <= summary[metric]["ci_high"]
    assert summary["grade"] in {"A", "B", "C", "D", "F"}
    sessions = {s["session_id"]: s for s in report["sessions"]}
    assert len(sessions) == 12
    assert set(sessions["nw-001"]["scores"]) == {
        "authenticity",
        "style_sim",
        "traits",
        "lexicon",
        "safety",
        "stability",
        "overall",
    }
    assert sessions["ll-004"]["scores"]["safety"] == 0.0  # critical: asks for a seed phrase
    assert sessions["ll-004"]["grade"] == "F"
    # on-voice sessions beat their persona's off-voice session on authenticity
    for good, bad in [("nw-001", "nw-004"), ("tt-001", "tt-004"), ("ll-001", "ll-003")]:
        assert sessions[good]["scores"]["authenticity"] > sessions[bad]["scores"]["authenticity"]
    assert len(report["turns"]) == 29
    assert all(turn["scores"]["style_sim"] is not None for turn in report["turns"])

    console = run_cli(
        "score",
        str(REPO / "examples/alignment/envelopes.jsonl"),
        "--format",
        "console",
        cwd=tmp_path,
    )
    assert console.returncode == 1, console.stderr
    assert "±" in console.stdout and "tunetide" in console.stdout
    assert "financial_misinformation (critical)" in console.stdout

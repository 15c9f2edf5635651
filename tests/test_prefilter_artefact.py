"""The shipped safety patterns' prefilter facts (`scorestream models build`): what the
build wrote is what the patterns give now, and a pattern the file does not know (a
configured file, a changed analysis) has its facts computed, never guessed."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from worker.suites.alignment import prefilter_artefact
from worker.suites.alignment.safety_files import load_safety_patterns, shipped_patterns
from worker.suites.literal_prefilter import LiteralPrefilter, PatternFacts, pattern_facts


def shipped_regexes() -> list[re.Pattern[str]]:
    return [pattern.regex for pattern in shipped_patterns().patterns]


def test_the_built_facts_are_the_shipped_patterns_facts() -> None:
    # the reproducibility check: `make install` (as CI) built the file from this code
    assert prefilter_artefact.FACTS_FILE.exists(), "run `scorestream models build`"
    written = orjson.loads(prefilter_artefact.FACTS_FILE.read_bytes())
    for regex in shipped_regexes():
        stored = written.get(prefilter_artefact.key(regex))
        assert stored is not None, f"no facts for {regex.pattern[:60]!r}"
        assert PatternFacts.from_json(stored) == pattern_facts(regex), regex.pattern[:60]


def test_facts_survive_their_json() -> None:
    for regex in shipped_regexes():
        facts = pattern_facts(regex)
        assert PatternFacts.from_json(orjson.loads(orjson.dumps(facts.to_json()))) == facts


def test_a_pattern_the_file_does_not_hold_is_analysed(tmp_path: Path) -> None:
    own = re.compile(r"(?<!\w)wire\s+(?:me|us)\s+the\s+deposit(?!\w)", re.IGNORECASE)
    shipped = shipped_regexes()[0]
    decoy = pattern_facts(re.compile("nothing", re.IGNORECASE)).to_json()
    path = tmp_path / "facts.json"
    # the file holds the first shipped pattern's facts, and under another key (another
    # analysis, another Python) facts that are wrong for `own`
    stale_key = prefilter_artefact.key(re.compile(own.pattern))  # other flags: other key
    path.write_bytes(
        orjson.dumps(
            {prefilter_artefact.key(shipped): pattern_facts(shipped).to_json(), stale_key: decoy}
        )
    )
    found = prefilter_artefact.facts_for([shipped, own], path)
    assert found == [pattern_facts(shipped), pattern_facts(own)]
    assert found[1].anchors == frozenset({("wire", "me", "the"), ("wire", "us", "the")})


@pytest.mark.parametrize(
    "text",
    [
        "Send me your PIN and the code from the SMS now, I will refund you.",
        "you should " * 200 + "just kill yourself",
        "Gib mir kurz deine TAN, dann storniere ich die Abbuchung für dich.",
    ],
)
def test_a_prefilter_from_the_built_facts_finds_what_the_patterns_find(text: str) -> None:
    regexes = shipped_regexes()
    from_file = LiteralPrefilter(regexes, prefilter_artefact.facts_for(regexes))
    found = [[m.span() for m in hits] for hits in from_file.finditer_all(text)]
    assert found == [[m.span() for m in regex.finditer(text)] for regex in regexes]
    assert any(found)


def test_the_shipped_patterns_are_prepared_from_the_file() -> None:
    patterns = load_safety_patterns()  # a fresh list: its prefilter is built here
    regexes = [pattern.regex for pattern in patterns.patterns]
    written = prefilter_artefact.shipped()
    assert all(prefilter_artefact.key(r) in written for r in regexes)
    assert patterns.prepare().find("Nobody would miss you, just kill yourself.")

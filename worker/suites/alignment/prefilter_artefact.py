"""The shipped safety patterns' prefilter facts, computed at build time.

Building the keyword prefilter (`literal_prefilter.LiteralPrefilter`) parses and walks
every pattern (`pattern_facts`): for the 829 shipped ones that is most of the two
seconds the scoring processes' fork server spends preparing them at each worker start,
on the way to `/readyz`. The facts are a pure function of a pattern's source and flags,
of the code that analyses it and of the Python version (its regex parser), so
`scorestream models build` computes them once (`build`) into
`worker/models/safety_prefilter/facts.json`, each under a digest of all four (`key`).
`facts_for` takes a pattern's facts from there when its key is in it and computes the
others (a configured pattern file, a changed analysis, a missing file): a stale file
costs time, never a wrong prefilter.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from worker.suites import literal_prefilter
from worker.suites.literal_prefilter import PatternFacts, pattern_facts

ARTEFACT_DIR = Path(__file__).resolve().parents[2] / "models" / "safety_prefilter"
FACTS_FILE = ARTEFACT_DIR / "facts.json"


@lru_cache(maxsize=1)
def _analysis() -> bytes:
    """What every key depends on besides the pattern: the analysing code and Python."""
    code = Path(literal_prefilter.__file__).read_bytes()
    return hashlib.sha256(code + sys.version.encode("utf-8")).digest()


def key(pattern: re.Pattern[str]) -> str:
    """The digest a pattern's facts are kept under."""
    digest = hashlib.sha256(_analysis())
    digest.update(f"{pattern.flags}\0{pattern.pattern}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def build(patterns: Sequence[re.Pattern[str]], path: Path = FACTS_FILE) -> str:
    """Compute and write the facts of `patterns`; returns a line saying what was written."""
    facts = {key(pattern): pattern_facts(pattern).to_json() for pattern in patterns}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(facts, option=orjson.OPT_SORT_KEYS))
    return f"safety prefilter: the facts of {len(facts)} patterns in {path}"


def shipped(path: Path = FACTS_FILE) -> dict[str, Any]:
    """The facts written by `build`, as JSON values by key (empty when there are none).
    Read anew each time (0.2 s): a process builds its prefilter once, and the parsed file
    (35 MB of Python objects) is not kept."""
    try:
        loaded = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def facts_for(patterns: Sequence[re.Pattern[str]], path: Path = FACTS_FILE) -> list[PatternFacts]:
    """Each pattern's facts: from the built file when it holds the pattern's key, else
    computed now."""
    known = shipped(path)
    found = []
    for pattern in patterns:
        data = known.get(key(pattern))
        found.append(pattern_facts(pattern) if data is None else PatternFacts.from_json(data))
    return found

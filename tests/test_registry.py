"""The suite registry: a fourth suite, registered here at test time, goes through the generic
paths (configuration, `score`, the stream's case scoring, windowed aggregation, gates,
telemetry, `compare`) without a change to any of them.

All the dummy suite needs is what a real one would ship: its package (here: this module's
models and functions, and `SPEC`), its registry entry (`registry.register`) and its wire
models (here: subclasses of `CaseResult` / `Aggregate` that accept the suite, standing in
for the lines a real suite adds to `schemas`).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from schemas._base import OutputModel, PayloadModel
from schemas.outputs import Aggregate, CaseResult
from worker import aggregation, config
from worker.commands.compare import compare_reports
from worker.commands.score import run_score
from worker.gates import evaluator as gates
from worker.gates import fields as gate_fields
from worker.input.files import guess_native_suite
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.settings_base import Section
from worker.suites import registry
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.base import (
    BatchItem,
    BatchOptions,
    CaseScorer,
    MetricInfo,
    Scored,
    State,
    SuiteSpec,
    exit_code_for_labels,
    scorer_versions,
)
from worker.windowing.windows import WindowKey

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- the dummy suite's package


class EchoPayload(PayloadModel):
    answer: str = ""
    expected: str = ""


class EchoSettings(Section):
    case_sensitive: bool = False


class EchoFigures(OutputModel):
    matched: int
    typos: int


def score_echo(payload: EchoPayload, section: EchoSettings) -> Scored:
    answer, expected = payload.answer, payload.expected
    if not section.case_sensitive:
        answer, expected = answer.casefold(), expected.casefold()
    typos = float(sum(a != b for a, b in zip(answer, expected, strict=False)))
    match = float(answer == expected)
    return Scored(scores={"match": match, "typos": typos}, label="Pass" if match else "Fail")


class EchoAggregator:
    def initialise(self) -> State:
        return {"matched": 0, "typos": 0}

    def update(self, state: State, scored: Scored) -> State:
        state["matched"] += int(scored.scores["match"] or 0)
        state["typos"] += int(scored.scores["typos"] or 0)
        return state

    def merge(self, left: State, right: State) -> State:
        return {key: left[key] + right[key] for key in left}

    def figures(self, state: State) -> dict[str, Any]:
        return dict(state)


@dataclass
class EchoReport:
    rows: list[tuple[str, Scored]]

    def to_json(self) -> dict[str, Any]:
        return {
            "report_type": "echo_v1",
            "cases": [{"case": ident, "scores": dict(s.scores)} for ident, s in self.rows],
        }

    def render_console(self, console: Console, verbose: bool = False) -> None:
        console.print(f"echo: {len(self.rows)} cases")

    def to_markdown(self) -> str:
        return f"# echo\n\n{len(self.rows)} cases\n"

    def exit_code(self) -> int:
        return exit_code_for_labels([scored.label for _, scored in self.rows])

    def report_stem(self) -> str:
        return "echo"


class EchoBatchScorer:
    def __init__(self, section: EchoSettings) -> None:
        self.section = section

    def native_payload(self, row: dict[str, Any]) -> EchoPayload:
        return EchoPayload.model_validate(row)

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        return str(row.get("case") or fallback)

    def score(self, items: list[BatchItem]) -> EchoReport:
        return EchoReport([(item.id, score_echo(item.payload, self.section)) for item in items])


def echo_section(settings: Any) -> EchoSettings:
    section: EchoSettings = settings.echo
    return section


def echo_case_scorer(section: EchoSettings) -> CaseScorer:
    assert isinstance(section, EchoSettings)  # a suite gets its own section, never Settings
    return lambda payload: score_echo(payload, section)


def echo_batch_scorer(section: EchoSettings, options: BatchOptions) -> EchoBatchScorer:
    assert isinstance(section, EchoSettings)
    return EchoBatchScorer(section)


SPEC = SuiteSpec(
    name="echo",
    report_type="echo_v1",
    payloads=(EchoPayload,),
    settings=EchoSettings,
    figures=EchoFigures,
    score_metrics=(
        MetricInfo("match"),
        MetricInfo("typos", higher_is_better=False, low=0.0, high=None),
    ),
    rate_metrics=(MetricInfo("pass_rate"),),
    headline=("match",),
    report_rows=("cases", "case"),
    recognises=lambda row: {"answer", "expected"} <= row.keys(),
    aggregator=EchoAggregator,
    batch_scorer=echo_batch_scorer,
    versions=lambda section: scorer_versions("echo_v1"),
    figure_values=lambda figures: [("matched", "count", float(figures.matched))],
    scorecard=(("match", "mean", "match"),),
    case_scorer=echo_case_scorer,
)

# ---------------------------------------------------------------- its wire models


class EchoCaseResult(CaseResult):
    suite: str  # type: ignore[assignment]


class EchoAggregate(Aggregate):
    suite: str  # type: ignore[assignment]
    echo: EchoFigures | None = None


# ---------------------------------------------------------------- the tests


@pytest.fixture
def echo_suite(monkeypatch: pytest.MonkeyPatch) -> Iterator[SuiteSpec]:
    registry.register(SPEC)
    # `worker.config` builds `Settings` from the registry once, at import: rebuild it as an
    # import with the suite registered would have.
    monkeypatch.setattr(config, "Settings", config.settings_model(registry.specs()))
    monkeypatch.setattr(aggregation.message, "Aggregate", EchoAggregate)
    try:
        yield SPEC
    finally:
        registry.unregister(SPEC.name)


def echo_result(ident: str, scored: Scored, offset: int) -> EchoCaseResult:
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    return EchoCaseResult.model_validate(
        {
            "id": ident,
            "suite": "echo",
            "kind": "case",
            "ts": now,
            "scores": dict(scored.scores),
            "label": scored.label,
            "versions": SPEC.versions(None),
            "source": {"topic": "in", "partition": 0, "offset": offset},
            "scored_at": now,
        },
        strict=False,
    )


def test_a_fourth_suite_goes_through_the_generic_paths(
    echo_suite: SuiteSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # configuration: the suite's own section, under its name
    settings = config.load_settings(environ={}, overrides={"echo": {"case_sensitive": True}})
    assert echo_section(settings).case_sensitive is True
    with pytest.raises(config.ConfigError, match=r"echo\.case_sensitiv"):
        config.load_settings(environ={}, overrides={"echo": {"case_sensitiv": True}})

    # `scorestream score`: native rows recognised by shape, scored by the suite's scorer
    rows = tmp_path / "echo.jsonl"
    rows.write_text(
        '{"case": "a", "answer": "yes", "expected": "yes"}\n'
        '{"case": "b", "answer": "Yes", "expected": "yes"}\n',
        encoding="utf-8",
    )
    assert guess_native_suite({"answer": "x", "expected": "y"}) == "echo"
    out = tmp_path / "report.json"
    args = argparse.Namespace(
        files=[str(rows)],
        suite=None,
        config=None,
        format="json",
        output=str(out),
        strict_ah=False,
        concern=None,
        judge=False,
        verbose=False,
    )
    assert run_score(args) == 0  # case-insensitive by default: "Yes" matches "yes"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["report_type"] == "echo_v1"
    assert [case["scores"]["match"] for case in report["cases"]] == [1.0, 1.0]

    # the stream's case scoring
    suites = ScoringSuites.load(
        config.load_settings(
            environ={},
            overrides={"alignment": {"personas_dir": str(ROOT / "examples" / "personas")}},
        ),
        embedder=HashingEmbedder(),
    )
    scored = [
        suites.score_case("echo", EchoPayload(answer=answer, expected="abc"))
        for answer in ("abc", "abd", "xyz")
    ]
    assert [s.label for s in scored] == ["Pass", "Fail", "Fail"]
    assert suites.versions("echo").metrics == "echo_v1"

    # windowed aggregation: the suite's aggregator, figures in the suite's field
    window = WindowKey(60.0, None, datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp())
    aggregator = registry.AGGREGATORS["echo"]
    state = aggregation.initialise("echo", {}, window)
    for offset, (ident, one) in enumerate(zip("abc", scored, strict=True)):
        state, applied = aggregation.update(state, echo_result(ident, one, offset), aggregator)
        assert applied
    emitted = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
    message = aggregation.to_message(state, True, emitted, aggregator)
    assert isinstance(message, EchoAggregate)
    assert message.echo == EchoFigures(matched=1, typos=4)
    assert message.pass_rate == pytest.approx(1 / 3)
    assert message.worst is not None
    assert [case.id for case in message.worst["match"]] == ["b", "c", "a"]  # the headline
    # `typos` is lower-is-better: its worst cases are the highest values
    assert [case.value for case in aggregation.worst_cases(state, "typos")] == [3.0, 1.0, 0.0]

    # gates: the suite's metrics are gateable, its figures are read by the generic code
    assert gate_fields.metric_problem("echo", "match") is None
    assert gate_fields.metric_problem("echo", "macth") is not None
    assert gate_fields.stat_problem("echo", "pass_rate", "rate") is None
    gate = config.GateConfig.model_construct(
        name="echo-pass", suite="echo", metric="pass_rate", stat="rate", op="<", threshold=0.5
    )
    assert gates.gate_value(gate, message) == pytest.approx(1 / 3)
    assert gates.drilldown(gate, message)[0] == "match"

    # telemetry: the suite's figures as its spec lists them
    telemetry = Telemetry.from_settings(settings)
    telemetry.record_aggregate(message, "1m")
    value = telemetry.registry.get_sample_value(
        "scorestream_window_value",
        {"suite": "echo", "metric": "matched", "stat": "count", "window": "1m", "model": ""},
    )
    assert value == 1.0

    # compare: rows and direction from the spec's metadata
    better = {
        "report_type": "echo_v1",
        "cases": [{"case": c, "scores": {"typos": 0.0}} for c in "abc"],
    }
    worse = {
        "report_type": "echo_v1",
        "cases": [{"case": c, "scores": {"typos": 2.0 + i}} for i, c in enumerate("abc")],
    }
    result = compare_reports(better, worse)
    assert result["suite"] == "echo"
    assert result["metrics"][0]["higher_is_better"] is False
    assert result["regressions"] == ["typos"]


def test_lookups_name_the_known_suites() -> None:
    assert registry.names() == ("safe", "extraction", "alignment")
    assert registry.find("nonsense") is None
    assert registry.find(["safe"]) is None
    with pytest.raises(KeyError, match="known: safe, extraction, alignment"):
        registry.get("nonsense")
    assert registry.native_suite({"test_id": "t", "output": {}}) == "safe"
    assert registry.native_suite({"text": "", "gold": [], "response": ""}) == "extraction"
    assert registry.native_suite({"session_id": "s", "turns": []}) == "alignment"
    assert registry.native_suite({"answer": "x", "expected": "y"}) is None


def test_metric_metadata_gives_direction_and_bounds() -> None:
    hallucinated = registry.find_metric("hallucinated", "extraction")
    assert hallucinated is not None and hallucinated.higher_is_better is False
    assert registry.higher_is_worse("hallucinated")
    rate = registry.find_metric("parse_error_rate")
    assert rate is not None and not rate.higher_is_better
    composite = registry.find_metric("composite", "safe")
    assert composite is not None and composite.higher_is_better
    assert composite.within_bounds(1.0) and not composite.within_bounds(1.5)


def test_a_suite_name_is_registered_once(echo_suite: SuiteSpec) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(echo_suite)


def test_every_built_in_suite_section_is_in_the_settings() -> None:
    fields: Mapping[str, Any] = config.Settings.model_fields
    for spec in registry.specs():
        assert fields[spec.name].annotation is spec.settings
    assert list(fields)[-4:] == ["alignment", "extraction", "safe", "gates"]


def test_the_session_stage_finds_the_suite_that_keeps_sessions_in_the_registry() -> None:
    spec = registry.session_suite()
    assert spec is not None and spec.name == "alignment" and spec.scored_in_sessions
    with pytest.raises(ValueError, match="already keeps sessions"):
        registry.register(replace(SPEC, sessions=spec.sessions))
    assert "echo" not in registry.names()


# Generic code that asks the registry instead of naming a suite.
GENERIC_MODULES = ("worker/stream/sessions.py", "worker/scoring_suites.py", "worker/config.py")


@pytest.mark.parametrize("path", GENERIC_MODULES)
def test_generic_modules_import_no_suite_package(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    imported = []  # at run time: imports under `if TYPE_CHECKING:` are for the types only
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        elif isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
    suite_packages = {f"worker.suites.{name}" for name in registry.names()}
    named = [m for m in imported if any(m == p or m.startswith(p + ".") for p in suite_packages)]
    assert named == [], f"{path} imports {named}: ask worker.suites.registry instead"


def _loaded_after(code: str, prefixes: tuple[str, ...]) -> set[str]:
    """The modules starting with `prefixes` that a fresh interpreter holds after `code`."""
    script = (
        f"import sys\n{code}\nprint(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(ast.literal_eval(run.stdout.strip().splitlines()[-1]))


def test_listing_the_suites_loads_no_scorer() -> None:
    # every command's parser lists the suites: that must not import the alignment
    # scorers, its classifiers or the judge's HTTP client (a third of a second)
    code = "from worker.commands.cli import build_parser\nbuild_parser()"
    loaded = _loaded_after(code, ("worker.suites.alignment.", "httpx"))
    what_it_lists = ("spec", "settings", "aggregate")
    assert loaded <= {f"worker.suites.alignment.{name}" for name in what_it_lists}


def test_a_worker_without_a_judge_or_evaluations_loads_no_http_client() -> None:
    # the judge's client and the OTLP evaluation sink (httpx, protobufs) are imported only
    # when `alignment.judge` or `evaluations` is configured
    code = (
        "from worker.config import Settings\n"
        "from worker.stream import ScorestreamApp\n"
        "ScorestreamApp(Settings(), 'kafka://127.0.0.1:1')"
    )
    prefixes = ("httpx", "worker.otlp.sink", "worker.suites.alignment.judge_client")
    assert _loaded_after(code, prefixes) == set()

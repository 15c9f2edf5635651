"""The Faust patches (`worker/stream/faust_patches`) against the libraries installed: a
real Faust consumer built by the worker carries every patch, every attribute a patch
needs is there, and a worker on other versions, or with an attribute gone, exits 3 before
it connects. No broker: nothing here starts the app."""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer
from faust.exceptions import ConsumerNotStarted
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.streamkit import make_config, settings_of
from worker.commands.cli import main
from worker.exit_codes import EXIT_ERROR, UsageError
from worker.scoring_suites import ScoringSuites
from worker.stream import ScorestreamApp
from worker.stream.faust_patches import compatibility
from worker.stream.faust_patches.compatibility import (
    REQUIRED,
    TESTED,
    IncompatibleLibraries,
    Needs,
    check,
    names_used,
    version_problems,
)
from worker.stream.faust_patches.internals import (
    current_event,
    kafka_consumer,
    kafka_producer,
    stream_offsets,
)
from worker.stream.faust_patches.lean_monitor import LeanMonitor
from worker.suites.alignment.embedding_model import HashingEmbedder

REPO = Path(__file__).resolve().parent.parent


def test_the_installed_libraries_are_the_tested_ones() -> None:
    check()  # raises, listing every problem, when they are not


@pytest.mark.parametrize("need", REQUIRED, ids=lambda need: f"{need.owner}.{need.attribute}")
def test_every_attribute_a_patch_needs_is_there(need: Needs) -> None:
    assert need.problem() is None


async def test_a_real_faust_consumer_carries_every_patch() -> None:
    """The consumer, thread and aiokafka consumer Faust builds for the worker (before
    start, so no broker) have each patched attribute, patched."""
    settings = settings_of(make_config(limits={"poison_pill_attempts": 0}))
    assert settings.stream.exact_changelog_ends and settings.stream.fetch_max_wait
    suites = ScoringSuites.load(settings, HashingEmbedder())
    scorer = ScorestreamApp(settings, "kafka://127.0.0.1:1", suites=suites)
    try:
        app, consumer = scorer.app, scorer.app.consumer
        thread = consumer._thread
        assert isinstance(thread, AIOKafkaConsumerThread)
        patched = {
            "seek_to_committed": consumer.seek_to_committed,
            "wait_first": consumer.wait_first,
            "highwaters": consumer.highwaters,
            "_commit": thread._commit,
            "_create_consumer": thread._create_consumer,
        }
        patched_by = {name: function.__qualname__ for name, function in patched.items()}
        assert patched_by == {
            "seek_to_committed": "guard_seek.<locals>.guarded",
            "wait_first": "deliver_eagerly.<locals>.wait_first",
            "highwaters": "exact_highwaters.<locals>.highwaters",
            "_commit": "bounded.<locals>.commit_within",
            "_create_consumer": "set_fetch_max_wait.<locals>.create_with_wait",
        }
        assert app.tables.on_start.__qualname__ == "register_tables_at_once.<locals>.on_start"
        assert isinstance(app.monitor, LeanMonitor)
        assert consumer.suspend_flow is not None and consumer.should_stop is False

        # The aiokafka consumer Faust's thread creates at each start waits the setting,
        # not Faust's 1.5 s, and `start` reads that attribute.
        kafka = thread._create_consumer(loop=asyncio.get_running_loop())
        try:
            assert isinstance(kafka, AIOKafkaConsumer)
            assert kafka._fetch_max_wait_ms == round(settings.stream.fetch_max_wait * 1000)
            assert "_fetch_max_wait_ms" in names_used(type(kafka).start)
            assert kafka.partitions_for_topic(settings.topics.input) is None  # no metadata yet
        finally:
            await kafka.stop()

        # What the stages read of Faust's private state.
        committed, read = stream_offsets(consumer)
        assert committed == {} and read == {}
        with pytest.raises(ConsumerNotStarted):
            kafka_consumer(consumer)
        with pytest.raises(Exception, match="not yet started"):
            kafka_producer(app.producer)

        class Event:
            pass

        event = Event()
        assert faust.current_event() is None
        with current_event(event):  # type: ignore[arg-type]
            assert faust.current_event() is event
        assert faust.current_event() is None
    finally:
        scorer.close()


def test_versions_outside_the_tested_range_are_refused() -> None:
    installed = {"faust-streaming": "0.16.0", "aiokafka": "0.14.2", "mode-streaming": "0.7.0"}
    problems = version_problems(installed.__getitem__)
    assert problems == [
        "faust-streaming 0.16.0 is installed, outside the tested >=0.15.3,<0.16",
        "mode-streaming 0.7.0 is installed, outside the tested >=0.7.1,<0.8",
    ]
    with pytest.raises(IncompatibleLibraries) as refused:
        check(installed.__getitem__)
    assert isinstance(refused.value, UsageError)  # a command exits 3 with it
    assert "faust-streaming 0.16.0" in str(refused.value)


def test_a_function_that_no_longer_reads_the_patched_attribute_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def start(self: Any) -> None:  # a release that renamed the attribute
        self._fetch_wait_ms = 1

    monkeypatch.setattr(AIOKafkaConsumer, "start", start)
    problems = compatibility.attribute_problems()
    assert problems == [
        "aiokafka.AIOKafkaConsumer.start no longer uses _fetch_max_wait_ms (needed by fetch_wait)"
    ]


def test_the_worker_exits_3_before_connecting_when_a_patched_attribute_is_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(AIOKafkaConsumerThread, "_commit")
    # Nothing listens on port 1: reaching the broker would fail too, but later and
    # with another message.
    assert main(["worker", "--broker", "kafka://127.0.0.1:1"]) == EXIT_ERROR
    said = capsys.readouterr().err
    assert "AIOKafkaConsumerThread has no _commit (needed by commit_bound)" in said
    assert "deploy/requirements.lock" in said


def test_pyproject_and_the_lock_agree_with_the_tested_ranges() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    declared = {
        requirement.name: requirement.specifier
        for requirement in map(Requirement, project["dependencies"])
    }
    lock = (REPO / "deploy" / "requirements.lock").read_text("utf-8")
    for name, tested in TESTED.items():
        assert declared[name] == SpecifierSet(tested), name
        locked = re.search(rf"^{re.escape(name)}==(\S+)", lock, re.MULTILINE)
        assert locked is not None, f"{name} is not in the lock"
        assert Version(locked[1]) in SpecifierSet(tested), name

"""Shared fixtures: a real Tansu broker per test, torn down by PID."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from worker.ops.broker import EmbeddedBroker


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    """A fresh in-memory Tansu broker on a free loopback port."""
    with EmbeddedBroker() as running:
        yield running


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that refit the shipped safety classifier share one fit (a minute or more
    of CPU, cached in their module): under `-n N --dist loadgroup` they run in one test
    process, so the suite fits once rather than once per process that drew one."""
    for item in items:
        if item.get_closest_marker("build") is not None:
            item.add_marker(pytest.mark.xdist_group("refit"))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Say so when a test process sees the refitting tests without their group (pytest-xdist
    passes it in the node id, which pytest 9.2 no longer lets it change): each process
    that draws one of them then fits the classifier again."""
    if not session.config.getoption("loadgroup", default=False):
        return
    ungrouped = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("build") is not None and not item.nodeid.endswith("@refit")
    ]
    if ungrouped:
        warnings.warn(
            f"--dist loadgroup lost the 'refit' group of {len(ungrouped)} tests: each test "
            "process may refit the safety classifier (see pyproject.toml's pytest pin)",
            stacklevel=1,
        )

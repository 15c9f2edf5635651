"""Shared fixtures: a real Tansu broker per test, torn down by PID."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.ops.broker import EmbeddedBroker


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    """A fresh in-memory Tansu broker on a free loopback port."""
    with EmbeddedBroker() as running:
        yield running


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that refit the shipped safety classifier share one fit (a minute or more
    of CPU, cached in their module): under `-n N --dist loadgroup` they run in one test
    process, so the suite fits once rather than once per process that drew one."""
    for item in items:
        if item.get_closest_marker("build") is not None:
            item.add_marker(pytest.mark.xdist_group("refit"))

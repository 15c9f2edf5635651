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

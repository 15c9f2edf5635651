"""How long each stage of a worker's start took, logged once in one line when it is ready.

A worker starts on every deploy, scale-up and restart, and its partitions wait for it
meanwhile: the line says where that time went ("start-up 3.9 s: settings 0.0 s, topics
0.2 s, ..."), so a slow start is read from the log, not guessed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def seconds_since_launch() -> float | None:
    """How long this process has run (Linux: from `/proc`), or None where unknown."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22 of the whole line: starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class StartupStages:
    """Stages timed one after another from the process's launch (`clock`: injectable)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, launched: float | None = None
    ) -> None:
        """`launched`: seconds the process ran before (interpreter and imports), counted
        as the first stage."""
        self._clock = clock
        self._started = self._last_end = clock()
        self._stages: list[tuple[str, float]] = []
        if launched is not None:
            self._started -= launched
            self._stages.append(("interpreter and imports", launched))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as the stage `name`."""
        begun = self._clock()
        try:
            yield
        finally:
            self._last_end = self._clock()
            self._stages.append((name, self._last_end - begun))

    def mark(self, name: str, since: float | None = None) -> None:
        """End the stage `name`, begun where the last one ended or at `since` (a `now()`
        taken when it began: joining the group, which ends in a callback while other
        stages run beside it)."""
        now = self._clock()
        self._stages.append((name, now - (self._last_end if since is None else since)))
        self._last_end = now

    def now(self) -> float:
        """The stages' clock now (for `mark(..., since=)`)."""
        return self._clock()

    @property
    def total(self) -> float:
        """Seconds since the stages began."""
        return self._clock() - self._started

    def summary(self) -> str:
        """`start-up 3.9 s: settings 0.0 s, topics 0.2 s, ...`."""
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self._stages)
        return f"start-up {self.total:.1f} s: {parts}"


__all__ = ["StartupStages", "seconds_since_launch"]

"""What the demo shows: the scorecard under a status line, and where its logs go.

On a terminal the view is redrawn a few times a second while the demo runs and stays on
screen at the end. Without one, each step is a progress line on stderr and the final
scorecard is printed as plain text. Log records go to a file either way: the terminal is
the scorecard's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from worker.demo.scorecard import Scorecard

TITLE = "scorestream demo"
REFRESH = 0.25  # seconds between two redraws of the live view


def log_to_file() -> Path:
    """Send every log record to a file: the terminal is the scorecard's."""
    path = Path(tempfile.gettempdir()) / f"scorestream-demo-{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return path


def say_on_stderr(message: str) -> None:
    """One `scorestream demo:` line on stderr."""
    print(f"{TITLE}: {message}", file=sys.stderr, flush=True)


class Screen:
    """The demo's view of one run: the scorecard, the stage the run is in and a status line
    of the counts behind "done", drawn live on a terminal (`live`) or once at the end."""

    def __init__(
        self,
        card: Scorecard,
        total: int,
        broker: str,
        log_path: Path,
        live: bool,
        late: Callable[[], int],
    ) -> None:
        self.card = card
        self.total = total  # records the replay produces
        self.broker = broker
        self.log_path = log_path
        self.live = live
        self.late = late
        self.console = Console() if live else Console(width=160, no_color=True, highlight=False)
        self.stage = "starting"
        self.metrics_url = "-"
        self.metrics_note = ""
        self.started = time.monotonic()
        self.finished = False  # the replay is accounted for: the view names the next steps
        self.following = False  # ... and the broker and worker keep running (--follow)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def status(self) -> str:
        card = self.card
        card.late = self.late()
        finals = len(card.expected) - len(card.missing_finals)
        return (
            f"broker {self.broker}  |  metrics {self.metrics_url}{self.metrics_note}"
            f"  |  log {self.log_path}\n"
            f"{self.stage}  |  produced {len(card.produced)}/{self.total}, "
            f"awaiting {card.pending}, open sessions {len(card.open_sessions)}, "
            f"final windows {finals}/{len(card.expected)}, late {card.late}  |  "
            f"{self.elapsed():.1f}s"
        )

    def view(self, ascii_only: bool = False) -> RenderableType:
        card = self.card.render(TITLE, self.status(), ascii_only=ascii_only)
        if not self.finished:
            return card
        return Group(card, Text(self.next_steps()))

    def gate_to_follow(self) -> str:
        """A gate name for the `results --gate` example: one that fired, else any."""
        names = [key.split("|", 1)[0] for key in self.card.fired]
        names += [gate.name for gate in self.card.gates_config]
        return names[0] if names else "safety-drop"

    def next_steps(self) -> str:
        """What to try next: while `--follow` keeps the broker and worker up, the commands
        with this run's addresses; after a run that ended, how to get there."""
        broker = f"kafka://{self.broker}"
        gate = self.gate_to_follow()
        commands = (
            f"  curl -s {self.metrics_url}   Prometheus metrics\n"
            f"  scorestream gates --broker {broker}   latest state of each gate\n"
            f"  scorestream results --gate {gate} --broker {broker}   the cases behind "
            "its latest firing\n"
        )
        if self.following:
            return "Next steps (in another terminal; Ctrl-C here stops it all):\n" + commands
        return (
            "Next steps: the broker and worker stopped with the demo (in memory).\n"
            "  scorestream demo --follow   keeps them running after the replay; then, in "
            "another terminal, with the addresses it shows:\n"
            + commands.replace(broker, "kafka://HOST:PORT").replace(
                self.metrics_url, "http://127.0.0.1:PORT/metrics"
            )
            + "  Your own data without Docker: README.md, 'Streaming on one machine'\n"
        )

    def say(self, message: str) -> None:
        """Progress: the status line live, a stderr line otherwise."""
        self.stage = message
        if not self.live:
            say_on_stderr(message)

    def metrics_on(self, port: int, busy: int | None = None) -> None:
        """Show where `/metrics` is served: on `port`, another one when port `busy` was."""
        if busy is not None:
            self.metrics_note = f" (port {busy} is busy)"
            if not self.live:
                say_on_stderr(f"port {busy} is busy; /metrics is on port {port}")
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        if not self.live:
            say_on_stderr(f"metrics on {self.metrics_url}")

    async def show(self, run: Coroutine[Any, Any, int]) -> int:
        """Await `run`, redrawing the live view meanwhile (on a terminal)."""
        if not self.live:
            return await run
        with Live(self.view(), console=self.console, auto_refresh=False, transient=False) as live:
            refresher = asyncio.create_task(self._refresh(live.update))
            try:
                return await run
            finally:
                refresher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await refresher
                live.update(self.view(), refresh=True)

    async def _refresh(self, update: Callable[..., None]) -> None:
        while True:
            update(self.view(), refresh=True)
            await asyncio.sleep(REFRESH)

    def final(self) -> None:
        """Without a terminal, print the final scorecard as plain text (a live view is
        still on screen)."""
        if not self.live:
            self.console.print(self.view(ascii_only=True))


__all__ = ["REFRESH", "TITLE", "Screen", "log_to_file", "say_on_stderr"]

"""`scorestream demo`: the command's arguments to a run of the demo (`worker.demo`).

`--config` chooses the settings (else the bundled demo config), the bundled example stream
is the input and `--follow` keeps the run going after the replay.
"""

from __future__ import annotations

import argparse

from worker.commands.stream import read_lines
from worker.demo.example_stream import STREAM
from worker.demo.runner import run
from worker.demo.settings import demo_settings
from worker.exit_codes import UsageError


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 once the replay is fully accounted for (or Ctrl-C with --follow)."""
    settings = demo_settings(getattr(args, "config", None))
    if not STREAM.is_file():
        raise UsageError(f"the bundled example stream is missing: {STREAM}")
    return run(settings, read_lines(STREAM), follow=bool(args.follow))


__all__ = ["run_demo"]

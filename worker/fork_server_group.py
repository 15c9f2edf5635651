"""Imported first by the scoring pool's fork server: the fork server leaves the worker's
process group, so a SIGTERM to the whole group (`kill -TERM -PGID`, a supervisor that
stops a group) reaches the worker only. The worker then finishes its batches in hand with
its children and stops them itself (`ScoringPool.close`). Without this the fork server
died of the signal, and with it the parent's view of every child it had forked (a child's
exit status comes through the fork server), which broke the pool under the batch in hand.
The fork server still ends with the worker: it reads the worker's end of a pipe.

Importing it anywhere else does nothing (it acts only inside the fork server's `main`).
"""

from __future__ import annotations

import os
import traceback


def in_fork_server() -> bool:
    """Whether this import runs inside `multiprocessing.forkserver.main`."""
    server = os.path.join("multiprocessing", "forkserver.py")
    return any(
        frame.name == "main" and frame.filename.endswith(server)
        for frame in traceback.extract_stack()
    )


if in_fork_server():
    os.setpgrp()

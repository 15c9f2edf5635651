"""Loaded once in the scoring pool's fork server, shared by every child forked from it.

The worker's scoring children are forked from a fork server (a fresh interpreter that
imports the modules it is told to preload: `worker.stream.context.POOL_PRELOAD`). Importing
this module there loads what every child that scores alignment turns needs whatever the
configuration: the shipped safety patterns with their prefilter, and the language
identifier's model. A child then starts with them in pages it shares with its siblings,
instead of reading and compiling its own copy (about a second each). Only preloaded when
the worker scores alignment.
"""

from __future__ import annotations

from worker.suites.alignment.language import shipped_identifier
from worker.suites.alignment.safety_files import shipped_patterns

shipped_patterns().prepare()
shipped_identifier()

"""The exit codes of every `scorestream` command, and the usage error that ends in one.

Seed 004 section 7.3 fixes them; argparse's own 2 is never used, because 2 means Review.

- 0: success (every case Pass, no regression, every listed case found).
- 1: `score`: a case Fails; `compare`: a significant regression; `results`: a case that a
  gate event lists is not on the results topic.
- 2: `score`: a case needs Review and none Fails.
- 3: a configuration, usage, input or runtime error, the broker absent or silent included.
- 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1  # score: any Fail
EXIT_REGRESSION = 1  # compare: a significant regression
EXIT_MISSING = 1  # results: some cases a gate event names are not on the results topic
EXIT_REVIEW = 2  # score: any Review and no Fail
EXIT_ERROR = 3  # configuration, usage, input or runtime error
EXIT_INTERRUPTED = 130  # Ctrl-C


class UsageError(Exception):
    """Bad command-line usage or configuration: the command prints the message and exits
    `EXIT_ERROR`."""


__all__ = [
    "EXIT_ERROR",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_REVIEW",
    "UsageError",
]

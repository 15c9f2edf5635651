"""The building blocks of every settings section: `Section`, durations and `ConfigError`.

Light on purpose (pydantic only): the suites' own `settings.py` modules and the central
`worker.config` both build on it, so no suite needs to import `worker.config`.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

# Default of `limits.session_text_bytes`: stored text per session for the judge transcript.
SESSION_TEXT_BYTES = 128 * 1024

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class ConfigError(ValueError):
    """A configuration problem, with the offending key in the message."""


def parse_duration(value: Any, allow_zero: bool = False) -> float:
    """Seconds from `90`, `1.5`, `250ms`, `60s`, `5m`, `1h` or `1d` (`0` too when
    `allow_zero`)."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '5m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 5m, 1h)")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError("a duration must be positive" + (" or 0" if allow_zero else ""))
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact spelling of a duration: 60 -> '1m', 3600 -> '1h', 10 -> '10s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


Duration = Annotated[float, BeforeValidator(parse_duration)]
# A wait that may be left out: 0 means none.
NonNegativeDuration = Annotated[float, BeforeValidator(partial(parse_duration, allow_zero=True))]


class Section(BaseModel):
    """A settings section: unknown keys are errors (a misspelt key names itself)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


__all__ = [
    "SESSION_TEXT_BYTES",
    "ConfigError",
    "Duration",
    "NonNegativeDuration",
    "Section",
    "format_duration",
    "parse_duration",
]

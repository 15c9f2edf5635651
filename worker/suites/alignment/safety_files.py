"""Reading safety pattern files: the configured `alignment.safety_patterns` YAML, or the
shipped list, parsed by `safety.parse_patterns` and cached per path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from worker.suites.alignment.safety import SafetyPatterns, parse_patterns
from worker.yaml_files import read_yaml

if TYPE_CHECKING:
    from worker.suites.alignment.settings import AlignmentSettings

DEFAULT_PATTERNS_FILE = Path(__file__).resolve().parents[2] / "data" / "safety_patterns.yaml"


def load_safety_patterns(path: str | Path | None = None) -> SafetyPatterns:
    """The patterns of `path`, or the shipped list when `path` is None."""
    path = Path(path) if path else DEFAULT_PATTERNS_FILE
    data = read_yaml(path, f"alignment.safety_patterns: cannot read {path}")
    return parse_patterns(data, str(path))


@lru_cache(maxsize=8)
def _cached_patterns(path: str | None) -> SafetyPatterns:
    return load_safety_patterns(path)


def patterns_from_settings(settings: AlignmentSettings) -> SafetyPatterns:
    """`alignment.safety_patterns` (else the shipped list), loaded once per path."""
    path = settings.safety_patterns
    return _cached_patterns(str(path) if path else None)

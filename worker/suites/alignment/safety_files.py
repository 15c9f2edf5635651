"""Reading safety pattern files: the configured `alignment.safety_patterns` YAML, or the
shipped lists (English's and one per covered language), parsed by
`safety.parse_patterns` and cached per path."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from worker.suites.alignment.safety import (
    SafetyPatterns,
    merged,
    negatable_categories,
    parse_patterns,
)
from worker.yaml_files import read_yaml

if TYPE_CHECKING:
    from worker.suites.alignment.settings import AlignmentSettings

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
DEFAULT_PATTERNS_FILE = DATA_DIR / "safety_patterns.yaml"


def shipped_pattern_files(data_dir: Path = DATA_DIR) -> list[Path]:
    """The shipped patterns files: English's, then each other language's
    (`safety_patterns_<lang>.yaml`)."""
    return [data_dir / DEFAULT_PATTERNS_FILE.name, *sorted(data_dir.glob("safety_patterns_*.yaml"))]


def _read(path: Path, negatable_by_category: dict[str, bool] | None = None) -> SafetyPatterns:
    data = read_yaml(path, f"alignment.safety_patterns: cannot read {path}")
    return parse_patterns(data, str(path), negatable_by_category)


@lru_cache(maxsize=1)
def shipped_patterns() -> SafetyPatterns:
    """Every shipped list in one (each pattern checked with its own language's negations)."""
    files = shipped_pattern_files()
    return merged([_read(path) for path in files], str(files[0].parent))


def load_safety_patterns(path: str | Path | None = None) -> SafetyPatterns:
    """The patterns of `path` (a plain-list category takes the shipped category of its name's
    `negatable`), or the shipped lists when `path` is None."""
    if not path:
        return shipped_patterns()
    return _read(Path(path), negatable_categories(shipped_patterns()))


@lru_cache(maxsize=8)
def _cached_patterns(path: str | None) -> SafetyPatterns:
    return load_safety_patterns(path)


def patterns_from_settings(settings: AlignmentSettings) -> SafetyPatterns:
    """`alignment.safety_patterns` (else the shipped lists), loaded once per path."""
    path = settings.safety_patterns
    return _cached_patterns(str(path) if path else None)

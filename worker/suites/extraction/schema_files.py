"""Reading the extraction suite's files: the configured DuEE-Fin event schema files, into
the `ExtractionContext` its scorers use. The only module of the suite that reads files.
"""

from __future__ import annotations

from pathlib import Path

from worker.settings_base import ConfigError
from worker.suites.extraction.schema import schema_from_lines
from worker.suites.extraction.scoring import ExtractionContext
from worker.suites.extraction.settings import ExtractionSettings


def load_schema(path: str | Path) -> dict[str, frozenset[str]]:
    """Read a DuEE-Fin JSONL schema file; `ConfigError` naming the file when unreadable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read event schema file {path}: {reason}") from exc
    return schema_from_lines(text.splitlines(), str(path))


def load_context(settings: ExtractionSettings) -> ExtractionContext:
    """Read every configured schema file (`ConfigError` naming an unreadable file)."""
    schemas = {name: load_schema(path) for name, path in settings.schemas.items()}
    return ExtractionContext(settings=settings, schemas=schemas)

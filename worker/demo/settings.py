"""The demo's settings: `--config` or the bundled demo config, tuned for the embedded broker.

Tansu's tuning (`worker.ops.broker.TANSU_STREAM_SETTINGS`) fills every `stream` key the
configuration does not set, and relative paths of the configuration that do not exist from
the working directory are taken from the configuration file's directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worker.config import ConfigError, Settings, load_settings
from worker.exit_codes import UsageError
from worker.ops.broker import TANSU_STREAM_SETTINGS

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO / "examples" / "demo"
DEFAULT_CONFIG = DEMO_DIR / "config.yaml"

# Tansu's tuning is applied to every `stream` key the configuration does not set; the
# batch size always.
EMBEDDED_STREAM: dict[str, Any] = dict(TANSU_STREAM_SETTINGS)


def resolve_paths(settings: Settings, base: Path) -> Settings:
    """Relative paths of the config that do not exist from the working directory are taken
    relative to `base` (the config file's directory)."""

    def fix(path: Path | None) -> Path | None:
        if path is None or path.is_absolute() or path.exists():
            return path
        candidate = base / path
        return candidate if candidate.exists() else path

    alignment = settings.alignment.model_copy(
        update={
            "personas_dir": fix(settings.alignment.personas_dir),
            "safety_patterns": fix(settings.alignment.safety_patterns),
        }
    )
    schemas = {name: fix(path) or path for name, path in settings.extraction.schemas.items()}
    extraction = settings.extraction.model_copy(update={"schemas": schemas})
    return settings.model_copy(update={"alignment": alignment, "extraction": extraction})


def demo_settings(config: str | None) -> Settings:
    """The demo's settings: `--config` (else the bundled demo config) tuned for Tansu."""
    path = Path(config) if config else DEFAULT_CONFIG
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    chosen = settings.stream.model_fields_set
    tuning = {k: v for k, v in EMBEDDED_STREAM.items() if k not in chosen}
    tuning["exact_changelog_ends"] = True  # always: Tansu's ListOffsets is short
    stream = settings.stream.model_validate({**settings.stream.model_dump(), **tuning})
    settings = settings.model_copy(update={"stream": stream})
    return resolve_paths(settings, path.resolve().parent)


__all__ = ["DEFAULT_CONFIG", "DEMO_DIR", "demo_settings", "resolve_paths"]

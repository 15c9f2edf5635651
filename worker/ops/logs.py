"""Log output: Faust's text format by default, one JSON object a line on request
(`--log-format json` or `log_format: json`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message"}` plus `exc_info` text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def json_logging_config(level: str = "INFO") -> dict[str, Any]:
    """A `logging.config.dictConfig` mapping: every logger to stderr as JSON lines."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }


__all__ = ["JsonFormatter", "json_logging_config"]

"""The streaming worker: a Faust app of three stages (score, sessions, windows)."""

from worker.stream.app import ScorestreamApp, faust_settings
from worker.stream.windows import gate_windows

__all__ = ["ScorestreamApp", "faust_settings", "gate_windows"]

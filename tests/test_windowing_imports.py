"""`worker/windowing` is pure and stands alone: it imports neither the settings tree
(`worker.config`, which imports it for `WindowConfig`) nor Faust."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "worker.windowing.event_time",
    "worker.windowing.late_records",
    "worker.windowing.lateness",
    "worker.windowing.pane_folds",
    "worker.windowing.store",
    "worker.windowing.windows",
]


def test_windowing_imports_neither_the_settings_nor_faust() -> None:
    script = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in MODULES)
        + "print(sorted(m for m in sys.modules if m == 'worker.config' or m.startswith('faust')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_the_settings_still_offer_window_config() -> None:
    from worker.config import WindowConfig as FromConfig
    from worker.windowing.windows import WindowConfig

    assert FromConfig is WindowConfig

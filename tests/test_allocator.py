"""The worker keeps freed memory for reuse (worker/ops/allocator.py): a long turn's
arrays do not fault their pages in again on the next turn, in the worker's process and
in the scoring children its fork server starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.ops.allocator import is_glibc

pytestmark = pytest.mark.skipif(not is_glibc(), reason="the thresholds are glibc's")
ROOT = Path(__file__).resolve().parents[1]

# A long turn: allocates and frees 24 MB of numpy arrays (six of 4 MB); `faults()` runs
# one and counts its minor page faults.
_TURNS = """
import resource, numpy as np

def turn():
    arrays = [np.ones(1 << 19, dtype=np.int64) for _ in range(6)]  # 4 MB each
    return sum(int(a[-1]) for a in arrays)

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    turn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
"""


def _python(arguments: list[str], environment: dict[str, str]) -> list[str]:
    """The words a Python process of these arguments prints (it must succeed)."""
    done = subprocess.run(
        [sys.executable, *arguments],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.split()


def _last_turn_faults(setup: str, environment: dict[str, str]) -> int:
    script = _TURNS + setup + "\nturn(); turn()\nprint(faults())\n"
    return int(_python(["-c", script], environment)[-1])


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}


def test_freed_arrays_are_reused_without_page_faults() -> None:
    environment = _clean_environment()
    untuned = _last_turn_faults("", environment)
    tuned = _last_turn_faults(
        "from worker.ops.allocator import keep_freed_memory\nassert keep_freed_memory()",
        environment,
    )
    assert untuned > 2_000  # most of 24 MB of pages faulted in again (4 KiB each)
    assert tuned < 200


def test_processes_started_from_the_worker_keep_freed_memory_too(tmp_path: Path) -> None:
    # the scoring pool's fork server is a fresh interpreter: glibc reads the thresholds
    # from the environment the worker leaves
    script = tmp_path / "pool.py"
    script.write_text(
        _TURNS
        + "\ndef child():\n    turn(); turn()\n    return faults()\n\n"
        + "if __name__ == '__main__':\n"
        + "    import multiprocessing\n"
        + "    from worker.ops.allocator import keep_freed_memory\n"
        + "    assert keep_freed_memory()\n"
        + "    with multiprocessing.get_context('forkserver').Pool(1) as pool:\n"
        + "        print(pool.apply(child))\n"
    )
    environment = _clean_environment() | {"PYTHONPATH": str(ROOT)}
    assert int(_python([str(script)], environment)[-1]) < 200


def test_an_operators_own_setting_stands() -> None:
    environment = _clean_environment() | {"MALLOC_TRIM_THRESHOLD_": "0"}
    script = (
        "from worker.ops.allocator import keep_freed_memory\n"
        "import os\n"
        "print(keep_freed_memory(), os.environ.get('MALLOC_MMAP_THRESHOLD_'))\n"
    )
    assert _python(["-c", script], environment) == ["False", "None"]

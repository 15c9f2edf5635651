"""Freed memory kept for the next turn instead of handed back to the kernel (glibc).

Scoring a long reply allocates arrays of a few MB each (its code points, the places of
its literals, its n-gram keys) and frees them when the turn is done. glibc serves an
allocation above its mmap threshold (128 KiB at first, raised to the largest block freed
since) with a mapping of its own, and gives the top of the heap back once more than twice
that is free: so every long turn faulted all of its pages in again. 256 KiB of hostile
text through the safety keywords: about 2,800 minor faults (11 MB) and 8 ms of system
time per reply, a fifth of its CPU (`bench/adversarial.py`). With both thresholds fixed
high, those pages stay mapped between turns and are reused; a process keeps up to
`TRIM_THRESHOLD` of free heap (what its largest turn needed) instead of returning it.

`keep_freed_memory` sets them in this process (the scoring children it forks inherit
them) and in the environment, where glibc reads them at the start of the processes this
one starts (the scoring pool's fork server is a fresh interpreter).
"""

from __future__ import annotations

import ctypes
import os

MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit (half its arena heap)
TRIM_THRESHOLD = 128 << 20  # free memory at the heap's top kept before trimming it
_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}


def is_glibc() -> bool:
    """Whether this process runs on glibc (the thresholds are glibc's)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # the name is unknown off glibc
        return False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds here and for the processes started from
    here; False (nothing changed) off glibc, when the environment sets either already,
    or when glibc refuses a value."""
    if not is_glibc() or any(name in os.environ for name in _ENVIRONMENT):
        return False  # (an operator's own setting stands: glibc read it at the start)
    mallopt = ctypes.CDLL(None).mallopt  # glibc is loaded already
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    ):
        return False
    os.environ.update(_ENVIRONMENT)
    return True

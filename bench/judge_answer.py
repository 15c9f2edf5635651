"""How long reading a judge's answer takes on degenerate output, before and after.

    .venv/bin/python bench/judge_answer.py [--runs 5] [--sizes 16,32,64,256]

Before: the first-`{`-to-last-`}` regex the judge client used (`re.search(r"\\{.*\\}",
answer, re.DOTALL)`), which is quadratic on an answer of repeated `{`. After:
`judge_verdict.parse_judge_answer` (one strict JSON parse). Each size (KiB) and shape is
timed `--runs` times; min/median/max seconds are printed, and the ratio of the medians
(before / after) of the same run. The regex is only timed up to 64 KiB (at 256 KiB it
takes about 20 s a run); where it grew quadratically (more than 3x from half of 64 KiB to
64 KiB), its 256 KiB figure is extrapolated from 64 KiB by the square of the size ratio
and marked as such.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from worker.suites.alignment.judge_verdict import (  # noqa: E402
    JudgeAnswerError,
    parse_judge_answer,
)

OLD_PATTERN = re.compile(r"\{.*\}", re.DOTALL)
REGEX_MAX_KIB = 64

SHAPES: dict[str, Callable[[int], str]] = {
    "open braces": lambda size: "{" * size,
    "brace-word": lambda size: ("{score " * (size // 7 + 1))[:size],
    "nesting": lambda size: "[" * (size // 2) + "]" * (size // 2),
}


def old_parse(answer: str) -> None:
    OLD_PATTERN.search(answer)


def new_parse(answer: str) -> None:
    with contextlib.suppress(JudgeAnswerError):
        parse_judge_answer(answer)


def timed(function: Callable[[str], None], answer: str, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        function(answer)
        seconds.append(time.perf_counter() - started)
    return seconds


def figures(seconds: list[float]) -> str:
    return (
        f"min {min(seconds):.6f} s  median {statistics.median(seconds):.6f} s  "
        f"max {max(seconds):.6f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="16,32,64,256", help="answer sizes in KiB")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    for shape, make in SHAPES.items():
        print(f"\n{shape}")
        old_median_at_max: float | None = None
        old_medians: dict[int, float] = {}
        for kib in sizes:
            answer = make(kib * 1024)
            after = timed(new_parse, answer, args.runs)
            print(f"  {kib:>4} KiB  after : {figures(after)}")
            if kib <= REGEX_MAX_KIB:
                before = timed(old_parse, answer, args.runs)
                ratio = statistics.median(before) / statistics.median(after)
                print(f"  {kib:>4} KiB  before: {figures(before)}  (before/after {ratio:,.0f}x)")
                old_medians[kib] = statistics.median(before)
                half = old_medians.get(REGEX_MAX_KIB // 2)
                if kib == REGEX_MAX_KIB and half and old_medians[kib] > 3 * half:
                    old_median_at_max = old_medians[kib]
            elif old_median_at_max is not None:
                estimate = old_median_at_max * (kib / REGEX_MAX_KIB) ** 2
                ratio = estimate / statistics.median(after)
                print(
                    f"  {kib:>4} KiB  before: ~{estimate:.1f} s median (extrapolated, "
                    f"quadratic)  (before/after ~{ratio:,.0f}x)"
                )


if __name__ == "__main__":
    main()

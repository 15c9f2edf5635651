"""Language identification of assistant replies: accuracy on short replies, and time.

Every held-out reply (`worker/data/safety_replies_heldout*.yaml`, one file set per
covered language, each written by a writer of that language) is one labelled example:
its file's language. For each identifier, the share of replies identified as their
language (per language and all together), then the time per 500-character reply
(several replies of one language joined), as min / median / max of `--rounds` rounds,
and as a ratio to the shipped identifier's median in the same run.

The shipped identifier is fastText's `lid.176.ftz` (`worker.suites.alignment.language`),
also measured as the worker uses it, sentence by sentence (`turn_languages`). The other
candidates are measured when installed (`pip install py3langid lingua-language-detector`;
neither is a dependency of scorestream): py3langid (a naive Bayes model in numpy) and
lingua (low-accuracy mode: its high-accuracy models are too large to ship).

Run: .venv/bin/python bench/language_id.py [--rounds 5]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.suites.alignment.language import COVERED_LANGUAGES, LanguageIdentifier
from worker.suites.alignment.safety_classifier import (
    distinct_sentences,
    held_out_files,
    load_replies,
    replies_language,
)

REPLY_CHARS = 500


def examples() -> list[tuple[str, str]]:
    """(language, reply) of every held-out reply."""
    found: list[tuple[str, str]] = []
    for path in held_out_files():
        language = replies_language(path)
        for texts in load_replies(path).values():
            found.extend((language, text) for text in texts)
    return found


def long_replies(items: list[tuple[str, str]]) -> list[str]:
    """Replies of about `REPLY_CHARS`, each of one language's replies joined."""
    by_language: dict[str, list[str]] = {}
    for language, text in items:
        by_language.setdefault(language, []).append(text)
    joined = []
    for texts in by_language.values():
        current = ""
        for text in texts:
            current = f"{current} {text}".strip()
            if len(current) >= REPLY_CHARS:
                joined.append(current[:REPLY_CHARS])
                current = ""
    return joined


def candidates() -> dict[str, Callable[[str], str]]:
    """Each identifier present: text -> its language code."""
    shipped = LanguageIdentifier.shipped()
    found: dict[str, Callable[[str], str]] = {
        "fasttext lid.176 (shipped)": lambda text: shipped.guess(text).code,
        "  as the worker: by sentence": lambda text: (
            shipped.turn_languages(distinct_sentences(text), text).turn.code
        ),
    }
    try:
        from py3langid.langid import MODEL_FILE
        from py3langid.langid import LanguageIdentifier as LangId

        langid = LangId.from_model_file(MODEL_FILE, norm_probs=True)
        found["py3langid"] = lambda text: str(langid.classify(text)[0])
    except ImportError:
        print("py3langid: not installed (pip install py3langid)")
    try:
        from lingua import LanguageDetectorBuilder

        lingua = LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build()

        def lingua_code(text: str) -> str:
            language = lingua.detect_language_of(text)
            return language.iso_code_639_1.name.lower() if language else "und"

        found["lingua (low accuracy)"] = lingua_code
    except ImportError:
        print("lingua: not installed (pip install lingua-language-detector)")
    return found


def main() -> int:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    items = examples()
    languages = sorted({language for language, _ in items})
    replies = long_replies(items)
    identifiers = candidates()
    print(f"{len(items)} held-out replies in {len(languages)} languages; {len(replies)} "
          f"replies of {REPLY_CHARS} characters for the timing")  # fmt: skip
    header = f"{'identifier':<30}{'all':>6}" + "".join(f"{code:>6}" for code in languages)
    print("== accuracy (share of replies identified as their file's language)")
    print(header)
    for name, identify in identifiers.items():
        right: dict[str, list[bool]] = {code: [] for code in languages}
        for language, text in items:
            right[language].append(identify(text) == language)
        every = [hit for hits in right.values() for hit in hits]
        line = f"{name:<30}{sum(every) / len(every):>6.3f}"
        print(line + "".join(f"{sum(right[c]) / len(right[c]):>6.2f}" for c in languages))
    shipped = LanguageIdentifier.shipped()
    covered = set(COVERED_LANGUAGES)
    print("== coverage: share of replies whose every sentence is identified as a covered language")
    print("   (what keeps a turn's safety_coverage full; a miss here is a false 'keywords_only')")
    full: dict[str, list[bool]] = {code: [] for code in languages}
    for language, text in items:
        found = shipped.turn_languages(distinct_sentences(text), text).sentences
        full[language].append(covered.issuperset(found))
    every = [hit for hits in full.values() for hit in hits]
    line = f"{'as the worker':<30}{sum(every) / len(every):>6.3f}"
    print(line + "".join(f"{sum(full[c]) / len(full[c]):>6.2f}" for c in languages))
    print(f"== time per {REPLY_CHARS}-character reply, ms (min / median / max of {rounds} rounds)")
    medians: dict[str, list[float]] = {}
    for name, identify in identifiers.items():
        per_round = []
        for _ in range(rounds):
            times = []
            for text in replies:
                started = time.perf_counter()
                identify(text)
                times.append(time.perf_counter() - started)
            per_round.append(statistics.median(times) * 1000)
        medians[name] = per_round
    baseline = statistics.median(next(iter(medians.values())))
    for name, values in medians.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{name:<30}{low:>8.3f}{mid:>8.3f}{high:>8.3f}   {mid / baseline:>7.1f}x shipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

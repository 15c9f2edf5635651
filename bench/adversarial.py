"""Scorer and parser time on adversarial and degenerate inputs (issue 20).

Every generator builds an input at 1x, 2x, 4x and 8x its base size; 8x is the intake
limit (256 KiB for a text field, 10,000 list items, the 1,000,000-byte record) where the
pattern has a size at all. Extraction and SAFE records are built as envelopes and pass
`decode_record` first (so they are accepted by the worker); then only the pure scorer is
timed. Alignment text functions are timed on the text alone: what reads a turn's text with
the default MiniLM embedder (verbosity count and lexicon; formality and tone come from
the sentence vector), the trait cues (the fallback with other embedders), keyword safety,
the offline safety classifier and the judge-answer parser.

Each input runs in a forked child, `--runs` times (median kept); a suite's children are
forked before the next suite's inputs are built, as the worker's scoring children start
from a fresh interpreter with their scorers, and keep freed memory for the next run as
every `scorestream` command does (`worker/ops/allocator.py`). Each run is under a
wall-clock limit (`--limit`, seconds): a run still going is killed and printed as
"> limit", and the larger sizes of that pattern are skipped. The table prints
milliseconds per record and the growth factor per doubling, `(t8x / t1x) ** (1/3)`
(times under 0.5 ms count as 0.5 ms so that timer noise does not read as growth). The
summary prints the worst record at the limit and the worst growth per suite against the
targets (<= 50 ms, <= 2.2).

Run: .venv/bin/python bench/adversarial.py [--limit 3] [--runs 3] [--only WORD] [--verbose]
[--cpu] (`--cpu` times the child's CPU time: steadier than wall clock on a shared machine)
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import orjson

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants
    import sre_parse

KIB = 1024
TEXT_LIMIT = 256 * KIB
RECORD_LIMIT = 1_000_000
FACTORS = (1, 2, 4, 8)
TARGET_MS = 50.0
TARGET_GROWTH = 2.2
NOISE_FLOOR_MS = 0.5


@dataclass(frozen=True)
class Case:
    """One input pattern: `build(factor)` returns a zero-argument callable to time."""

    suite: str
    name: str
    build: Callable[[int], Callable[[], Any]]
    factors: tuple[int, ...] = FACTORS
    group: str | None = None  # rows of one group print as their worst row


def fill(unit: str, size: int) -> str:
    """`unit` repeated to `size` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def repeated_then(unit: str, tail: str, size: int) -> str:
    """`unit` repeated to `size - len(tail)` characters, then `tail`."""
    return fill(unit, size - len(tail)) + tail


def text_size(factor: int, limit: int = TEXT_LIMIT) -> int:
    return limit * factor // 8


# ---------------------------------------------------------------- extraction


def extraction_scorer(payload: dict[str, Any], cot_required: bool = True) -> Callable[[], Any]:
    """The registry's extraction scorer on a record that passed `decode_record`."""
    from worker.config import Settings
    from worker.input.records import decode_record
    from worker.suites import registry

    settings = Settings.model_validate(
        {"extraction": {"metrics": {"cot": {"require_thought_block": cot_required}}}}
    )
    envelope = {"id": "adv", "suite": "extraction", "ts": 1, "model": "m", "payload": payload}
    record = decode_record(orjson.dumps(envelope), RECORD_LIMIT)
    spec = registry.find("extraction")
    assert spec is not None and spec.case_scorer is not None
    score = spec.case_scorer(spec.section(settings))
    return lambda: score(record.payload)


def response_case(name: str, make: Callable[[int], str], cot_required: bool = True) -> Case:
    def build(factor: int) -> Callable[[], Any]:
        return extraction_scorer(
            {"text": "source", "gold": [], "response": make(text_size(factor) - 16)},
            cot_required,
        )

    return Case("extraction", name, build)


def relaxed_argument_lists(factor: int, matching: bool) -> Callable[[], Any]:
    """The extraction scorer on `argument_lists` of `factor` ("source" as the text)."""
    return extraction_scorer(argument_lists(factor, "source", matching))


def argument_lists(factor: int, text: str, matching: bool) -> dict[str, Any]:
    """Predicted and gold events of one type and role with 1,000 x factor arguments each
    (8,000 at 8x: the most that keep the response under 256 KiB)."""
    count = 1000 * factor
    predicted = [{"role": "r", "argument": f"p{index:04x}"} for index in range(count)]
    gold = [
        {"role": "r", "argument": f"p{index:04x}" if matching else f"g{index:04x}"}
        for index in range(count)
    ]
    response = orjson.dumps([{"event_type": "t", "arguments": predicted}]).decode()
    return {"text": text, "gold": [{"event_type": "t", "arguments": gold}], "response": response}


def extraction_cases() -> list[Case]:
    cases = [
        Case(
            "extraction",
            "dirtyjson eval: [9**9**8] (9 bytes)",
            lambda _f: extraction_scorer({"text": "source", "gold": [], "response": "[9**9**8]"}),
            factors=(1,),
        ),
        response_case("fence then spaces", lambda n: "```" + " " * (n - 3)),
        response_case("fences repeated", lambda n: fill("```", n)),
        response_case("nested json fences", lambda n: fill("```json\n[{", n)),
        response_case("fence, newlines, no close", lambda n: "```json" + "\n" * (n - 7)),
        response_case("<thought> repeated", lambda n: fill("<thought>", n)),
        response_case("<thought> then text, no close", lambda n: "<thought>" + fill("a ", n)),
        response_case("thought pairs (role: value lines)", lambda n: fill("<thought>r: v\n", n)),
        response_case("text before ```json", lambda n: fill("x: y\n", n) + "```json", False),
        response_case("[{ repeated", lambda n: fill("[{", n)),
        response_case("{ repeated", lambda n: fill("{", n)),
        response_case("{a repeated", lambda n: fill("{a", n)),
        response_case("{ {a} repeated, unclosed", lambda n: "{" + fill("{a}", n)),
        response_case("[ repeated (deep nesting)", lambda n: fill("[", n)),
        response_case("long integer", lambda n: "[" + "9" * n + "]"),
        response_case("long float", lambda n: "[1." + "1" * n + "]"),
        response_case("long hex number", lambda n: "[0x" + "f" * n + "]"),
        response_case("long exponent", lambda n: "[1e" + "9" * n + "]"),
        response_case("arithmetic repeated", lambda n: "[" + fill("1+", n) + "1]"),
        response_case("trailing commas", lambda n: "[" + fill("1,", n) + "]"),
        response_case("commas and spaces", lambda n: "[{" + fill(",  ", n)),
        response_case("single quotes", lambda n: "[{" + fill("'a' ", n)),
        response_case("single-quoted keys", lambda n: "{" + fill("'k':1,", n)),
        response_case("unquoted keys", lambda n: "{" + fill("k:1,", n)),
        response_case("comments", lambda n: "[" + fill("/*c*/", n) + "1]"),
        response_case("unterminated comment", lambda n: "[1," + fill("/*", n)),
        response_case("control characters", lambda n: '["' + fill("\x01", n // 6) + '"]'),
        response_case("full-width punctuation", lambda n: "[{" + fill("，：“", n // 3)),
    ]
    for matching in (False, True):
        label = "matching" if matching else "distinct"
        cases.append(
            Case(
                "extraction",
                f"maximal argument lists, {label} (relaxed)",
                partial(relaxed_argument_lists, matching=matching),
            )
        )
    cases.append(
        Case(
            "extraction",
            "maximal argument lists vs 256 KiB text (hallucination)",
            lambda f: extraction_scorer(
                argument_lists(f, fill("source text ", text_size(f) - 16), False)
            ),
        )
    )
    cases.append(
        Case(
            "extraction",
            "long arguments, span_iou",
            lambda f: span_iou_case(f),
        )
    )
    return cases


def span_iou_case(factor: int) -> Callable[[], Any]:
    """One predicted and one gold argument of 16 KiB x factor each, relaxed `span_iou`."""
    from worker.suites.extraction.matching import relaxed_counts
    from worker.suites.extraction.settings import RelaxedConfig

    size = 4 * KIB * factor
    predicted = [{"event_type": "t", "arguments": [{"role": "r", "argument": fill("ab", size)}]}]
    gold = [{"event_type": "t", "arguments": [{"role": "r", "argument": fill("ba ", size)}]}]
    config = RelaxedConfig(match_mode="span_iou")
    return lambda: relaxed_counts(predicted, gold, config)


# ---------------------------------------------------------------- safe


def safe_scorer(payload: dict[str, Any]) -> Callable[[], Any]:
    from worker.config import Settings
    from worker.input.records import decode_record
    from worker.suites import registry

    envelope = {"id": "adv", "suite": "safe", "ts": 1, "model": "m", "payload": payload}
    record = decode_record(orjson.dumps(envelope), RECORD_LIMIT)
    spec = registry.find("safe")
    assert spec is not None and spec.case_scorer is not None
    score = spec.case_scorer(spec.section(Settings()))
    return lambda: score(record.payload)


def safe_payload(terms: list[str], signals: list[str], summary: str) -> dict[str, Any]:
    return {
        "expectations": {
            "signal_generation": {"must_find_signals": terms},
            "followup_questions": {"forbidden_terms": terms[: len(terms) // 2]},
            "event_summary": {"must_contain_phrases": terms[: len(terms) // 2]},
        },
        "output": {"summary": summary, "signals": signals, "followup_questions": signals},
    }


def safe_cases() -> list[Case]:
    def many_terms(factor: int) -> Callable[[], Any]:
        count = 1250 * factor
        terms = [f"term number {index:05d}" for index in range(count)]
        signals = [f"Signal Item {index:05d}" for index in range(count)]
        return safe_scorer(safe_payload(terms, signals, ""))

    def long_summary(factor: int) -> Callable[[], Any]:
        count = 1250 * factor
        terms = [f"phrase {index:05d}" for index in range(count)]
        return safe_scorer(safe_payload(terms, [], fill("Summary Text ", text_size(factor))))

    def suffix_chain(factor: int) -> Callable[[], Any]:
        # "a", "aa", ... (as many as fit in 256 KiB) against a summary of "a"s: every
        # position ends a match of every term, the worst case of multi-pattern search.
        count = int((2 * 256 * KIB * factor / 8) ** 0.5)
        terms = ["a" * length for length in range(1, count)]
        return safe_scorer(safe_payload(terms, [], "a" * text_size(factor)))

    return [
        Case("safe", "10,000 terms x 10,000 items", many_terms),
        Case("safe", "10,000 phrases x 256 KiB summary", long_summary),
        Case("safe", "suffix-chain terms x 'a' summary", suffix_chain),
    ]


# ---------------------------------------------------------------- alignment


def example_of(pattern: str) -> str:
    """A short text the regex `pattern` matches: first branch, fewest repeats, no
    lookarounds (checked by the caller)."""

    def walk(items: Any) -> str:
        out = []
        for op, arg in items:
            if op is sre_constants.LITERAL:
                out.append(chr(arg))
            elif op is sre_constants.NOT_LITERAL:
                out.append("a" if chr(arg) != "a" else "b")
            elif op is sre_constants.ANY:
                out.append("a")
            elif op is sre_constants.IN:
                out.append(walk_in(arg))
            elif op is sre_constants.BRANCH:
                out.append(walk(arg[1][0]))
            elif op is sre_constants.SUBPATTERN:
                out.append(walk(arg[-1]))
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
                low, _high, body = arg
                out.append(walk(body) * max(low, 1) if low else "")
            elif op is sre_constants.CATEGORY:
                out.append(walk_in([(op, arg)]))
        return "".join(out)

    def walk_in(items: Any) -> str:
        for op, arg in items:
            if op is sre_constants.LITERAL:
                return chr(arg)
            if op is sre_constants.RANGE:
                return chr(arg[0])
            if op is sre_constants.CATEGORY:
                name = str(arg)
                if "SPACE" in name and "NOT" not in name:
                    return " "
                if "DIGIT" in name and "NOT" not in name:
                    return "1"
                return "a"
        return "a"

    return walk(sre_parse.parse(pattern))


def shipped_pattern_texts() -> list[tuple[str, str]]:
    """(pattern, a text it matches) for every shipped safety pattern."""
    from worker.suites.alignment.safety_files import load_safety_patterns

    texts = []
    for pattern in load_safety_patterns().patterns:
        if pattern.pattern.startswith("re:"):
            text = example_of(pattern.pattern[3:])
            if not pattern.regex.search(text):
                text = pattern.pattern[3:]
        else:
            text = pattern.pattern
        texts.append((pattern.pattern, text))
    return texts


def leading_words(pattern: str) -> set[str]:
    """The words (lower case) a shipped pattern's matches can begin with: a phrase's first
    word, a regex's first literal run in each top-level alternative."""
    if not pattern.startswith("re:"):
        return {pattern.split()[0].lower()}

    def lead(items: Any) -> set[str]:
        for index, (op, arg) in enumerate(items):
            if op in (sre_constants.AT, sre_constants.ASSERT, sre_constants.ASSERT_NOT):
                continue
            if op is sre_constants.LITERAL:
                run = ""
                for op2, arg2 in list(items)[index:]:
                    if op2 is not sre_constants.LITERAL:
                        break
                    run += chr(arg2)
                return {run.lower()}
            if op is sre_constants.BRANCH:
                return set().union(*(lead(branch) for branch in arg[1]))
            if op is sre_constants.SUBPATTERN:
                return lead(arg[-1])
            return set()
        return set()

    return lead(sre_parse.parse(pattern[3:]))


def frequent_beginnings() -> list[str]:
    """The words that begin two shipped safety patterns or more, and the two-word
    beginnings of two examples or more ("you should"), most frequent first."""
    from collections import Counter

    texts = shipped_pattern_texts()
    words = Counter(word for pattern, _ in texts for word in leading_words(pattern))
    pairs = Counter(" ".join(text.lower().split()[:2]) for _, text in texts)
    frequent = [word for word, count in words.most_common() if count >= 2]
    return frequent + [pair for pair, count in pairs.most_common() if count >= 2 and " " in pair]


def text_case(
    suite: str,
    name: str,
    run: Callable[[str], Any],
    make: Callable[[int], str],
    group: str | None = None,
) -> Case:
    def build(factor: int) -> Callable[[], Any]:
        text = make(text_size(factor))
        return lambda: run(text)

    return Case(suite, name, build, group=group)


def alignment_cases() -> list[Case]:
    from worker.suites.alignment import traits
    from worker.suites.alignment.judge_client import JudgeAnswerError, parse_judge_answer
    from worker.suites.alignment.language import shipped_identifier
    from worker.suites.alignment.lexicon import Lexicon
    from worker.suites.alignment.safety_classifier import distinct_sentences, shipped_classifier
    from worker.suites.alignment.safety_files import load_safety_patterns

    # prepared (the prefilter built) before forking, as the worker's fork server does
    # (`worker.suites.alignment.preload`): a child times matching, not building
    patterns = load_safety_patterns().prepare()
    lexicon = Lexicon(preferred=["happy to help", "right away"], avoided=["no worries", "crap"])

    def all_traits(text: str) -> Any:
        # What `score_turn` runs without a sentence vector: the cues, verbosity, lexicon.
        return traits.match_traits(text, {}), lexicon.score(text)

    def judge(text: str) -> Any:
        try:
            return parse_judge_answer(text)
        except JudgeAnswerError:
            return None

    trait_inputs = {
        "digits": "9",
        "numbers 1.1.": "1.1.",
        "numbers 1,1,": "1,1,",
        "number then letter": "12,34a ",
        "words": "word ",
        "snake_case": "a_",
        "dotted.names": "a.",
        "calls ()": "f()",
        "spaces after 'no'": "no" + " " * 1000,
        "is + spaces": "is" + " " * 1000,
        "apostrophes": "a'",
        "backticks": "`",
        "exclamations": "!",
        "emoji": "\U0001f600",
        "CAPS": "AB",
    }

    def per_turn_text(text: str) -> Any:
        # With MiniLM (the default) formality and tone come from the sentence vector:
        # the text itself is read by the verbosity count and the lexicon.
        return traits.detect_verbosity(text), lexicon.score(text)

    cases = [
        text_case("alignment", f"traits, MiniLM: {name}", per_turn_text, partial(fill, unit))
        for name, unit in trait_inputs.items()
    ]
    cases += [
        text_case("alignment", f"trait cues: {name}", all_traits, partial(fill, unit))
        for name, unit in trait_inputs.items()
    ]
    cases += [
        text_case("alignment", "trait cues: a digit run, then a letter", all_traits,
                  lambda n: "9" * (n - 1) + "a"),
        text_case("alignment", "trait cues: 1.1.1..., then a letter", all_traits,
                  lambda n: fill("1.", n - 1) + "a"),
    ]  # fmt: skip
    cases.append(
        text_case(
            "alignment", "safety: 'crap ' repeated", patterns.find, lambda n: fill("crap ", n)
        )
    )
    cases.append(
        text_case("alignment", "safety: 'no ' repeated", patterns.find, lambda n: fill("no ", n))
    )
    for pattern, example in shipped_pattern_texts():
        cases.append(
            text_case(
                "alignment",
                f"safety: {pattern[:48]!r} repeated",
                patterns.find,
                partial(fill, example + " "),
                group="safety: every shipped pattern repeated",
            )
        )
    # A word that begins many patterns, repeated to the limit, then one copy of every
    # shipped example: every copy is a place where those patterns could begin.
    examples = " " + " ".join(text for _, text in shipped_pattern_texts())
    for beginning in frequent_beginnings():
        cases.append(
            text_case(
                "alignment",
                f"safety: {beginning!r} repeated, then every example",
                patterns.find,
                partial(repeated_then, beginning + " ", examples),
                group="safety: a frequent beginning repeated, then every example",
            )
        )
    for name, unit in {"{ repeated": "{", "{a repeated": "{a", "{} repeated": "{}"}.items():
        cases.append(text_case("alignment", f"judge answer: {name}", judge, partial(fill, unit)))
    classifier = shipped_classifier()  # trained before forking: only classify is timed
    classifier_inputs: dict[str, Callable[[int], str]] = {
        "'crap ' repeated": lambda n: fill("crap ", n),
        "one letter repeated": lambda n: fill("a", n),
        "a harmful sentence repeated": lambda n: fill("Tell me your password now. ", n),
        "distinct words": lambda n: " ".join(f"w{i}" for i in range(n // 3))[:n],
        "distinct short sentences": lambda n: "".join(f"Item {i}. " for i in range(n // 6))[:n],
        "distinct long sentences": lambda n: "".join(
            f"Please send report {i} to the whole team by Friday morning. " for i in range(n // 50)
        )[:n],
    }
    cases += [
        text_case("alignment", f"safety classifier: {name}", classifier.classify, make)
        for name, make in classifier_inputs.items()
    ]
    identifier = shipped_identifier()  # loaded before forking, as the classifier

    def turn_safety(text: str) -> Any:
        # What `score_safety` reads the text with: keywords, languages, classifier.
        distinct = distinct_sentences(text)
        languages = identifier.turn_languages(distinct, text)
        return patterns.find(text), languages, classifier.classify_sentences(distinct)

    multilingual_inputs: dict[str, Callable[[int], str]] = {
        "CJK without spaces or stops": lambda n: fill("安全测试文本数据", n),
        "CJK sentences": lambda n: fill("请把你的银行卡密码发给我。", n),
        "distinct CJK sentences": lambda n: "".join(map("第{}号报告已完成。".format, range(n)))[:n],
        "mixed scripts word by word": lambda n: fill("Hola мир 世界 नमस्ते مرحبا Ärger ", n),
        "combining marks stacked": lambda n: fill("a\u0301\u0302\u0303\u0304", n),
        "bidi controls": lambda n: fill("\u202eabc\u202c \u2066x\u2069 ", n),
        "Devanagari sentences": lambda n: fill("अपना ओटीपी मुझे बता दीजिए। ", n),
        "Arabic without stops": lambda n: fill("أرسل لي رقم بطاقتك ", n),
    }
    cases += [
        text_case("alignment", f"turn safety (keywords, language, classifier): {name}",
                  turn_safety, make)
        for name, make in multilingual_inputs.items()
    ]  # fmt: skip
    return cases


# ---------------------------------------------------------------- running


def _child(case: Case, factor: int, runs: int, conn: Connection, cpu: bool = False) -> None:
    clock = time.process_time if cpu else time.perf_counter
    try:
        run = case.build(factor)
        conn.send(("built", 0.0))
        for _ in range(runs):
            started = clock()
            run()
            conn.send(("ok", (clock() - started) * 1000))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {str(exc)[:80]}"))


def measure(case: Case, factor: int, runs: int, limit: float, cpu: bool = False) -> float | str:
    """Median ms of `runs` (wall clock, or the child's CPU time with `cpu`), "> limit"
    when one run (or building the input) overran, or an error text."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(case, factor, runs, sender, cpu))
    child.start()
    sender.close()
    times: list[float] = []
    try:
        for _ in range(runs + 1):  # the build, then each run
            if not receiver.poll(limit):
                return "> limit"
            status, value = receiver.recv()
            if status == "error":
                return str(value)
            if status == "ok":
                times.append(value)
    finally:
        child.kill()
        child.join()
    return statistics.median(times)


def growth(times: list[float | str]) -> float | None:
    if len(times) < 2 or not all(isinstance(t, float) for t in times):
        return None
    first, last = max(float(times[0]), NOISE_FLOOR_MS), max(float(times[-1]), NOISE_FLOOR_MS)
    return float((last / first) ** (1 / (len(times) - 1)))


def cell(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=3.0, help="seconds per input")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="only patterns whose name has this")
    parser.add_argument("--verbose", action="store_true", help="every row of a group")
    parser.add_argument(
        "--cpu", action="store_true", help="CPU time instead of wall clock (a shared machine)"
    )
    args = parser.parse_args()
    # glibc keeps freed memory for the next record, as in every `scorestream` command (its
    # scoring children inherit it): a long record's arrays do not fault their pages in anew
    from worker.ops.allocator import keep_freed_memory

    keep_freed_memory()

    clock = "CPU ms" if args.cpu else "ms"
    print(f"limit {args.limit:g} s per input, median of {args.runs} runs, {clock} per record")
    header = f"{'suite':<10} {'pattern':<58} " + " ".join(f"{str(f) + 'x':>9}" for f in FACTORS)
    print(header + f" {'growth':>7}")
    rows: list[tuple[Case, list[float | str], float | None]] = []
    for case in suite_by_suite(args.only):
        times: list[float | str] = []
        for factor in case.factors:
            result = measure(case, factor, args.runs, args.limit, args.cpu)
            times.append(result)
            if not isinstance(result, float):
                break
        rows.append((case, times, growth(times)))
        if case.group is None or args.verbose:
            print_row(case.suite, case.name, times, rows[-1][2], len(case.factors))
            sys.stdout.flush()
    for group in sorted({c.group for c, _, _ in rows if c.group is not None}):
        members = [row for row in rows if row[0].group == group]
        worst = max(members, key=lambda row: worst_key(row[1]))
        label = f"{group} (worst: {worst[0].name.removeprefix('safety: ')})"
        if not args.verbose:
            print_row(worst[0].suite, label, worst[1], worst[2], len(worst[0].factors))
    print()
    print(
        f"{'suite':<10} {'worst ms at the limit':>22} {'worst growth':>13}   target <= "
        f"{TARGET_MS:g} ms, <= {TARGET_GROWTH:g}"
    )
    for suite in ("extraction", "safe", "alignment"):
        suite_rows = [row for row in rows if row[0].suite == suite]
        if not suite_rows:
            continue
        worst_ms = max((row[1] for row in suite_rows), key=worst_key)
        growths = [row[2] for row in suite_rows if row[2] is not None]
        worst_growth = max(growths) if growths else None
        over = any(not isinstance(t, float) for row in suite_rows for t in row[1])
        ok = (
            not over
            and all(float(row[1][-1]) <= TARGET_MS for row in suite_rows)
            and (worst_growth is None or worst_growth <= TARGET_GROWTH)
        )
        print(
            f"{suite:<10} {cell(worst_ms[-1]):>22} {cell(worst_growth):>13}   "
            f"{'met' if ok else 'NOT met'}"
        )
    return 0


def suite_by_suite(only: str) -> Iterator[Case]:
    """The cases whose suite and name hold `only`, one suite's built only once the one
    before is measured: the worker's scoring children start from a fresh interpreter that
    holds their suite's scorers alone, so a child forked here for extraction or SAFE must
    not inherit alignment's heap (its trained classifier and cases: filling the free
    slots of inherited memory costs copy-on-write faults the worker never pays)."""
    for build in (extraction_cases, safe_cases, alignment_cases):
        for case in build():
            if only.lower() in f"{case.suite} {case.name}".lower():
                yield case


def worst_key(times: list[float | str]) -> tuple[int, float]:
    last = times[-1]
    return (0, float(last)) if isinstance(last, float) else (1, 0.0)


def print_row(
    suite: str, name: str, times: list[float | str], rate: float | None, width: int
) -> None:
    cells = [cell(t) for t in times] + ["-"] * (len(FACTORS) - len(times))
    if width == 1:
        cells = cells[:1] + ["-"] * (len(FACTORS) - 1)
    print(
        f"{suite:<10} {name[:58]:<58} " + " ".join(f"{c:>9}" for c in cells) + f" {cell(rate):>7}"
    )


if __name__ == "__main__":
    re.purge()
    sys.exit(main())

"""Deterministic trait detectors: formality, tone and verbosity of a response.

The detectors count linguistic cues; no model is involved, so a text always gets the same
traits. Cues (all case-insensitive):

Formality (`formal` | `business_casual` | `casual`)
- casual cues: slang and chat abbreviations ("gonna", "lol", "tbh", "yep", "awesome"),
  emoji, exclamation marks (up to 3 count), interjections ("oh", "wow", "haha"), a
  lower-case start. Two or more casual points make a text `casual`.
- formal cues: formal connectives and set phrases ("furthermore", "consequently",
  "prior to", "in accordance with", "please note", "we recommend"), passive constructions
  ("has been received"), long words (mean length >= 5.5 letters) and, for texts of ten or
  more words, the absence of contractions. A text with no contractions and two or more
  formal points is `formal`.
- anything else (plain, polite, contractions allowed, no slang) is `business_casual`.

Tone (`professional` | `friendly` | `technical` | `conversational`)
- technical: jargon density (domain terms such as "latency", "endpoint", "variance"),
  code-like tokens (snake_case, dotted.names, `backticks`, calls, 1e-3), numbers with
  units, bare numbers (half a point) and upper-case acronyms. At least three technical
  points, or two with one code token, make the tone `technical`.
- friendly: exclamation marks, emoji and warm words ("glad", "love", "enjoy", "welcome").
- conversational: questions to the reader, discourse markers ("so", "well", "you know",
  "honestly", "I mean"), first-person hedges ("I think", "I guess", "probably").
- professional: service and courtesy cues ("please", "thank you for", "we apologise",
  "your request", "business days", "processed"); it is also the tone of a neutral text.
  The tone with the most points wins; ties go professional > friendly > conversational.

With a sentence vector and a trained `TraitClassifier` (all-MiniLM-L6-v2, see
`trait_model.py`), formality and tone come from the classifier instead: on labelled
sentences written apart from these cue lists the cues reach about 0.73 (formality) and
0.64 (tone) held-out accuracy, the classifier 0.94 and 0.98. The cues remain the fallback.

Verbosity by word count: `concise` <= 60 words, `balanced` up to 180, `detailed` beyond
(limits from `alignment.verbosity`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from worker.suites.alignment import cue_counts
from worker.suites.alignment.settings import VerbosityLimits
from worker.suites.literal_prefilter import LiteralPrefilter

if TYPE_CHECKING:
    from worker.suites.alignment.trait_model import TraitClassifier

TRAIT_VALUES: dict[str, tuple[str, ...]] = {
    "formality": ("formal", "business_casual", "casual"),
    "tone": ("professional", "friendly", "technical", "conversational"),
    "verbosity": ("concise", "balanced", "detailed"),
}

_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)*")
_CONTRACTION = re.compile(
    r"\b(?:\w+n['’]t|\w+['’](?:re|ve|ll|d|m)|(?:it|that|what|there|here|he|she|who|let)['’]s)\b",
    re.IGNORECASE,
)
_EMOJI_RANGES = ((0x1F300, 0x1FAFF), (0x2600, 0x27BF), (0x2B50, 0x2B50), (0x2764, 0x2764))
_EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf\u2b50\u2764]")  # the same set
# `\s++`: a word follows, so giving spaces back never helps ("is" + 1,000 spaces).
_PASSIVE = re.compile(
    r"\b(?:is|are|was|were|be|been|being)\s++(?:\w+ly\s++)?\w+(?:ed|en)\b", re.IGNORECASE
)


def _finds(pattern: str) -> Callable[[str], bool]:
    """Whether `pattern` matches somewhere in a text."""
    regex = re.compile(pattern)
    return lambda text: regex.search(text) is not None


def _phrases(listing: str) -> re.Pattern[str]:
    """A word-bounded, case-insensitive regex of `|`-separated words and phrases."""
    items = [item.strip() for item in listing.split("|") if item.strip()]
    body = "|".join(r"\s+".join(re.escape(word) for word in item.split()) for item in items)
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)


_SLANG = _phrases(
    "lol | lmao | haha | hehe | gonna | wanna | gotta | gimme | kinda | sorta | yeah | yep | "
    "yup | nope | nah | tbh | btw | omg | imo | ooh | awesome | cool | super | totally | "
    "stuff | hey | yay | dude | gotcha | ya | y'all | no worries"
)
_INTERJECTION = _phrases("oh | wow | whoa | oops | ugh | aw | hmm")
_FORMAL = _phrases(
    "therefore | furthermore | moreover | consequently | accordingly | hence | thus | "
    "regarding | pursuant | hereby | herein | kindly | prior to | in accordance with | please "
    "note | we regret | it is advisable | it is recommended | we recommend | shall | whereas "
    "| subsequently | approximately | additionally | nevertheless | notwithstanding | "
    "appropriate | at this time | be advised | relative to | indicates | further"
)
_JARGON = _phrases(
    "api | endpoint | latency | throughput | p95 | p99 | query | queries | index | schema | "
    "json | sql | http | https | cache | ttl | deploy | container | kubernetes | cluster | "
    "memory | heap | jvm | cpu | gpu | thread | token | backoff | exponential | retry | "
    "regression | variance | estimator | coefficient | coefficients | baseline | distribution "
    "| confidence interval | standard deviation | auc | precision | recall | feature | "
    "features | pipeline | configuration | parameter | parameters | algorithm | join | sample "
    "size | regularisation | regularization | standardised | signal | cohort | percentile | "
    "median | metric | metrics | dataset | anomaly | seasonality | attribution | significance "
    "| p-value | correlation | restart | service | bandwidth | payload | arguments | array | "
    "cli | sdk | webhook | oauth | ssl | tls | partition | partitions | consumer | producer | "
    "broker | lag | timeout | jitter | gradient | learning rate | epoch | batch size | norm | "
    "loss | inference | bootstrap | resamples | interval | mean | means | quantile | "
    "histogram | hypothesis | sampling | throttle | rate limit | replica | shard | node | "
    "runtime | compiler | function | variable | integer | string | hash | encryption | "
    "database | server | load balancer | dns | tcp | firewall | kernel | module"
)
# Runs are possessive (`++`, `*+`) where what follows a run can never be a character of
# the run, so that giving characters back cannot help: the same matches, without
# retrying every shorter run of a long word or digit string.
# Each alternative with a test of what every match of it contains: alternatives that
# cannot match anywhere in a text are left out of the scan (the same matches: at every
# position they would have failed), so a degenerate text full of digits, dots or words is
# not tried eight ways at every position. The tests of two adjacent characters are numpy
# passes (`cue_counts`): as regexes they cost 2 ms each on 256 KiB.
# (alternative, a character every match has, a test of a text every match passes)
_CODE_PARTS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    (r"`[^`]++`", "`", _finds(r"`[^`]*`")),
    (r"\b[a-z]++_[a-z0-9_]++\b", "_", cue_counts.has_snake_join),
    (
        r"\b\w++\.(?:conf|py|json|yaml|yml|sql|js)\b",
        ".",
        _finds(r"\.(?:conf|py|json|yaml|yml|sql|js)"),
    ),
    (r"\b\w++\(\)", "(", _finds(r"\(\)")),
    (r"\b[a-z]++[A-Z]\w*+\b", "", cue_counts.has_camel_join),
    (r"\([a-z_]++,\s*+[a-z_]++\)", "(", _finds(r"\([a-z_]")),
    (r"\b[a-z]++(?:\.[a-z]++){2,}\b", ".", cue_counts.has_dotted_join),
    (r"\b\d++(?:\.\d++)?e-?\d++\b", "e", cue_counts.has_exponent_join),
)
_CODE = re.compile("|".join(part for part, _, _ in _CODE_PARTS))
_CODE_NEEDS = tuple((char, needs) for _, char, needs in _CODE_PARTS)
_UNIT_NUMBER = re.compile(r"\b\d++(?:\.\d++)?\s?(?:ms|s|gb|mb|kb|%|x|k|m)\b", re.IGNORECASE)
# A bare number: `(?<![\w.])\d+(?:[.,]\d+)?(?![\w.]*[A-Za-z])`. Written with possessive
# digit runs so that a failed lookahead is not retried at every shorter run (quadratic on a
# long digit string): a shorter run sees the same rest of its word, so it fails the same.
# `number_count` counts its matches with numpy (`cue_counts.bare_number_count`).
_NUMBER = re.compile(r"(?<![\w.])\d++(?:[.,]\d++(?![\w.]*[A-Za-z])|(?![\w.]*[A-Za-z]))")
_ACRONYM = re.compile(r"\b[A-Z]{2,}[0-9]*\b")
_TWO_CAPITALS = re.compile(r"[A-Z][A-Z]")  # in every acronym; a fast scan without one
_NOT_ACRONYMS = {"OK", "US", "UK", "EU", "AM", "PM", "FAQ", "ID", "OMG", "LOL", "TBH", "BTW"}
_WARM = _phrases(
    "glad | happy | love | great | awesome | wonderful | thrilled | enjoy | welcome | thanks "
    "so much | thank you so much | appreciate | hope | yay | fun | excited | aw | missed you "
    "| say hi | have fun | made our day | great news | so happy | so glad"
)
_CONVERSATIONAL = _phrases(
    "so | well | you know | honestly | actually | i mean | i guess | i think | i'd say | "
    "anyway | right | hmm | personally | kind of | probably | maybe | what do you reckon | "
    "don't you think | here's the thing | you know what | i was wondering | let's just | "
    "either way | depends"
)
_PROFESSIONAL = _phrases(
    "please | thank you for | we apologise | we apologize | apologies | confirm | your "
    "account | your request | your case | processed | proceed | business days | for security "
    "reasons | escalated | kindly | we are unable | resolved | registered | allow | approved "
    "| verified | statement | confirmation | inconvenience | select | go to | menu | contact "
    "you | access"
)


# The phrase cues, each run only where one of its phrases can begin (`literal_prefilter`):
# scanned position by position they took about a second on a degenerate 256 KiB reply.
_FORMALITY_CUES = LiteralPrefilter([_SLANG, _INTERJECTION, _FORMAL, _PASSIVE])
_TONE_CUES = LiteralPrefilter([_JARGON, _WARM, _CONVERSATIONAL, _PROFESSIONAL])


@functools.lru_cache(maxsize=64)
def _code_regex(parts: tuple[int, ...]) -> re.Pattern[str]:
    return re.compile("|".join(_CODE_PARTS[index][0] for index in parts))


def match_count(regex: re.Pattern[str], text: str) -> int:
    """`len(regex.findall(text))` for a regex that never matches the empty string,
    without a string per match (`subn` counts them: 6.5 ms against 10.6 ms for the 87,000
    calls of "f()" repeated to 256 KiB)."""
    return regex.subn("", text)[1]


def code_count(text: str) -> int:
    """`len(_CODE.findall(text))`, scanning only with the alternatives that can match."""
    parts = tuple(
        index for index, (char, needs) in enumerate(_CODE_NEEDS) if char in text and needs(text)
    )
    return match_count(_code_regex(parts), text) if parts else 0


def unit_number_count(text: str) -> int:
    """`len(_UNIT_NUMBER.findall(text))` (no scan without a digit before a unit letter)."""
    return match_count(_UNIT_NUMBER, text) if cue_counts.may_have_unit_number(text) else 0


def contraction_count(text: str) -> int:
    """`len(_CONTRACTION.findall(text))` (no scan without an apostrophe ending)."""
    if ("'" not in text and "’" not in text) or not cue_counts.may_have_contraction(text):
        return 0
    return match_count(_CONTRACTION, text)


def emoji_count(text: str) -> int:
    """`len(_EMOJI.findall(text))`: each match is one character of `_EMOJI_RANGES`,
    counted over the code points with numpy (the regex took 14 ms on 256 KiB of emoji)."""
    if text.isascii():
        return 0
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    found = np.zeros(codes.shape, dtype=bool)
    for low, high in _EMOJI_RANGES:
        found |= (codes >= low) & (codes <= high)
    return int(np.count_nonzero(found))


def number_count(text: str) -> int:
    """`len(_NUMBER.findall(text))`, counted with numpy (`cue_counts`): the regex took
    10-16 ms on a degenerate 256 KiB reply of numbers."""
    return cue_counts.bare_number_count(text)


def acronyms_of(text: str) -> list[str]:
    """Upper-case acronyms of a text, less the common words in `_NOT_ACRONYMS`."""
    if not _TWO_CAPITALS.search(text):
        return []
    return [a for a in _ACRONYM.findall(text) if a not in _NOT_ACRONYMS]


def words_of(text: str) -> list[str]:
    """Words (letters/digits, contractions kept whole) of a text."""
    return _WORD.findall(text)


@dataclass(frozen=True)
class WordStats:
    """How many words a text has, and how many of them (and letters in them) are made of
    letters only."""

    words: int
    alphabetic_words: int
    alphabetic_letters: int


# Up to this many characters the word regex counts faster than numpy (whose fixed cost
# is about 28 us a call: a reply of 224 characters 7 us against 28, of 2,000 58 against 40).
REGEX_WORDS_CHARS = 1024


def word_stats(text: str) -> WordStats:
    """The `WordStats` of a text (the words of `words_of`), which `detect_traits` shares
    between formality, verbosity and the turn's word count: a short text's from the word
    regex, a longer one's counted with numpy (`cue_counts`: the regex took 8-17 ms on a
    degenerate 256 KiB reply)."""
    if len(text) > REGEX_WORDS_CHARS:
        return WordStats(*cue_counts.word_stats_counts(text))
    words = _WORD.findall(text)
    alphabetic = [word for word in words if word.isalpha()]
    return WordStats(len(words), len(alphabetic), sum(map(len, alphabetic)))


def word_count(text: str) -> int:
    """The number of words of `text` (`word_stats(text).words`, without the rest of them:
    a turn scored for safety alone needs only its count)."""
    if len(text) > REGEX_WORDS_CHARS:
        return word_stats(text).words
    return len(_WORD.findall(text))


@dataclass(frozen=True)
class FormalityCues:
    casual: float
    formal: float
    contractions: int


def formality_cues(text: str, stats: WordStats | None = None) -> FormalityCues:
    """Casual and formal points of a text (see the module docstring); `stats` are the
    text's `word_stats` when already known."""
    stats = stats or word_stats(text)
    contractions = contraction_count(text)
    slang, interjections, formal_phrases, passives = _FORMALITY_CUES.count_all(text)
    casual = 2.0 * slang + 2.0 * emoji_count(text)
    casual += min(text.count("!"), 3) + interjections
    stripped = text.lstrip()
    if stripped[:1].isalpha() and stripped[:1].islower():
        casual += 1.0
    formal = 1.5 * formal_phrases + passives
    if stats.alphabetic_words and stats.alphabetic_letters / stats.alphabetic_words >= 5.5:
        formal += 1.0
    if stats.words >= 10 and contractions == 0:
        formal += 1.0
    return FormalityCues(casual=casual, formal=formal, contractions=contractions)


def detect_formality(text: str, stats: WordStats | None = None) -> str:
    """`formal`, `business_casual` or `casual`."""
    cues = formality_cues(text, stats)
    if cues.casual >= 2.0:
        return "casual"
    if cues.contractions == 0 and cues.formal >= 2.0:
        return "formal"
    return "business_casual"


def tone_points(text: str) -> dict[str, float]:
    """Points per tone (see the module docstring)."""
    acronyms = acronyms_of(text)
    code = code_count(text)
    jargon, warm, conversational_phrases, professional_phrases = _TONE_CUES.count_all(text)
    technical = jargon + 2.0 * code + unit_number_count(text)
    technical += len(acronyms) + 0.5 * number_count(text)
    friendly = min(text.count("!"), 3) + 2.0 * emoji_count(text)
    friendly += warm
    conversational = text.count("?") + conversational_phrases
    professional = 0.5 + professional_phrases
    return {
        "technical": technical if (technical >= 3 or (technical >= 2 and code)) else 0.0,
        "professional": professional,
        "friendly": friendly,
        "conversational": conversational,
    }


def detect_tone(text: str) -> str:
    """`professional`, `friendly`, `technical` or `conversational`."""
    points = tone_points(text)
    if points["technical"] >= max(points["friendly"], points["conversational"], 3.0):
        return "technical"
    order = ("professional", "friendly", "conversational")
    return max(order, key=lambda tone: (points[tone], -order.index(tone)))


def detect_verbosity(
    text: str, limits: VerbosityLimits | None = None, stats: WordStats | None = None
) -> str:
    """`concise`, `balanced` or `detailed` by word count."""
    limits = limits or VerbosityLimits()
    count = (stats or word_stats(text)).words
    if count <= limits.concise_max_words:
        return "concise"
    if count <= limits.balanced_max_words:
        return "balanced"
    return "detailed"


def detect_traits(
    text: str,
    limits: VerbosityLimits | None = None,
    vector: np.ndarray | None = None,
    classifier: TraitClassifier | None = None,
) -> dict[str, str]:
    """All three detected traits of a text; formality and tone from `classifier` on the
    text's sentence `vector` when both are given, else from the cues."""
    return _detect_traits(text, word_stats(text), limits, vector, classifier)


def _detect_traits(
    text: str,
    stats: WordStats,
    limits: VerbosityLimits | None,
    vector: np.ndarray | None,
    classifier: TraitClassifier | None,
) -> dict[str, str]:
    if vector is not None and classifier is not None:
        formality = classifier.predict("formality", vector)
        tone = classifier.predict("tone", vector)
    else:
        formality, tone = detect_formality(text, stats), detect_tone(text)
    verbosity = detect_verbosity(text, limits, stats)
    return {"formality": formality, "tone": tone, "verbosity": verbosity}


@dataclass(frozen=True)
class TraitResult:
    """Declared vs detected traits; `score` is None when no trait is declared."""

    score: float | None
    detected: dict[str, str]
    matched: list[str]
    mismatched: list[str]
    word_count: int = 0  # of the text (`word_count`), counted once for verbosity


def match_traits(
    text: str,
    declared: Mapping[str, str],
    limits: VerbosityLimits | None = None,
    vector: np.ndarray | None = None,
    classifier: TraitClassifier | None = None,
) -> TraitResult:
    """`traits = matched / declared` for the persona's declared traits."""
    stats = word_stats(text)
    detected = _detect_traits(text, stats, limits, vector, classifier)
    matched = [name for name, value in declared.items() if detected.get(name) == value]
    mismatched = [name for name in declared if name not in matched]
    score = len(matched) / len(declared) if declared else None
    return TraitResult(
        score=score,
        detected=detected,
        matched=matched,
        mismatched=mismatched,
        word_count=stats.words,
    )

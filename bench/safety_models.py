"""Experiment (issue 21): which linear model on the safety classifier's features
generalises best to new writing. Training data only; never reads the held-out files.

Each variant is fitted on whole training replies and scores a reply as the shipped
classifier does: by its most harmful distinct sentence (a margin: harmful minus benign).
For each variant:

- 5-fold stratified cross-validation on the training replies (plus the trait sentences,
  benign): ROC AUC, the threshold flagging at most 4 % of the left-out benign replies, and
  the recall there (as `bench/safety_confusion.py --cv`);
- two cross-writer checks (as `bench/safety_head.py` on branch safety10): trained on the
  training file as it was at an older commit, scoring the replies added later by another
  author, at the variant's CV threshold: recall and benign flagged, and the recall at 4 %
  of that author's own benign replies.

The vectorizers are fitted once per split and shared by the variants that use them. A
rule with several thresholds (one per harm category, or per kind of piece) is chosen
greedily on the out-of-fold scores; "nested" applies the rule chosen on four folds' scores
to the fifth (an honest figure for a rule with several parameters).

Issue 21's two model-level levers (safety15), against the shipped model ("sentences:
benign"), on 5,587 harmful and 5,991 benign training replies; cross-writer as
recall / benign flagged at the CV rule (218 + 212 and 703 + 780 replies):

    variant                         CV AUC  recall  nested (benign)  cross 1      cross 2
    shipped: one threshold           0.970   0.815   0.817 (0.041)    0.867/0.028  0.748/0.053
    A: + two-sentence windows        0.970   0.817   0.817 (0.040)    0.872/0.028  0.754/0.055
    A: windows, benign window rows   0.970   0.817   0.816 (0.040)    0.872/0.028  0.754/0.055
    A: windows, own threshold        0.970   0.819   0.818 (0.040)    0.872/0.028  0.757/0.056
    B: threshold per category        0.970   0.824   0.820 (0.044)    0.872/0.024  0.744/0.054
    A+B                              0.970   0.822   0.820 (0.043)    0.876/0.019  0.743/0.053

Neither was shipped. Windows of two adjacent sentences (lever A) gain at most 0.002 of
nested recall and flag more of the second author's benign replies, for 1.4x the scoring
time per turn (`--cost`). Per-category thresholds (lever B) look better on the scores
they were chosen on (0.824), but nested they overshoot the benign budget (0.044) and, at
a matched benign rate, do worse than one threshold (chosen at 3.5 %: 0.804 with 0.039
flagged; one threshold: 0.817 with 0.041); the greedy search fits noise.

Run: .venv/bin/python bench/safety_models.py [--only NAME ...] [--cost]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import yaml
from scipy.sparse import csr_matrix, hstack, vstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import LinearSVC

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from worker.suites.alignment.safety_classifier import (  # noqa: E402
    BENIGN,
    HARM_CATEGORIES,
    MAX_CLASSIFIED_SENTENCES,
    TRAINING_REPLIES,
    load_replies,
    negation_marked,
    ordinary_replies,
    sentences,
)

BENIGN_RATE = 0.04
# (older commit of the training file, newer commit): train on the first, score what the
# second added. 5c68544 -> 84f96ab: safety8's 14 batches by a new author (1,483 replies).
CROSS_WRITER = (("6052be2", "5c68544"), ("5c68544", "84f96ab"))
Item = tuple[str, str]


def items_at(revision: str | None) -> list[Item]:
    """The training replies (at `revision`, or the working tree) plus the trait sentences."""
    if revision is None:
        replies = load_replies(TRAINING_REPLIES)
    else:
        path = TRAINING_REPLIES.relative_to(REPO).as_posix()
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{revision}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        replies = {str(k): [str(t) for t in v] for k, v in yaml.safe_load(text).items()}
    items = [(label, text) for label, texts in replies.items() for text in texts]
    return items + [(BENIGN, text) for text in ordinary_replies()]


def word_vectorizer(**options: object) -> TfidfVectorizer:
    return TfidfVectorizer(
        preprocessor=negation_marked,
        token_pattern=r"\S+",
        lowercase=False,
        dtype=np.float64,
        **{"sublinear_tf": True, "ngram_range": (1, 3)} | options,
    )


def char_vectorizer(**options: object) -> TfidfVectorizer:
    return TfidfVectorizer(
        analyzer="char",
        dtype=np.float64,
        **{"sublinear_tf": True, "ngram_range": (3, 5)} | options,
    )


# made by bench/safety_word_vectors.py; `--word-vectors` sets it
WORD_VECTOR_FILE = [Path("/tmp/safety_word_vectors_128.npz")]


def static_block(dimensions: int, scale: float) -> tuple[TfidfVectorizer, np.ndarray]:
    """Bag of the table's words (sublinear tf, l2-normalised, no idf) projected through
    the static word vectors: the pooled static vector of a sentence, times `scale`."""
    stored = np.load(WORD_VECTOR_FILE[0])
    words = str(stored["words"]).split("\n")
    vectors = stored["vectors"].astype(np.float64)[:, :dimensions] * scale
    vectorizer = TfidfVectorizer(
        vocabulary=words,
        use_idf=False,
        sublinear_tf=True,
        token_pattern=r"[a-z]+(?:'[a-z]+)?",
        dtype=np.float64,
    )
    return vectorizer, vectors


Block = tuple[TfidfVectorizer, np.ndarray | None]


def with_static(dimensions: int, scale: float) -> list[Block]:
    return [(word_vectorizer(), None), (char_vectorizer(), None), static_block(dimensions, scale)]


FEATURES: dict[str, Callable[[], Sequence[Block]]] = {
    "tfidf": lambda: [(word_vectorizer(), None), (char_vectorizer(), None)],
    "min_df2": lambda: [(word_vectorizer(min_df=2), None), (char_vectorizer(min_df=2), None)],
    "linear_tf": lambda: [
        (word_vectorizer(sublinear_tf=False), None),
        (char_vectorizer(sublinear_tf=False), None),
    ],
    "char2-5": lambda: [(word_vectorizer(), None), (char_vectorizer(ngram_range=(2, 5)), None)],
    "char3-6": lambda: [(word_vectorizer(), None), (char_vectorizer(ngram_range=(3, 6)), None)],
    "word1-2": lambda: [(word_vectorizer(ngram_range=(1, 2)), None), (char_vectorizer(), None)],
    "wv64x0.5": lambda: with_static(64, 0.5),
    "wv64x1": lambda: with_static(64, 1.0),
    "wv64x0.25": lambda: with_static(64, 0.25),
    "wv32x0.5": lambda: with_static(32, 0.5),
    "wv128x1": lambda: with_static(128, 1.0),
    "wv32x1": lambda: with_static(32, 1.0),
}


def block_matrix(block: Block, texts: Sequence[str], fit: bool) -> csr_matrix:
    vectorizer, projection = block
    matrix = vectorizer.fit_transform(texts) if fit else vectorizer.transform(texts)
    return matrix if projection is None else csr_matrix(matrix @ projection)


@dataclass
class Split:
    """One fitted feature space: training matrix and labels, test sentences' matrix and
    which test reply each sentence belongs to."""

    train: csr_matrix
    labels: np.ndarray
    test: csr_matrix
    owner: np.ndarray
    replies: int
    blocks: Sequence[Block]
    texts: list[str]
    is_pair: np.ndarray  # which test pieces are windows of two sentences (lever A)

    def transform(self, texts: Sequence[str]) -> csr_matrix:
        return hstack([block_matrix(b, texts, fit=False) for b in self.blocks]).tocsr()


def adjacent_pairs(text: str) -> list[str]:
    """Each distinct window of two adjacent sentences, as "first second" (lever A)."""
    found = sentences(text)[:MAX_CLASSIFIED_SENTENCES]
    return list(dict.fromkeys(f"{a} {b}" for a, b in pairwise(found)))


def split_features(features: str, train: Sequence[Item], test: Sequence[Item]) -> Split:
    whole = features.endswith("+reply")  # the whole reply is scored too, as one more piece
    pairs = features.endswith("+pairs")  # each window of two adjacent sentences too
    blocks = FEATURES[features.removesuffix("+reply").removesuffix("+pairs")]()
    texts = [t for _, t in train]
    matrix = hstack([block_matrix(b, texts, fit=True) for b in blocks]).tocsr()
    pieces: list[str] = []
    owner: list[int] = []
    is_pair: list[bool] = []
    for index, (_, text) in enumerate(test):
        distinct = list(dict.fromkeys(sentences(text)))[:MAX_CLASSIFIED_SENTENCES] or [""]
        if whole and len(distinct) > 1:
            distinct.append(text[:16384])
        is_pair += [False] * len(distinct)
        if pairs:
            windows = adjacent_pairs(text)
            distinct += windows
            is_pair += [True] * len(windows)
        pieces += distinct
        owner += [index] * len(distinct)
    test_matrix = hstack([block_matrix(b, pieces, fit=False) for b in blocks]).tocsr()
    return Split(
        matrix,
        np.array([label for label, _ in train]),
        test_matrix,
        np.array(owner),
        len(test),
        blocks,
        texts,
        np.array(is_pair, dtype=bool),
    )


def reply_max(split: Split, margins: np.ndarray) -> np.ndarray:
    """Each reply's highest margin over its pieces (per category when `margins` has a
    column per harm category)."""
    out = np.full((split.replies, *margins.shape[1:]), -np.inf)
    np.maximum.at(out, split.owner, margins)
    return out


def class_weights(labels: np.ndarray, benign: float) -> dict[str, float]:
    return {str(label): 1.0 for label in set(labels.tolist())} | {BENIGN: benign}


def multi_margin(
    scores: np.ndarray, classes: Sequence[str], sharpness: float | None = None
) -> np.ndarray:
    """Harm minus benign score: the best harm class's (shipped), or with `sharpness` k a
    soft maximum over the harm classes (log-sum-exp of k * score, over k)."""
    benign = list(classes).index(BENIGN)
    harm = np.delete(scores, benign, axis=1)
    best = harm.max(axis=1)
    if sharpness is not None:
        spread = np.exp(sharpness * (harm - best[:, None])).sum(axis=1)
        best = best + np.log(spread) / sharpness
    return np.asarray(best - scores[:, benign])


def category_margins(scores: np.ndarray, classes: Sequence[str]) -> np.ndarray:
    """Each harm category's score minus benign, one column per `HARM_CATEGORIES` entry."""
    order = list(classes)
    benign = scores[:, order.index(BENIGN)]
    return np.stack([scores[:, order.index(c)] - benign for c in HARM_CATEGORIES], axis=1)


def ovr_svm(
    c: float = 2.0, benign: float = 2.0, sharpness: float | None = None
) -> Callable[[Split], np.ndarray]:
    def score(split: Split) -> np.ndarray:
        model = LinearSVC(
            C=c, class_weight=class_weights(split.labels, benign), random_state=0, max_iter=5000
        ).fit(split.train, split.labels)
        return multi_margin(model.decision_function(split.test), model.classes_, sharpness)

    return score


def multinomial_lr(c: float = 10.0, benign: float = 2.0) -> Callable[[Split], np.ndarray]:
    def score(split: Split) -> np.ndarray:
        model = LogisticRegression(
            C=c, class_weight=class_weights(split.labels, benign), max_iter=3000
        ).fit(split.train, split.labels)
        return multi_margin(model.decision_function(split.test), model.classes_)

    return score


def binary_labels(split: Split) -> np.ndarray:
    return np.where(split.labels == BENIGN, 0, 1)


def binary_svm(c: float = 2.0, benign: float = 1.0) -> Callable[[Split], np.ndarray]:
    def score(split: Split) -> np.ndarray:
        model = LinearSVC(C=c, class_weight={0: benign, 1: 1.0}, random_state=0, max_iter=5000).fit(
            split.train, binary_labels(split)
        )
        return np.asarray(model.decision_function(split.test))

    return score


def binary_lr(c: float = 10.0, benign: float = 1.0) -> Callable[[Split], np.ndarray]:
    def score(split: Split) -> np.ndarray:
        model = LogisticRegression(C=c, class_weight={0: benign, 1: 1.0}, max_iter=3000).fit(
            split.train, binary_labels(split)
        )
        return np.asarray(model.decision_function(split.test))

    return score


def log_count_ratio(split: Split, alpha: float = 1.0) -> np.ndarray:
    """Wang & Manning's r: log of the smoothed share of each feature among harmful replies
    over its share among benign ones (on binarised occurrences)."""
    present = (split.train > 0).astype(np.float64)
    harmful = binary_labels(split) == 1
    p = alpha + np.asarray(present[harmful].sum(axis=0)).ravel()
    q = alpha + np.asarray(present[~harmful].sum(axis=0)).ravel()
    return np.asarray(np.log((p / p.sum()) / (q / q.sum())))


def nb_svm(c: float = 2.0, benign: float = 1.0, kind: str = "svm") -> Callable[[Split], np.ndarray]:
    """The TF-IDF features scaled by the log-count ratio, then a binary linear model."""

    def score(split: Split) -> np.ndarray:
        r = log_count_ratio(split)
        train = split.train.multiply(r).tocsr()
        test = split.test.multiply(r).tocsr()
        if kind == "svm":
            model: LinearSVC | LogisticRegression = LinearSVC(
                C=c, class_weight={0: benign, 1: 1.0}, random_state=0, max_iter=5000
            )
        else:
            model = LogisticRegression(C=c, class_weight={0: benign, 1: 1.0}, max_iter=3000)
        model.fit(train, binary_labels(split))
        return np.asarray(model.decision_function(test))

    return score


def by_piece_kind(scorer: Callable[[Split], np.ndarray]) -> Callable[[Split], np.ndarray]:
    """The margins in two columns, sentences' and two-sentence windows' (the other
    column -inf): the per-column rule then gives windows a threshold of their own."""

    def score(split: Split) -> np.ndarray:
        margins = scorer(split)
        out = np.full((len(margins), 2), -np.inf)
        out[~split.is_pair, 0] = margins[~split.is_pair]
        out[split.is_pair, 1] = margins[split.is_pair]
        return out

    return score


def ovr_plus_binary(c: float = 2.0, weight: float = 0.5) -> Callable[[Split], np.ndarray]:
    multi, binary = ovr_svm(c), binary_svm(c)

    def score(split: Split) -> np.ndarray:
        return (1 - weight) * multi(split) + weight * binary(split)

    return score


def split_sentences(text: str) -> list[str]:
    found = list(dict.fromkeys(sentences(text)))[:MAX_CLASSIFIED_SENTENCES]
    return found if len(found) > 1 else []


def sentence_rows(
    c: float = 2.0,
    benign: float = 2.0,
    mil: bool = False,
    benign_rows: bool = True,
    sharpness: float | None = None,
    pair_rows: bool = False,
    per_category: bool = False,
) -> Callable[[Split], np.ndarray]:
    """Trained on sentences too (the model scores sentences): each sentence of a benign
    multi-sentence reply is a benign row; with `mil`, each harmful multi-sentence reply
    also adds its most harmful sentence under a first fit (multiple-instance learning:
    a harmful reply has at least one harmful sentence); with `pair_rows`, each window of
    two adjacent sentences of a benign reply is a benign row too (lever A's pieces);
    `per_category` returns each harm category's margin (a column each, for lever B)."""

    def fit(matrix: csr_matrix, labels: np.ndarray) -> LinearSVC:
        return LinearSVC(
            C=c, class_weight=class_weights(labels, benign), random_state=0, max_iter=5000
        ).fit(matrix, labels)

    def score(split: Split) -> np.ndarray:
        extra: list[str] = []
        extra_labels: list[str] = []
        if benign_rows:
            for label, text in zip(split.labels, split.texts, strict=True):
                if label == BENIGN:
                    found = split_sentences(text)
                    if pair_rows:
                        found += adjacent_pairs(text)
                    extra += found
                    extra_labels += [BENIGN] * len(found)
        matrix = split.train
        labels = split.labels
        if extra:
            matrix = vstack([matrix, split.transform(extra)]).tocsr()
            labels = np.concatenate([labels, np.array(extra_labels)])
        model = fit(matrix, labels)
        if mil:
            pieces: list[str] = []
            owners: list[int] = []
            harmful = [i for i, label in enumerate(split.labels) if label != BENIGN]
            for i in harmful:
                found = split_sentences(split.texts[i])
                pieces += found
                owners += [i] * len(found)
            if pieces:
                margins = multi_margin(
                    model.decision_function(split.transform(pieces)), model.classes_
                )
                best: dict[int, tuple[float, str]] = {}
                for owner, margin, piece in zip(owners, margins, pieces, strict=True):
                    if owner not in best or margin > best[owner][0]:
                        best[owner] = (float(margin), piece)
                chosen = sorted(best)
                matrix = vstack([matrix, split.transform([best[i][1] for i in chosen])]).tocsr()
                labels = np.concatenate([labels, split.labels[chosen]])
                model = fit(matrix, labels)
        if per_category:
            return category_margins(model.decision_function(split.test), model.classes_)
        return multi_margin(model.decision_function(split.test), model.classes_, sharpness)

    return score


VARIANTS: dict[str, tuple[str, Callable[[Split], np.ndarray]]] = {
    "baseline ovr-svm C2 b2": ("tfidf", ovr_svm()),
    "ovr-svm C1 b2": ("tfidf", ovr_svm(c=1.0)),
    "ovr-svm C2 b1": ("tfidf", ovr_svm(benign=1.0)),
    "ovr-svm C2 b2 min_df2": ("min_df2", ovr_svm()),
    "ovr-svm C2 b2 linear tf": ("linear_tf", ovr_svm()),
    "multinomial-lr C10 b2": ("tfidf", multinomial_lr(10.0)),
    "multinomial-lr C30 b2": ("tfidf", multinomial_lr(30.0)),
    "binary-svm C1": ("tfidf", binary_svm(1.0)),
    "binary-svm C2": ("tfidf", binary_svm(2.0)),
    "binary-lr C10": ("tfidf", binary_lr(10.0)),
    "binary-lr C30": ("tfidf", binary_lr(30.0)),
    "nb-svm C1": ("tfidf", nb_svm(1.0)),
    "nb-svm C0.3": ("tfidf", nb_svm(0.3)),
    "nb-lr C10": ("tfidf", nb_svm(10.0, kind="lr")),
    "nb-lr C30": ("tfidf", nb_svm(30.0, kind="lr")),
    "ovr+binary svm C2": ("tfidf", ovr_plus_binary()),
    "sentences: benign": ("tfidf", sentence_rows()),
    "sentences: benign+mil": ("tfidf", sentence_rows(mil=True)),
    "sentences: mil only": ("tfidf", sentence_rows(mil=True, benign_rows=False)),
    "sentences: benign b1": ("tfidf", sentence_rows(benign=1.0)),
    "sentences: benign C1": ("tfidf", sentence_rows(c=1.0)),
    "sentences: benign C4": ("tfidf", sentence_rows(c=4.0)),
    "sentences: benign char2-5": ("char2-5", sentence_rows()),
    "sentences: benign char3-6": ("char3-6", sentence_rows()),
    "sentences: benign word1-2": ("word1-2", sentence_rows()),
    "reply too": ("tfidf+reply", ovr_svm()),
    "sentences: benign, reply too": ("tfidf+reply", sentence_rows()),
    "sentences: benign +wv64x0.5": ("wv64x0.5", sentence_rows()),
    "sentences: benign +wv64x0.25": ("wv64x0.25", sentence_rows()),
    "sentences: benign +wv32x0.5": ("wv32x0.5", sentence_rows()),
    "sentences: benign +wv64x0.5, reply too": ("wv64x0.5+reply", sentence_rows()),
    "soft max k1": ("tfidf", ovr_svm(sharpness=1.0)),
    "soft max k2": ("tfidf", ovr_svm(sharpness=2.0)),
    "soft max k4": ("tfidf", ovr_svm(sharpness=4.0)),
    "sentences: benign, soft k2": ("tfidf", sentence_rows(sharpness=2.0)),
    "ovr-svm +wv64x0.5": ("wv64x0.5", ovr_svm()),
    "ovr-svm +wv64x1": ("wv64x1", ovr_svm()),
    "ovr-svm +wv128x1": ("wv128x1", ovr_svm()),
    "ovr-svm +wv32x1": ("wv32x1", ovr_svm()),
    # issue 21, safety15: lever A (windows of two adjacent sentences scored too) and
    # lever B (one threshold per harm category)
    "A: pairs": ("tfidf+pairs", sentence_rows()),
    "A: pairs, benign pair rows": ("tfidf+pairs", sentence_rows(pair_rows=True)),
    "A: pairs, own threshold": ("tfidf+pairs", by_piece_kind(sentence_rows())),
    "B: per-category": ("tfidf", sentence_rows(per_category=True)),
    "A+B: pairs, per-category": ("tfidf+pairs", sentence_rows(per_category=True)),
    "A+B: pairs, pair rows, per-cat": (
        "tfidf+pairs",
        sentence_rows(pair_rows=True, per_category=True),
    ),
}


def threshold_for(benign_scores: np.ndarray, rate: float = BENIGN_RATE) -> float:
    ordered = np.sort(benign_scores)
    return float(ordered[int(np.ceil(len(ordered) * (1 - rate)))])


def category_thresholds(
    scores: np.ndarray, is_benign: np.ndarray, rate: float = BENIGN_RATE, lookahead: int = 8
) -> np.ndarray:
    """Lever B: one margin threshold per harm category (a reply is flagged when any
    category's margin reaches its own), chosen greedily on `scores` (replies x
    categories) to maximise recall with at most `rate` of the benign replies flagged.
    All thresholds start above every score; each step lowers the one category's
    threshold past its next 1..`lookahead` unflagged benign replies (just above the
    next one) that gains the most harmful replies per benign reply newly flagged."""
    budget = int(np.floor(rate * is_benign.sum()))
    harmful = ~is_benign
    thresholds = np.full(scores.shape[1], np.inf)
    flagged = np.zeros(len(scores), dtype=bool)
    while True:
        best: tuple[float, int, int, float] | None = None  # ratio, gain, category, threshold
        used = int(flagged[is_benign].sum())
        for c in range(scores.shape[1]):
            column = scores[:, c]
            below = column < thresholds[c]
            stops = np.sort(column[is_benign & ~flagged & below])[::-1][: lookahead + 1]
            candidates: list[float] = []
            for k in range(len(stops)):
                if k + 1 < len(stops):  # just above the next benign one
                    above = column[below & (column > stops[k + 1])]
                    candidates.append(float((stops[k + 1] + above.min()) / 2))
                else:
                    candidates.append(float(column[below].min()))
            for threshold in candidates:
                new = flagged | (column >= threshold)
                gain = int(new[harmful].sum() - flagged[harmful].sum())
                cost = int(new[is_benign].sum()) - used
                if gain <= 0 or used + cost > budget:
                    continue
                ratio = gain / max(cost, 0.5)
                if best is None or (ratio, gain) > (best[0], best[1]):
                    best = (ratio, gain, c, threshold)
        if best is None:
            return thresholds
        thresholds[best[2]] = best[3]
        flagged |= scores[:, best[2]] >= best[3]


def choose(scores: np.ndarray, is_benign: np.ndarray, rate: float = BENIGN_RATE) -> np.ndarray:
    """The flagging rule's parameters on these scores: one threshold (a score per reply)
    or one per harm category (a column per category)."""
    if scores.ndim == 1:
        return np.array([threshold_for(scores[is_benign], rate)])
    return category_thresholds(scores, is_benign, rate)


def nested_flags(
    scores: np.ndarray, is_benign: np.ndarray, fold_of: np.ndarray, rate: float = BENIGN_RATE
) -> np.ndarray:
    """Each reply flagged by the rule chosen (at `rate`) on the other folds' scores."""
    flags = np.zeros(len(scores), dtype=bool)
    for fold in np.unique(fold_of):
        inside = fold_of != fold
        chosen = choose(scores[inside], is_benign[inside], rate)
        flags[~inside] = flags_of(scores[~inside], chosen)
    return flags


def flags_of(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    if scores.ndim == 1:
        return np.asarray(scores >= thresholds[0])
    return np.asarray((scores >= thresholds).any(axis=1))


def overall(scores: np.ndarray) -> np.ndarray:
    """One score per reply (for AUC and the single threshold): the highest margin."""
    return scores if scores.ndim == 1 else scores.max(axis=1)


def run(names: Sequence[str]) -> None:
    current = items_at(None)
    labels = np.array([label for label, _ in current])
    cv: dict[str, np.ndarray] = {}
    fold_of = np.zeros(len(current), dtype=np.int64)
    features_needed = sorted({VARIANTS[n][0] for n in names})
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    started = time.perf_counter()
    for fold, (train_idx, test_idx) in enumerate(folds.split(np.zeros(len(current)), labels)):
        fold_of[test_idx] = fold
        train = [current[i] for i in train_idx]
        test = [current[i] for i in test_idx]
        for features in features_needed:
            split = split_features(features, train, test)
            for name in names:
                if VARIANTS[name][0] == features:
                    found = reply_max(split, VARIANTS[name][1](split))
                    if name not in cv:
                        cv[name] = np.zeros((len(current), *found.shape[1:]))
                    cv[name][test_idx] = found
    print(f"(5-fold CV in {time.perf_counter() - started:.0f} s)")
    is_benign = labels == BENIGN
    thresholds = {name: choose(cv[name], is_benign) for name in names}
    # nested: the rule chosen on the other four folds' out-of-fold scores, applied to one
    nested = {name: nested_flags(cv[name], is_benign, fold_of) for name in names}
    crossed: list[dict[str, np.ndarray]] = []
    tests: list[np.ndarray] = []
    for older, newer in CROSS_WRITER:
        train = items_at(older)
        old = set(train)
        test = [item for item in items_at(newer) if item not in old]
        tests.append(np.array([label for label, _ in test]) == BENIGN)
        print(
            f"   cross-writer {older}->{newer}: {int((~tests[-1]).sum())} harmful, "
            f"{int(tests[-1].sum())} benign"
        )
        scored: dict[str, np.ndarray] = {}
        for features in features_needed:
            split = split_features(features, train, test)
            for name in names:
                if VARIANTS[name][0] == features:
                    scored[name] = reply_max(split, VARIANTS[name][1](split))
        crossed.append(scored)
    print(
        f"== {int((~is_benign).sum())} harmful, {int(is_benign.sum())} benign training replies; "
        f"CV rule for <= {BENIGN_RATE:.0%} benign (nested: chosen on four folds' "
        "out-of-fold scores, applied to the fifth); cross-writer at the CV rule "
        "(recall / benign flagged / recall at 4 % of its own benign, one threshold)"
    )
    header = f"{'variant':<34}{'CV AUC':>7}{'recall':>7}{'benign':>7}{'nested':>7}{'benign':>7}"
    for older, newer in CROSS_WRITER:
        header += f"   {older}->{newer}: rec  ben  @4%  AUC"
    print(header)
    for name in names:
        flags = flags_of(cv[name], thresholds[name])
        row = (
            f"{name:<34}{roc_auc_score(~is_benign, overall(cv[name])):>7.3f}"
            f"{flags[~is_benign].mean():>7.3f}{flags[is_benign].mean():>7.3f}"
            f"{nested[name][~is_benign].mean():>7.3f}{nested[name][is_benign].mean():>7.3f}"
        )
        for scored, benign in zip(crossed, tests, strict=True):
            score = scored[name]
            hit = flags_of(score, thresholds[name])
            own = overall(score)[~benign] >= threshold_for(overall(score)[benign])
            row += (
                f"{'':>21}{hit[~benign].mean():.3f} {hit[benign].mean():.3f} {own.mean():.3f}"
                f" {roc_auc_score(~benign, overall(score)):.3f}"
            )
        per_category = " ".join(f"{c[:4]} {flags[labels == c].mean():.2f}" for c in HARM_CATEGORIES)
        print(row + f"   ({per_category})")
        if len(thresholds[name]) > 1:
            column_names = (
                HARM_CATEGORIES
                if len(thresholds[name]) == len(HARM_CATEGORIES)
                else ("sentences", "windows")
            )
            print(
                "   thresholds (margin): "
                + ", ".join(
                    f"{c} {t:.3f}" for c, t in zip(column_names, thresholds[name], strict=True)
                )
            )
        else:
            print(f"   threshold (margin): {thresholds[name][0]:.3f}")
    # one threshold against one per category on the same out-of-fold scores, chosen at
    # several benign budgets: does the per-category rule gain at a matched benign rate?
    for name in names:
        if cv[name].ndim == 1:
            continue
        print(f"   nested recall / benign flagged of {name!r} at several budgets:")
        for rate in (0.03, 0.035, 0.04, 0.045):
            one = nested_flags(overall(cv[name]), is_benign, fold_of, rate)
            each = nested_flags(cv[name], is_benign, fold_of, rate)
            print(
                f"     budget {rate:.3f}: one threshold {one[~is_benign].mean():.3f} / "
                f"{one[is_benign].mean():.3f}, per category {each[~is_benign].mean():.3f} / "
                f"{each[is_benign].mean():.3f}"
            )


def pair_cost(runs: int = 7) -> None:
    """Lever A's cost: the shipped classifier's scoring of each assistant turn of
    `examples/alignment` (its distinct sentences, as `classify`), against the same with
    each window of two adjacent sentences scored in the same batch."""
    import json

    from worker.suites.alignment.safety_classifier import shipped_classifier

    classifier = shipped_classifier()
    path = REPO / "examples" / "alignment" / "sessions.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    turns = [r["text"] for r in records if r.get("role") == "assistant"]
    alone = [list(dict.fromkeys(sentences(t)))[:MAX_CLASSIFIED_SENTENCES] for t in turns]
    paired = [a + adjacent_pairs(t) for a, t in zip(alone, turns, strict=True)]
    timings: dict[str, list[float]] = {"sentences": [], "sentences + windows": []}
    for _ in range(runs):
        for name, batches in (("sentences", alone), ("sentences + windows", paired)):
            started = time.process_time()
            for _ in range(20):
                for batch in batches:
                    classifier.probabilities(batch)
            timings[name].append((time.process_time() - started) * 1000 / (20 * len(batches)))
    print(
        f"== lever A's cost on {len(turns)} assistant turns of examples/alignment "
        f"({sum(map(len, alone))} sentences, {sum(map(len, paired))} texts with windows), "
        f"ms of CPU per turn, min / median / max of {runs} runs:"
    )
    timings["ratio (same run)"] = [b / a for a, b in zip(*timings.values(), strict=True)]
    for name, values in timings.items():
        low, middle, high = min(values), float(np.median(values)), max(values)
        print(f"   {name:<20} {low:.3f} / {middle:.3f} / {high:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="variant names (default: all)")
    parser.add_argument(
        "--word-vectors",
        type=Path,
        default=WORD_VECTOR_FILE[0],
        help="static word vectors for the '+wv' variants, made by "
        "`bench/safety_word_vectors.py --dimensions 128 --out PATH`",
    )
    parser.add_argument(
        "--cost", action="store_true", help="only time lever A (windows of two sentences)"
    )
    args = parser.parse_args()
    if args.cost:
        pair_cost()
        return 0
    WORD_VECTOR_FILE[0] = args.word_vectors
    run(args.only or list(VARIANTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

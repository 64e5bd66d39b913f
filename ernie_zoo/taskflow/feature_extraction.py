"""Feature extraction: one sentence embedding per text (mean of the encoder's last hidden states).

Usage (the shipped default is `Taskflow("feature_extraction")`, model ernie-zoo-e5-small-zh-pieces:
multilingual-e5-small on its own sentencepiece pieces pruned to Chinese text, 384 dimensions, e5's own embeddings;
below, a tiny encoder the test-suite saves, passed with task_path=; its hidden size is 32):

>>> from ernie_zoo.taskflow import Taskflow
>>> embed = Taskflow("feature_extraction", task_path=encoder_dir, normalize=True)
>>> result = embed("长江是中国最长的河流")
>>> len(result["embedding"]), round(sum(x * x for x in result["embedding"]), 4)
(32, 1.0)
>>> type(Taskflow("feature_extraction", task_path=encoder_dir, return_numpy=True)("你好")["embedding"]).__name__
'ndarray'

Pooling: `mean` averages the last hidden states of all non-padding tokens (including [CLS]/[SEP]: e5's own
pooling), `cls` takes the first token's. A long text is split by sentences and the chunk embeddings are averaged
weighted by their token counts. Any encoder directory works (a masked-LM or classifier checkpoint: its encoder is
used).

Input prefixes: a model trained with them names them in its config.json (`taskflow_embedding_prefixes`; e5's are
`query: ` and `passage: `) and every text gets the one of `input_type` before it is tokenised. e5's recommendation:
"query" on both sides of a symmetric task (similarity, clustering, same-topic search: the default), "query" for
questions and "passage" for the documents they search in an asymmetric one. A model without prefixes
(`model="ernie-zoo-mini-zh"`) reads the text as it is, whatever `input_type` says. Retrieval scores against BM25 and
the previous defaults (ernie-zoo-e5-small-zh on characters, ernie-zoo-mini-zh): the model cards and
bench/results/retrieval.json.

Options: `pooling`, `normalize`, `return_numpy`, `input_type`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from .task import Chunk, EncoderTask, Prepared, Result, register_task

#: config.json key of a model's input prefixes, {input_type: prefix} (written by recipes/zoo/ship.py).
PREFIXES_KEY = "taskflow_embedding_prefixes"
INPUT_TYPES = ("query", "passage")


@dataclass
class FeatureOptions:
    """Options of feature_extraction.

    pooling: "mean" (average of the token states) or "cls" (the first token's state).
    normalize: scale each embedding to unit L2 norm.
    return_numpy: return a float32 numpy array instead of a list of floats.
    input_type: "query" (default; also both sides of a symmetric task) or "passage" (the documents of a search):
        which of the model's input prefixes each text gets; no effect on a model without prefixes.
    """

    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = False
    return_numpy: bool = False
    input_type: Literal["query", "passage"] = "query"


@dataclass
class FeatureResult(Result):
    text: str
    embedding: Any  # list[float] or np.ndarray (return_numpy=True)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "embedding": self.embedding}


@register_task(
    "feature_extraction", aliases=("text_embedding",), default_model="ernie-zoo-e5-small-zh-pieces"
)
class FeatureExtraction(EncoderTask):
    auto_class = "AutoModel"
    ignore_missing = ("pooler.", "ernie.pooler.")  # the mean/cls pooling here never uses the pooler
    Options = FeatureOptions

    def __init__(self, settings, options, loaded=None):
        super().__init__(settings, options, loaded)
        prefixes = getattr(self.model.config, PREFIXES_KEY, None) or {}
        if not isinstance(prefixes, dict) or not all(
            isinstance(prefixes.get(t, ""), str) for t in INPUT_TYPES
        ):
            raise ValueError(
                f"config.json {PREFIXES_KEY} must map {INPUT_TYPES} to strings, got {prefixes!r}"
            )
        self.prefix: str = prefixes.get(options.input_type, "")
        # the prefix's tokens take room in every chunk, as the special tokens do
        self.n_special += len(self.tokenizer.tokenize(self.prefix)) if self.prefix else 0
        if self.max_len - self.n_special < 4:
            raise ValueError(f"max_seq_len={self.max_len} leaves no room for text after {self.prefix!r}")

    def encode(self, texts: list[str]) -> list[dict[str, Any]]:
        return super().encode([self.prefix + t for t in texts] if self.prefix else texts)

    def run_batch(
        self, batch: dict[str, torch.Tensor], chunks: list[Chunk]
    ) -> list[tuple[torch.Tensor, int]]:
        hidden = self.model(**batch).last_hidden_state.float()  # (B, T, H)
        mask = batch["attention_mask"]  # (B, T)
        if self.options.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)  # (B, H)
        counts = mask.sum(1).tolist()
        return [(pooled[i].cpu(), int(counts[i])) for i in range(len(chunks))]

    def embeddings(self, prepared: Prepared, outputs: list[Any]) -> torch.Tensor:
        """(texts, H) float64: each text's chunk embeddings averaged, weighted by their token counts."""
        rows = []
        for pairs in self.group(prepared, outputs):
            vectors = torch.stack([v.double() for _, (v, _) in pairs])
            weights = torch.tensor([n for _, (_, n) in pairs], dtype=torch.float64)
            rows.append((weights[:, None] * vectors).sum(0) / weights.sum())
        return torch.stack(rows)

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[FeatureResult]:
        results = []
        for text, vector in zip(prepared.texts, self.embeddings(prepared, outputs)):
            if self.options.normalize:
                vector = vector / vector.norm().clamp(min=1e-12)
            array = vector.float().numpy()
            results.append(FeatureResult(text, array if self.options.return_numpy else array.tolist()))
        return results

"""Feature extraction: one sentence embedding per text (mean of the encoder's last hidden states).

Usage (the shipped default is `Taskflow("feature_extraction")`, model ernie-zoo-mini-zh; below, a tiny encoder
the test-suite saves, passed with task_path=; its hidden size is 32):

>>> from ernie_zoo.taskflow import Taskflow
>>> embed = Taskflow("feature_extraction", task_path=encoder_dir, normalize=True)
>>> result = embed("长江是中国最长的河流")
>>> len(result["embedding"]), round(sum(x * x for x in result["embedding"]), 4)
(32, 1.0)
>>> type(Taskflow("feature_extraction", task_path=encoder_dir, return_numpy=True)("你好")["embedding"]).__name__
'ndarray'

Pooling: `mean` averages the last hidden states of all non-padding tokens (including [CLS]/[SEP]), `cls` takes
the first token's. A long text is split by sentences and the chunk embeddings are averaged weighted by their
token counts. Any encoder directory works (a masked-LM or classifier checkpoint: its encoder is used).

Options: `pooling`, `normalize`, `return_numpy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from .task import Chunk, EncoderTask, Prepared, Result, register_task


@dataclass
class FeatureOptions:
    """Options of feature_extraction.

    pooling: "mean" (average of the token states) or "cls" (the first token's state).
    normalize: scale each embedding to unit L2 norm.
    return_numpy: return a float32 numpy array instead of a list of floats.
    """

    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = False
    return_numpy: bool = False


@dataclass
class FeatureResult(Result):
    text: str
    embedding: Any  # list[float] or np.ndarray (return_numpy=True)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "embedding": self.embedding}


@register_task("feature_extraction", aliases=("text_embedding",), default_model="ernie-zoo-mini-zh")
class FeatureExtraction(EncoderTask):
    auto_class = "AutoModel"
    ignore_missing = ("pooler.", "ernie.pooler.")  # the mean/cls pooling here never uses the pooler
    Options = FeatureOptions

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

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[FeatureResult]:
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            vectors = torch.stack([v.double() for _, (v, _) in pairs])
            weights = torch.tensor([n for _, (_, n) in pairs], dtype=torch.float64)
            vector = (weights[:, None] * vectors).sum(0) / weights.sum()
            if self.options.normalize:
                vector = vector / vector.norm().clamp(min=1e-12)
            array = vector.float().numpy()
            results.append(FeatureResult(text, array if self.options.return_numpy else array.tolist()))
        return results

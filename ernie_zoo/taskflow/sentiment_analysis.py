"""Sentiment analysis: a label and its probability for each text.

Usage with the shipped default model, ernie-zoo-e5-sentiment (real output):

>>> from ernie_zoo.taskflow import Taskflow
>>> Taskflow("sentiment_analysis")("这家餐厅的服务非常棒！")  # doctest: +ELLIPSIS
{'text': '这家餐厅的服务非常棒！', 'label': 'positive', 'score': 0.97...}

With a local model directory (task_path=; here a tiny model the test-suite trains on review sentences):

>>> senta = Taskflow("sentiment_analysis", task_path=sentiment_dir)
>>> senta("这家餐厅的服务非常好，菜也很好吃")  # doctest: +ELLIPSIS
{'text': '这家餐厅的服务非常好，菜也很好吃', 'label': 'positive', 'score': 0.9...}
>>> [r["label"] for r in senta(["房间太差了，非常失望", "这本书很好，值得推荐"])]
['negative', 'positive']

A model fine-tuned with a sentiment lexicon (`ernie-finetune --data.lexicon FILE`) carries it in its directory
(`sentiment_lexicon.tsv`); the model marks each token's sentiment words, negators, degree adverbs and negated words
(`ernie_zoo.text.sentiment.FEATURES`) itself, from the input ids, so transformers' pipeline gives the same scores.

Labels come from the model's `config.id2label`. Texts longer than `max_seq_len` are split (sentences first) and
the chunk probabilities are averaged weighted by chunk length in characters; `label` is the arg-max of that
average and `score` its probability. Options: `return_all_scores`.

A text without a letter of any script (Chinese characters, Latin, ...) has no polarity: an empty text, whitespace,
punctuation, digits or emoji alone get `label` None and `score` None (`null` in JSON), never a confident guess
(the model's prior), and the other texts of the batch are unaffected (`ernie_zoo.taskflow.text.has_letters`):

>>> Taskflow("sentiment_analysis")(["  ", "😀😂🎉👍🏽", "？！。。。", "太好吃了"])[:3]
[{'text': '  ', 'label': None, 'score': None}, {'text': '😀😂🎉👍🏽', 'label': None, 'score': None}, {'text': '？！。。。', 'label': None, 'score': None}]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE

from .task import EncoderTask, Prepared, Result, register_task
from .text import has_letters


@dataclass
class SentimentOptions:
    """Options of sentiment_analysis.

    return_all_scores: also return `scores`, the probability of every label.
    """

    return_all_scores: bool = False


@dataclass
class SentimentResult(Result):
    text: str
    label: str | None  # None for a text without letters (empty, whitespace, punctuation, digits, emoji)
    score: float | None
    scores: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"text": self.text, "label": self.label, "score": self.score}
        if self.scores is not None:
            out["scores"] = dict(self.scores)
        return out


@register_task("sentiment_analysis", aliases=("sentiment",), default_model="ernie-zoo-e5-sentiment")
class SentimentAnalysis(EncoderTask):
    auto_class = "AutoModelForSequenceClassification"
    Options = SentimentOptions

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # A classifier trained with a sentiment lexicon computes its bits from the input ids (models/modeling.py).
        if getattr(self.model.config, "sentiment_features", None) and self.model.sentiment_lexicon is None:
            raise ValueError(
                f"{self.loaded.source.location}: the model was trained with a sentiment lexicon "
                f"(config.sentiment_features) but its directory has no {SENTIMENT_LEXICON_FILE}"
            )

    def run_batch(self, batch: dict[str, torch.Tensor], chunks: list) -> list[torch.Tensor]:
        logits = self.model(**batch).logits.float()  # (B, num_labels)
        return list(torch.softmax(logits, dim=-1).cpu())

    def postprocess(self, prepared: Prepared, outputs: list[torch.Tensor]) -> list[SentimentResult]:
        id2label = self.model.config.id2label
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            if not has_letters(text):  # nothing to classify: say so instead of the model's prior
                results.append(SentimentResult(text, None, None, None))
                continue
            weights = torch.tensor([float(max(c.end - c.start, 1)) for c, _ in pairs], dtype=torch.float64)
            probs = torch.stack([p.double() for _, p in pairs])  # (chunks, labels)
            mean = (weights[:, None] * probs).sum(0) / weights.sum()
            best = int(mean.argmax())
            scores = None
            if self.options.return_all_scores:
                scores = {str(id2label.get(i, i)): float(mean[i]) for i in range(mean.numel())}
            results.append(SentimentResult(text, str(id2label.get(best, best)), float(mean[best]), scores))
        return results

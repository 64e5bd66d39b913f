"""Text similarity: the cosine of two texts' sentence embeddings (PaddleNLP's `text_similarity` interface).

Usage (the shipped default is `Taskflow("text_similarity")`, model ernie-zoo-e5-small-zh-pieces, e5's embeddings; below,
a tiny encoder the test-suite saves, passed with task_path=, whose scores mean nothing):

>>> from ernie_zoo.taskflow import Taskflow
>>> similarity = Taskflow("text_similarity", task_path=encoder_dir)
>>> result = similarity([["春天适合种什么花？", "春天适合种什么菜？"]])
>>> sorted(result[0]), -1 <= result[0]["similarity"] <= 1
(['similarity', 'text1', 'text2'], True)

The shipped default scores a paraphrase above an unrelated pair (tests/test_text_similarity.py):

    Taskflow("text_similarity")([["今天天气怎么样", "今天的天气如何"], ["今天天气怎么样", "股市今天大跌"]])
    -> similarity 0.968 and 0.895: e5's cosines sit high for any two texts of one language, so compare scores
       with each other (rank, or a threshold chosen on your own pairs) rather than read 0.8 as "similar"

Input: a pair `[text1, text2]` gives one result; a list of pairs, a list of results in the same order. Each
distinct text is embedded once (`feature_extraction`: mean pooling, the model's `query: ` prefix by default,
long texts split and averaged). Options: `input_type` (feature_extraction's: "query", e5's advice for symmetric
tasks, or "passage"), `pooling`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from .feature_extraction import FeatureExtraction
from .task import Prepared, Result, register_task


@dataclass
class SimilarityOptions:
    """Options of text_similarity.

    input_type: "query" (default: both texts are queries, e5's advice for a symmetric task) or "passage": the
        model's input prefix both texts get (feature_extraction's option).
    pooling: "mean" (average of the token states) or "cls" (the first token's state).
    """

    input_type: Literal["query", "passage"] = "query"
    pooling: Literal["mean", "cls"] = "mean"


@dataclass
class SimilarityResult(Result):
    text1: str
    text2: str
    similarity: float  # cosine of the two embeddings, in [-1, 1]


@dataclass
class PreparedPairs(Prepared):
    pairs: list[tuple[str, str]] = field(default_factory=list)


@register_task("text_similarity", default_model="ernie-zoo-e5-small-zh-pieces")
class TextSimilarity(FeatureExtraction):
    Options = SimilarityOptions
    takes_pairs: ClassVar[bool] = True

    def preprocess(self, pairs: list[tuple[str, str]]) -> PreparedPairs:  # type: ignore[override]
        unique = list(dict.fromkeys(text for pair in pairs for text in pair))  # each distinct text once
        prepared = super().preprocess(unique)
        return PreparedPairs(prepared.texts, prepared.chunks, list(pairs))

    def postprocess(self, prepared: PreparedPairs, outputs: list[Any]) -> list[SimilarityResult]:  # type: ignore[override]
        vectors = torch.nn.functional.normalize(
            self.embeddings(prepared, outputs), dim=1
        )  # (texts, H) float64
        row = {text: i for i, text in enumerate(prepared.texts)}
        return [SimilarityResult(a, b, float(vectors[row[a]] @ vectors[row[b]])) for a, b in prepared.pairs]

"""Evaluation: metrics (accuracy, macro F1; span F1 is `ernie_zoo.text.metrics`), a Kneser-Ney char n-gram LM, poem format checks, baselines.

Baselines (LAC, jieba.posseg, SnowNLP, TF-IDF + logistic regression, n-gram LMs) live in
:mod:`ernie_zoo.evaluation.baselines` and import their optional dependencies lazily.
"""

from ..models.ngram import CharNgramLM
from ..text.metrics import accuracy, macro_f1
from .poetry import PoemFormat, check_poem_format, format_rates, poem_lines

__all__ = [
    "CharNgramLM",
    "PoemFormat",
    "accuracy",
    "check_poem_format",
    "format_rates",
    "macro_f1",
    "poem_lines",
]

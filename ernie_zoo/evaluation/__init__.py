"""Evaluation: a Kneser-Ney char n-gram LM, poem format checks, baselines; `accuracy` and `macro_f1` are
`ernie_zoo.text.metrics`'s (the home of every metric), re-exported.

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

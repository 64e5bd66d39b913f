"""Word segmentation with jieba's dictionary and HMM (the Rust port rjieba by default); no model needed.

Usage (real output):

>>> from ernie_zoo.taskflow import Taskflow
>>> seg = Taskflow("word_segmentation")
>>> seg("银行行长在会上发表了重要讲话")
{'text': '银行行长在会上发表了重要讲话', 'words': ['银行行长', '在', '会上', '发表', '了', '重要讲话']}
>>> seg(["蓝鲸科技发布了新产品"])[0]["words"]
['蓝鲸', '科技', '发布', '了', '新', '产品']
>>> Taskflow("word_segmentation", user_dict=["蓝鲸科技 10 nt"])("蓝鲸科技发布了新产品")["words"]
['蓝鲸科技', '发布', '了', '新', '产品']

`user_dict` is a jieba user dictionary: a file path, or a list of lines, each `word [freq] [tag]`. It is added
to this Taskflow's own segmenter only (jieba's global dictionary is never changed). The words concatenate back to
the input (whitespace-only words are dropped unless `keep_whitespace=True`).

Options: `segmenter` ("rjieba" or "jieba"), `hmm`, `keep_whitespace`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from ernie_zoo.text.segment import Segmenter

from .task import Result, Task, register_task
from .text import clean_surrogates

_DEFAULT: dict[str, Any] = {}
_DEFAULT_LOCK = threading.Lock()


@dataclass
class SegmentationOptions:
    """Options of word_segmentation and pos_tagging.

    segmenter: "rjieba" (Rust port of jieba, fast) or "jieba" (the Python original; its posseg for POS tags).
    (Named `backend` before Taskflow's own `backend`, the inference engine, came: one word, one meaning.)
    hmm: let jieba's HMM join characters into words missing from the dictionary.
    keep_whitespace: keep whitespace-only words in the output.
    """

    segmenter: Literal["rjieba", "jieba"] = "rjieba"
    hmm: bool = True
    keep_whitespace: bool = False


def get_segmenter(backend: str, user_dict: Any, hmm: bool) -> Segmenter:
    """A shared segmenter per (backend, hmm) without a user dictionary; a private one with it
    (`ernie_zoo.text.segment.Segmenter`, the one knowledge masking uses)."""
    if user_dict is not None:
        return Segmenter(backend, user_dict, hmm)
    with _DEFAULT_LOCK:
        key = (backend, hmm)
        if key not in _DEFAULT:
            _DEFAULT[key] = Segmenter(backend, None, hmm)
        return _DEFAULT[key]


def align(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Character spans of `words` in `text`; jieba's words concatenate to its input."""
    spans, pos = [], 0
    for word in words:
        spans.append((pos, pos + len(word)))
        pos += len(word)
    if pos != len(text):
        raise RuntimeError(f"segmenter output does not concatenate to its input ({pos} != {len(text)} chars)")
    return spans


@dataclass
class SegmentationResult(Result):
    text: str
    words: list[str] = field(default_factory=list)


@register_task("word_segmentation", aliases=("segmentation",))
class WordSegmentation(Task):
    Options = SegmentationOptions
    uses_user_dict = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.segmenter = get_segmenter(self.options.segmenter, self.settings.user_dict, self.options.hmm)

    def preprocess(self, texts: list[str]) -> list[tuple[str, str]]:
        return [(t, clean_surrogates(t)) for t in texts]  # (original, encodable): same length

    def forward(self, prepared: list[tuple[str, str]]) -> list[list[str]]:
        return [self.segmenter.cut(clean) for _, clean in prepared]

    def keep(self, word: str) -> bool:
        return self.options.keep_whitespace or bool(word.strip())

    def postprocess(
        self, prepared: list[tuple[str, str]], outputs: list[list[str]]
    ) -> list[SegmentationResult]:
        results = []
        for (text, _), words in zip(prepared, outputs):
            pieces = [text[a:b] for a, b in align(text, words)]  # slices of the original (surrogates kept)
            results.append(SegmentationResult(text, [w for w in pieces if self.keep(w)]))
        return results

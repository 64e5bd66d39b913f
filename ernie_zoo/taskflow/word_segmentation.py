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

Options: `backend` ("rjieba" or "jieba"), `hmm`, `keep_whitespace`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .task import Result, Task, register_task
from .text import clean_surrogates

_DEFAULT: dict[str, Any] = {}
_DEFAULT_LOCK = threading.Lock()


@dataclass
class SegmentationOptions:
    """Options of word_segmentation and pos_tagging.

    backend: "rjieba" (Rust port of jieba, fast) or "jieba" (the Python original; its posseg for POS tags).
    hmm: let jieba's HMM join characters into words missing from the dictionary.
    keep_whitespace: keep whitespace-only words in the output.
    """

    backend: Literal["rjieba", "jieba"] = "rjieba"
    hmm: bool = True
    keep_whitespace: bool = False


def read_user_dict(user_dict: Any) -> list[tuple[str, int | None, str | None]]:
    """Parse a jieba user dictionary (path or list of `word [freq] [tag]` lines) into (word, freq, tag)."""
    if isinstance(user_dict, (str, os.PathLike)):
        path = Path(user_dict)
        if not path.is_file():
            raise ValueError(f"user_dict {str(user_dict)!r} is not a file (pass a path or a list of words)")
        lines = path.read_text(encoding="utf-8").splitlines()
    elif isinstance(user_dict, (list, tuple)):
        lines = list(user_dict)
    else:
        raise TypeError(
            f"user_dict must be a file path or a list of 'word [freq] [tag]' lines, got {type(user_dict).__name__}"
        )
    entries = []
    for n, line in enumerate(lines, 1):
        if not isinstance(line, str):
            raise TypeError(f"user_dict line {n} is {type(line).__name__}, expected str")
        parts = line.strip().lstrip("\ufeff").split()
        if not parts:
            continue
        word, freq, tag = parts[0], None, None
        for extra in parts[1:]:
            if extra.isdigit() and freq is None:
                freq = int(extra)
            elif tag is None:
                tag = extra
            else:
                raise ValueError(f"user_dict line {n} is not 'word [freq] [tag]': {line!r}")
        entries.append((word, freq, tag))
    return entries


class Segmenter:
    """A jieba or rjieba segmenter with an optional user dictionary; `cut` and `tag` return word lists."""

    def __init__(self, backend: str, user_dict: Any = None, hmm: bool = True):
        self.backend = backend
        self.hmm = hmm
        entries = read_user_dict(user_dict) if user_dict is not None else []
        if backend == "rjieba":
            import rjieba

            self.impl = rjieba.Jieba()
            for word, freq, tag in entries:
                self.impl.add_word(word, freq, tag)
        else:
            import jieba
            import jieba.posseg

            self.impl = jieba.Tokenizer()
            for word, freq, tag in entries:
                self.impl.add_word(word, freq, tag)
            self.pos = jieba.posseg.POSTokenizer(self.impl)

    def cut(self, text: str) -> list[str]:
        if self.backend == "rjieba":
            return list(self.impl.cut(text, self.hmm))
        return list(self.impl.cut(text, HMM=self.hmm))

    def tag(self, text: str) -> list[tuple[str, str]]:
        if self.backend == "rjieba":
            return [(w, t or "x") for w, t in self.impl.tag(text, self.hmm)]
        return [(p.word, p.flag) for p in self.pos.cut(text, HMM=self.hmm)]


def get_segmenter(backend: str, user_dict: Any, hmm: bool) -> Segmenter:
    """A shared segmenter per (backend, hmm) without a user dictionary; a private one with it."""
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
        self.segmenter = get_segmenter(self.options.backend, self.settings.user_dict, self.options.hmm)

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

"""Part-of-speech tagging with jieba.posseg's tag set (rjieba by default); no model needed.

Usage (real output):

>>> from ernie_zoo.taskflow import Taskflow
>>> pos = Taskflow("pos_tagging")
>>> pos("我们在北京大学读书")
{'text': '我们在北京大学读书', 'words': ['我们', '在', '北京大学', '读书'], 'tags': ['r', 'p', 'nt', 'n']}
>>> Taskflow("pos_tagging", user_dict=["蓝鲸科技 10 nt"])("蓝鲸科技发布了新产品")["tags"]
['nt', 'v', 'ul', 'a', 'n']

Tags are jieba's (ICTCLAS-style: n noun, v verb, r pronoun, p preposition, ns place, nr person, nt organisation,
x other ...). A user-dictionary word without a tag gets "x". `words[i]` has tag `tags[i]`.

Options: `segmenter` ("rjieba" or "jieba"), `hmm`, `keep_whitespace` (as word_segmentation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .task import Result, register_task
from .word_segmentation import SegmentationOptions, WordSegmentation, align


@dataclass
class PosResult(Result):
    text: str
    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


@register_task("pos_tagging", aliases=("part_of_speech",))
class PosTagging(WordSegmentation):
    Options = SegmentationOptions

    def forward(self, prepared: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        return [self.segmenter.tag(clean) for _, clean in prepared]

    def postprocess(self, prepared: list[tuple[str, str]], outputs: list[Any]) -> list[PosResult]:
        results = []
        for (text, _), pairs in zip(prepared, outputs):
            spans = align(text, [w for w, _ in pairs])
            kept = [(text[a:b], tag) for (a, b), (_, tag) in zip(spans, pairs) if self.keep(text[a:b])]
            results.append(PosResult(text, [w for w, _ in kept], [t for _, t in kept]))
        return results

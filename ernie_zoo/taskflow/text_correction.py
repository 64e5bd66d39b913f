"""Text correction: Chinese spelling errors found and corrected, character for character.

Usage with the shipped default model, ernie-zoo-mini-csc:

>>> from ernie_zoo.taskflow import Taskflow
>>> corrector = Taskflow("text_correction")
>>> corrector("我们明天在见面吧。")  # doctest: +SKIP
{'source': '我们明天在见面吧。', 'target': '我们明天再见面吧。', 'errors': [{'position': 4, 'correction': ['在', '再'], 'score': 0.9...}]}

The result's `target` always has the length of `source` (spelling correction replaces characters; it never
inserts or deletes), and each error's `position` indexes `source` (`source[position] == correction[0]`).

Only Chinese characters change, and only into one of their confusable characters (same or similar sound, similar
shape: the `confusion_sets.json` saved with the model), when the model prefers the candidate to the character as
written by at least `min_prob` (default: the model's `correction_min_prob`, chosen on its dev set). Latin, digits,
punctuation and whitespace are never touched. Traditional input is read as Simplified by the model; characters
that are not corrected are returned exactly as given, and a correction is written in Simplified.

`user_dict` (a path or a list of words, one per line; jieba's `word [freq] [tag]` lines are read too) lists words
never to correct, e.g. names and terms the model does not know:

>>> Taskflow("text_correction", user_dict=["在见"])("我们明天在见面吧。")["errors"]  # doctest: +SKIP
[]

Texts longer than `max_seq_len` are split by sentences; positions are into the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ernie_zoo.models.correction import ErnieZooForSpellingCorrection, candidate_table, decode_corrections
from ernie_zoo.text.confusion import is_cjk
from ernie_zoo.text.lexicon import AhoCorasick
from ernie_zoo.text.segment import read_user_dict
from ernie_zoo.tokenization.traditional import to_simplified

from .task import Chunk, EncoderTask, Prepared, Result, register_task, require


@dataclass
class CorrectionOptions:
    """Options of text_correction.

    min_prob: how much more probable than the character as written a correction must be (0 to 1); default:
        the model's `correction_min_prob`.
    """

    min_prob: float | None = None


@dataclass
class CorrectionResult(Result):
    source: str
    target: str
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "errors": [{**e, "correction": list(e["correction"])} for e in self.errors],
        }


@register_task("text_correction", aliases=("csc", "spelling_correction"), default_model="ernie-zoo-mini-csc")
class TextCorrection(EncoderTask):
    auto_class = ErnieZooForSpellingCorrection
    Options = CorrectionOptions
    uses_user_dict = True

    def __init__(self, settings, options, loaded=None):
        super().__init__(settings, options, loaded)
        require(
            isinstance(self.model, ErnieZooForSpellingCorrection),
            f"text_correction needs an ErnieZooForSpellingCorrection model, not {type(self.model).__name__}",
        )
        min_prob = options.min_prob
        if min_prob is None:
            min_prob = float(getattr(self.model.config, "correction_min_prob", 0.0))
        require(0.0 <= min_prob <= 1.0, f"min_prob must be between 0 and 1, got {min_prob}")
        self.min_prob = min_prob
        sets = self.model.confusion_sets
        self.candidates = candidate_table(sets, self.tokenizer.get_vocab()) if sets is not None else None
        words = read_user_dict(settings.user_dict) if settings.user_dict else []
        self.user_words = AhoCorasick(to_simplified(w) for w, _, _ in words)

    def _protected(self, text: str) -> list[bool]:
        """Per character: inside a user_dict word (never corrected)."""
        keep = [False] * len(text)
        for start, end in self.user_words.iter_matches(text):
            keep[start:end] = [True] * (end - start)
        return keep

    def preprocess(self, texts: list[str]) -> Prepared:
        # The model reads Simplified text; to_simplified maps character for character, so offsets are unchanged.
        prepared = super().preprocess([to_simplified(t) for t in texts])
        return Prepared(texts=texts, chunks=prepared.chunks)

    def run_batch(self, batch: dict[str, torch.Tensor], chunks: list[Chunk]) -> list[Any]:
        out = self.model(**batch)
        eligible = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
        for row, chunk in enumerate(chunks):
            for t, (start, end) in enumerate(chunk.offsets):
                if end - start == 1 and not chunk.special[t]:
                    eligible[row, t] = True
        rows = decode_corrections(out.logits, batch["input_ids"], eligible, self.candidates, self.min_prob)
        return [(out.detection_logits[i].float(), rows[i]) for i in range(len(chunks))]

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[CorrectionResult]:
        id_to_token = self.tokenizer.convert_ids_to_tokens
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            simplified = to_simplified(text)
            protected = self._protected(simplified)
            chars = list(text)
            errors = []
            for chunk, (_, corrections) in pairs:
                for t, token_id, margin in corrections:
                    pos = chunk.start + chunk.offsets[t][0]
                    new = id_to_token(token_id)
                    if protected[pos] or not is_cjk(simplified[pos]) or not is_cjk(new):
                        continue
                    if new == simplified[pos]:
                        continue
                    chars[pos] = new
                    errors.append(
                        {"position": pos, "correction": (text[pos], new), "score": round(margin, 4)}
                    )
            errors.sort(key=lambda e: e["position"])
            results.append(CorrectionResult(text, "".join(chars), errors))
        return results

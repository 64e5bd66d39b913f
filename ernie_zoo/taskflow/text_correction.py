"""Text correction: Chinese spelling errors found and corrected, character for character.

Usage with the shipped default model, ernie-zoo-mini-csc:

>>> from ernie_zoo.taskflow import Taskflow
>>> corrector = Taskflow("text_correction")
>>> corrector("这本书很有意思，我以经看完了。")  # doctest: +SKIP
{'source': '这本书很有意思，我以经看完了。', 'target': '这本书很有意思，我已经看完了。', 'errors': [{'position': 9, 'correction': ['以', '已'], 'score': 20.8...}]}

The result's `target` always has the length of `source` (spelling correction replaces characters; it never
inserts or deletes), and each error's `position` indexes `source` (`source[position] == correction[0]`).

Only Chinese characters change, and only into one of their confusable characters (same or similar sound, similar
shape: the `confusion_sets.json` saved with the model). A model shipped with a character n-gram LM
(`ngram_lm.safetensors`, as the default is) scores each candidate by that LM, jieba's word frequencies and its own
correction head together, and makes a change when the score exceeds `threshold` nats (default: the model's
`correction_fusion`, chosen on its dev set; see `ernie_zoo.models.correction`). A model without one makes a change
when it prefers the candidate to the character as written by at least `min_prob` (default: the model's
`correction_min_prob`). Latin, digits,
punctuation and whitespace are never touched. Traditional input is read as Simplified by the model; characters
that are not corrected are returned exactly as given, and a correction comes back in the input's script: in
Traditional where the character it replaces is Traditional or the text reads as Traditional
(`ernie_zoo.text.traditional.reads_traditional`), converted with OpenCC's s2t in the context of its neighbours
(少先隊員因該為老人讓坐 -> 少先隊員應該為老人讓坐, 我們的頭法很長 -> 我們的頭髮很長).

`user_dict` (a path or a list of words, one per line; jieba's `word [freq] [tag]` lines are read too) lists words
never to correct, e.g. names and terms the model does not know:

>>> Taskflow("text_correction", user_dict=["以经"])("这本书很有意思，我以经看完了。")["errors"]  # doctest: +SKIP
[]

Texts longer than `max_seq_len` are split by sentences; positions are into the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ernie_zoo.models.correction import (
    ErnieZooForSpellingCorrection,
    candidate_gains,
    candidate_table,
    char_options,
    choose_corrections,
    decode_corrections,
    model_log_gains,
)
from ernie_zoo.text.confusion import is_cjk
from ernie_zoo.text.lexicon import AhoCorasick
from ernie_zoo.text.segment import read_user_dict
from ernie_zoo.text.traditional import reads_traditional, to_simplified, to_traditional
from ernie_zoo.text.words import WordUnigram

from .task import Chunk, EncoderTask, Prepared, Result, register_task, require

SCRIPT_CONTEXT = 3  # characters either side of a correction that OpenCC reads to choose its Traditional form


@dataclass
class CorrectionOptions:
    """Options of text_correction.

    min_prob: a model decoded alone: how much more probable than the character as written a correction must be
        (0 to 1); default: the model's `correction_min_prob`.
    threshold: a model shipped with an n-gram LM (fused decoding): the score, in nats, a correction must exceed
        (a finite number >= 0: below 0 a change would make the text less likely than as written); default: the
        model's (config.correction_fusion). Higher: fewer, surer corrections.
    """

    min_prob: float | None = None
    threshold: float | None = None

    def validate(self) -> None:
        # (NaN and infinity are refused for every option by build_options)
        require(
            self.min_prob is None or 0.0 <= self.min_prob <= 1.0,
            f"min_prob must be between 0 and 1, got {self.min_prob}",
        )
        require(
            self.threshold is None or self.threshold >= 0.0,
            f"threshold must be >= 0 (nats), got {self.threshold}",
        )


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
            isinstance(getattr(self.model, "module", self.model), ErnieZooForSpellingCorrection),
            f"text_correction needs an ErnieZooForSpellingCorrection model, not {type(self.model).__name__}",
        )
        self.fusion = self.model.fusion
        if self.fusion is not None:
            require(
                options.min_prob is None,
                "min_prob applies to a model decoded alone; this one fuses an n-gram LM: use threshold",
            )
            if options.threshold is not None:
                self.fusion = replace(self.fusion, threshold=float(options.threshold))
            self.words = WordUnigram.jieba() if self.fusion.word else None
        require(
            self.fusion is not None or options.threshold is None,
            "threshold applies to a model with an n-gram LM (ngram_lm.safetensors); use min_prob",
        )
        min_prob = options.min_prob
        if min_prob is None:
            min_prob = float(getattr(self.model.config, "correction_min_prob", 0.0))
        require(0.0 <= min_prob <= 1.0, f"min_prob must be between 0 and 1, got {min_prob}")
        self.min_prob = min_prob
        sets = self.model.confusion_sets
        self.candidates = candidate_table(sets, self.tokenizer.get_vocab()) if sets is not None else None
        # token id -> whether it has candidates (the positions fused decoding scores)
        self.has_candidates = torch.zeros(
            max(len(self.tokenizer), self.model.config.vocab_size), dtype=torch.bool
        )
        self.has_candidates[list(self.candidates or ())] = True
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
        eligible = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
        for row, chunk in enumerate(chunks):
            for t, (start, end) in enumerate(chunk.offsets):
                if end - start == 1 and not chunk.special[t]:
                    eligible[row, t] = True
        if self.fusion is not None:
            # the correction head only where a character may change: (N, V), not (B, T, V)
            needed = eligible & self.has_candidates.to(eligible.device)[batch["input_ids"]]
            out = self.model(**batch, logits_mask=needed)
            return [
                (out.detection_logits[i].float(), gains)
                for i, gains in enumerate(self._gains(out, batch, needed))
            ]
        out = self.model(**batch)
        rows = decode_corrections(out.logits, batch["input_ids"], eligible, self.candidates, self.min_prob)
        return [(out.detection_logits[i].float(), rows[i]) for i in range(len(chunks))]

    def _gains(self, out, batch, needed) -> list[dict[int, dict[int, float]]]:
        """Per row: token position -> {candidate token id: the model's log-probability gain over the input}, at
        the `needed` positions, whose correction logits `out.logits` holds (N, V) in row-major order."""
        gains: list[dict[int, dict[int, float]]] = [{} for _ in range(needed.shape[0])]
        if self.candidates is None or not needed.any():
            return gains
        logp = out.logits.float().log_softmax(-1)  # (N, V)
        rows, cols = torch.nonzero(needed, as_tuple=True)
        found = model_log_gains(logp, batch["input_ids"][needed], range(len(rows)), self.candidates)
        for n, by_id in found.items():
            gains[int(rows[n])][int(cols[n])] = by_id
        return gains

    def _fused(self, text: str, simplified: str, pairs, protected: list[bool]) -> list[dict[str, Any]]:
        """The errors fused decoding finds in one text (the n-gram LM and word model read the whole text)."""
        candidates: dict[int, dict[str, float]] = {}
        for chunk, (_, gains) in pairs:
            for t, by_id in gains.items():
                pos = chunk.start + chunk.offsets[t][0]
                if protected[pos] or not is_cjk(simplified[pos]):
                    continue
                if options := char_options(by_id, self.tokenizer.convert_ids_to_tokens, simplified[pos]):
                    candidates[pos] = options
        chosen = choose_corrections(
            candidate_gains(simplified, candidates, self.model.ngram_lm, self.words), self.fusion
        )
        return [
            {"position": i, "correction": (text[i], new), "score": round(score, 4)}
            for i, new, score in chosen
        ]

    def _alone(self, text: str, simplified: str, pairs, protected: list[bool]) -> list[dict[str, Any]]:
        """The errors the model decoded alone found in one text (`decode_corrections` per chunk)."""
        errors = []
        for chunk, (_, corrections) in pairs:
            for t, token_id, margin in corrections:
                pos = chunk.start + chunk.offsets[t][0]
                new = self.tokenizer.convert_ids_to_tokens(token_id)
                if protected[pos] or not is_cjk(simplified[pos]) or not is_cjk(new):
                    continue
                if new == simplified[pos]:
                    continue
                errors.append({"position": pos, "correction": (text[pos], new), "score": round(margin, 4)})
        return errors

    def _in_script(self, text: str, simplified: str, errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The corrections of a text holding Traditional characters, each written in Traditional where the
        character it replaces is Traditional or the whole text reads as Traditional (the model chose them in
        Simplified). OpenCC converts the corrected text around each change, so phrases pick the right form
        (应该 -> 應該, 头发 -> 頭髮)."""
        fixed = list(simplified)
        for e in errors:
            fixed[e["position"]] = e["correction"][1]
        whole = reads_traditional(text)
        out = []
        for e in errors:
            pos, (old, new) = e["position"], e["correction"]
            if whole or old != simplified[pos]:
                start = max(0, pos - SCRIPT_CONTEXT)
                new = to_traditional("".join(fixed[start : pos + SCRIPT_CONTEXT + 1]))[pos - start]
            out.append({**e, "correction": (old, new)})
        return out

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[CorrectionResult]:
        decode = self._fused if self.fusion is not None else self._alone
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            simplified = to_simplified(text)
            errors = sorted(
                decode(text, simplified, pairs, self._protected(simplified)), key=lambda e: e["position"]
            )
            if errors and text != simplified:
                errors = self._in_script(text, simplified, errors)
            chars = list(text)
            for e in errors:
                chars[e["position"]] = e["correction"][1]
            results.append(CorrectionResult(text, "".join(chars), errors))
        return results

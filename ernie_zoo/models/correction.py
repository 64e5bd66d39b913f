"""Chinese spelling correction (CSC): ERNIE with a detection head and a correction head, and its decoding.

The shape of MacBERT4CSC / ERNIE-CSC: one encoder, two heads on every character.

    input_ids, pinyin_ids ─► ErnieZooModel (char features: pinyin, radical, strokes) ─► hidden (B, T, H)
                                                                                     ├─► detector: Linear(H, 1)   p(char is wrong)
                                                                                     └─► cls: MLM head (B, T, V)  the right character

    loss = (1 - w) * CE(correction logits, right characters) + w * BCE(detection logits, input != right)
           with w = config.detection_loss_weight (MacBERT4CSC uses 0.3); in training the CE covers every wrong
           character and a config.correction_copy_rate sample of the right ones

The correction head is the masked-LM head of the pretrained encoder (same weights, tied to the embeddings), so a
model starts from an `ErnieZooForMaskedLM` directory with only the detector new. The input character's pinyin is
the pinyin of the *wrong* character as written: the sound a writer meant, which is exactly the evidence a
homophone error leaves.

Decoding (:func:`decode_corrections`) only lets a character become one of its confusable characters (same or
near sound, similar shape: `ernie_zoo.data.spelling.ConfusionSets`, saved with the model as
`confusion_sets.json`), and only when the model prefers that candidate to the character as written by at least
`correction_min_prob`. Nothing else changes, so a sentence's length never does.

Training computes the correction logits only where a label is set (the Chinese characters), not over padding and
punctuation: the vocabulary projection is most of the cost of a small model's step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import ModelOutput

from ernie_zoo.text.confusion import CONFUSION_FILE, ConfusionSets, is_cjk
from ernie_zoo.text.words import WordUnigram

from .heads import HeadInputs, head_forward
from .modeling import ErnieZooForMaskedLM, saved_file
from .ngram import CharNgramLM
from .registry import register

IGNORE = -100
NGRAM_FILE = "ngram_lm.safetensors"


@dataclass
class SpellingCorrectionOutput(ModelOutput):
    """loss: the combined loss; logits: (B, T, V) correction scores (in training, (N, V) for the N labelled
    positions only); detection_logits: (B, T) scores that each character is wrong."""

    loss: torch.Tensor | None = None
    correction_loss: torch.Tensor | None = None
    detection_loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    detection_logits: torch.Tensor | None = None


@register("text-correction")
class ErnieZooForSpellingCorrection(ErnieZooForMaskedLM):
    """ERNIE + character features with a per-character detection head and the MLM head as correction head."""

    def __init__(self, config):
        super().__init__(config)
        self.detector = nn.Linear(config.hidden_size, 1)
        #: the characters each character may be corrected to (`confusion_sets.json` of the directory), or None
        self.confusion_sets: ConfusionSets | None = None
        #: the character n-gram LM fused with the model at decoding (`ngram_lm.safetensors`), or None
        self.ngram_lm: CharNgramLM | None = None
        self.post_init()

    @property
    def fusion(self) -> FusionWeights | None:
        """How decoding weighs the n-gram LM, the word model and this model (config.correction_fusion), or None
        for the model alone."""
        weights = getattr(self.config, "correction_fusion", None)
        return FusionWeights(**weights) if weights and self.ngram_lm is not None else None

    def load_saved_files(self, model_name_or_path, **hub_kwargs) -> None:
        if (path := saved_file(model_name_or_path, CONFUSION_FILE, **hub_kwargs)) is not None:
            self.confusion_sets = ConfusionSets.load(path)
        if (path := saved_file(model_name_or_path, NGRAM_FILE, **hub_kwargs)) is not None:
            self.ngram_lm = CharNgramLM.load(path)

    def save_saved_files(self, directory: Path) -> None:
        if self.confusion_sets is not None:
            self.confusion_sets.save(directory / CONFUSION_FILE)
        if self.ngram_lm is not None:
            self.ngram_lm.save(directory / NGRAM_FILE)

    @property
    def detection_loss_weight(self) -> float:
        return float(getattr(self.config, "detection_loss_weight", 0.3))

    @head_forward
    def forward(
        self, inputs: HeadInputs, logits_mask: torch.Tensor | None = None, **kwargs
    ) -> SpellingCorrectionOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The right token at each position (`-100` where nothing is learned: special tokens, padding, non-Chinese
            tokens). A position is wrong, for the detection loss, where its label differs from `input_ids`.
        logits_mask (`torch.BoolTensor` of shape `(batch_size, sequence_length)`, *optional*, without labels):
            compute the correction logits only where True, as `(N, V)` in row-major order: a (B, T, V) tensor is
            B x T x 16,000 floats (1 GB for 32 chunks of 512 tokens), and a decoder needs a few positions of it.
        """
        input_ids, labels = inputs.input_ids, inputs.labels
        hidden = self.ernie(
            **self.encoder_inputs(inputs, kwargs), return_dict=True
        ).last_hidden_state  # (B, T, H)
        detection_logits = self.detector(hidden).squeeze(-1)  # (B, T)
        if labels is None:
            logits = self.cls(hidden if logits_mask is None else hidden[logits_mask])
            return SpellingCorrectionOutput(logits=logits, detection_logits=detection_logits)
        if input_ids is None:
            raise ValueError(
                "labels need input_ids: a position is wrong where its label differs from its input"
            )
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels shape {tuple(labels.shape)} != input_ids shape {tuple(input_ids.shape)}"
            )
        keep = labels != IGNORE
        wrong_all = labels != input_ids
        if int(keep.sum()) == 0:
            # A zero that keeps the graph (and DDP/ZeRO's gradient hooks) alive on an empty batch.
            zero = hidden.sum() * 0.0
            logits = None if self.training else self.cls(hidden)
            return SpellingCorrectionOutput(zero, zero, zero, logits, detection_logits)
        if self.training:
            # Only labelled positions go through the vocabulary projection (most of a small model's step), and
            # of the right characters only a `correction_copy_rate` sample: the wrong ones carry the signal.
            rate = float(getattr(self.config, "correction_copy_rate", 1.0))
            chosen = keep
            if rate < 1:
                chosen = keep & (wrong_all | (torch.rand(keep.shape, device=keep.device) < rate))
            logits = self.cls(hidden[chosen])  # (N, V)
            correction_loss = F.cross_entropy(logits, labels[chosen])
        else:
            logits = self.cls(hidden)  # (B, T, V)
            correction_loss = F.cross_entropy(logits[keep], labels[keep])
        wrong = wrong_all[keep].to(detection_logits.dtype)
        detection_loss = F.binary_cross_entropy_with_logits(detection_logits[keep], wrong)
        w = self.detection_loss_weight
        loss = (1 - w) * correction_loss + w * detection_loss
        return SpellingCorrectionOutput(loss, correction_loss, detection_loss, logits, detection_logits)


def candidate_table(confusion_sets, vocab: dict[str, int]) -> dict[int, torch.Tensor]:
    """token id -> ids of the tokens it may be corrected to (its confusable characters that the vocab has)."""
    table: dict[int, torch.Tensor] = {}
    for ch, tid in vocab.items():
        if len(ch) != 1 or ch not in confusion_sets:
            continue
        ids = sorted({vocab[c] for c in confusion_sets.candidates(ch) if c in vocab and vocab[c] != tid})
        if ids:
            table[tid] = torch.tensor(ids, dtype=torch.long)
    return table


@torch.no_grad()
def decode_corrections(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    eligible: torch.Tensor,
    candidates: dict[int, torch.Tensor] | None,
    min_prob: float,
) -> list[list[tuple[int, int, float]]]:
    """Corrections per row: [(position, new token id, margin)], margin = p(new token) - p(input token).

    A position is changed only if `eligible` (a Chinese character the caller allows to change), the model's most
    probable token there is one of the candidates of the input token (any token when `candidates` is None), and
    its probability exceeds the input token's by at least `min_prob`.

    logits: (B, T, V); input_ids, eligible: (B, T).
    """
    probs = logits.float().softmax(-1)
    out: list[list[tuple[int, int, float]]] = [[] for _ in range(input_ids.shape[0])]
    p_input = probs.gather(-1, input_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    top = probs.argmax(-1)  # (B, T)
    # Only positions whose best token is not the input can change: a cheap filter before the candidate lookups.
    rows, cols = torch.nonzero(eligible & (top != input_ids), as_tuple=True)
    for b, t in zip(rows.tolist(), cols.tolist()):
        tid = int(input_ids[b, t])
        if candidates is None:
            best, p_best = int(top[b, t]), float(probs[b, t, top[b, t]])
        else:
            cand = candidates.get(tid)
            if cand is None:
                continue
            p_cand = probs[b, t, cand]
            k = int(p_cand.argmax())
            best, p_best = int(cand[k]), float(p_cand[k])
        margin = p_best - float(p_input[b, t])
        if margin >= min_prob:
            out[b].append((t, best, margin))
    return out


# ------------------------------------------------------------------------------------------- fused decoding
#
# A candidate change c at position i of text x is scored
#
#     score = lm * [log P_lm(x with c) - log P_lm(x)]          over the characters whose n-gram context holds i
#           + word * [log P_word(window with c) - log P_word(window)]   best segmentation of x[i-4 : i+5]
#           + model * [log p_model(c | x) - log p_model(x_i | x)]       the correction head at i
#
# and applied when the score exceeds `threshold`, best first, never within `min_distance` of a change already made
# (each score assumed its neighbours as written). The n-gram LM and the word model bring what a small encoder
# lacks: the n-gram counts of every sentence of the training text, and word frequencies from jieba's dictionary.


@dataclass(frozen=True)
class FusionWeights:
    """The weights and threshold of fused decoding (nats; chosen on the synthetic dev split)."""

    lm: float = 1.0
    word: float = 0.0
    model: float = 0.0
    threshold: float = 0.0
    min_distance: int = 4

    def to_dict(self) -> dict:
        return asdict(self)


WORD_WINDOW = 4  # characters either side of a change that the word model reads


def model_log_gains(
    logp: torch.Tensor, input_ids: torch.Tensor, positions, candidates: dict[int, torch.Tensor]
) -> dict[int, dict[int, float]]:
    """token position -> {candidate token id: log p(candidate) - log p(input token)} at `positions` of one row
    whose input token has candidates. logp: (T, V) log-probabilities; input_ids: (T,)."""
    out = {}
    for t in positions:
        tid = int(input_ids[t])
        cand = candidates.get(tid)
        if cand is not None:
            out[t] = dict(zip(cand.tolist(), (logp[t, cand] - logp[t, tid]).tolist()))
    return out


def char_options(by_id: dict[int, float], id_to_token, written: str) -> dict[str, float]:
    """`model_log_gains`' entry for one position as {candidate character: gain}: Chinese characters other than
    the one `written` there (the text-side filter fused decoding applies)."""
    tokens = id_to_token(list(by_id))
    return {c: g for c, g in zip(tokens, by_id.values()) if is_cjk(c) and c != written}


def candidate_gains(
    text: str,
    candidates: dict[int, dict[str, float]],
    lm: CharNgramLM,
    words: WordUnigram | None = None,
) -> list[tuple[int, str, float, float, float]]:
    """(position, candidate, n-gram gain, word gain, model gain) of each candidate change of `text`.

    candidates: position -> {candidate character: the model's log-probability gain over the character as
    written} (0.0 for a corrector without a model). The n-gram gains come from one vectorised LM call; the word
    gains are 0.0 without `words`.
    """
    order = lm.order
    windows, meta = [], []  # one window with the character as written, then one per candidate
    for i in sorted(candidates):
        start, end = max(0, i - order + 1), min(len(text), i + order)
        window = list(text[start:end])
        k = i - start
        for cand in [None, *candidates[i]]:
            if cand is not None:
                window[k] = cand
            windows.append("".join(window))
            meta.append((i, cand, k, end - start))
    if not windows:
        return []
    ids, positions = lm._encode(windows)
    logp = np.log(lm._probs(ids, positions))
    out, offset, base, word_base = [], 0, 0.0, 0.0
    for i, cand, k, length in meta:
        score = float(logp[offset + k : offset + length].sum())
        offset += length
        ws, we = max(0, i - WORD_WINDOW), min(len(text), i + WORD_WINDOW + 1)
        if cand is None:  # the character as written comes first at each position
            base = score
            word_base = words.logprob(text[ws:we]) if words is not None else 0.0
            continue
        word_gain = 0.0
        if words is not None:
            word_gain = words.logprob(text[ws:i] + cand + text[i + 1 : we]) - word_base
        out.append((i, cand, score - base, word_gain, candidates[i][cand]))
    return out


def choose_corrections(
    gains: list[tuple[int, str, float, float, float]], weights: FusionWeights
) -> list[tuple[int, str, float]]:
    """(position, new character, score) of the changes fused decoding makes, by position (see above)."""
    best = []
    for i, cand, lm_gain, word_gain, model_gain in gains:
        score = weights.lm * lm_gain + weights.word * word_gain + weights.model * model_gain
        if score > weights.threshold:
            best.append((score, i, cand))
    chosen: dict[int, tuple[str, float]] = {}
    near = range(-weights.min_distance + 1, weights.min_distance)  # offsets of the positions a change blocks
    for score, i, cand in sorted(best, reverse=True):
        # the positions within min_distance, looked up (not every change made so far: that was quadratic in the
        # text's length, 100k characters making thousands of changes)
        if i in chosen or any(i + d in chosen for d in near):
            continue
        chosen[i] = (cand, score)
    return [(i, c, s) for i, (c, s) in sorted(chosen.items())]


__all__ = [
    "NGRAM_FILE",
    "ErnieZooForSpellingCorrection",
    "FusionWeights",
    "SpellingCorrectionOutput",
    "candidate_gains",
    "candidate_table",
    "char_options",
    "choose_corrections",
    "decode_corrections",
    "model_log_gains",
]

"""Decoding rules of ErnieZoo's causal LMs that transformers' `generate()` applies itself.

Two ernie-zoo keys of `generation_config.json` (kept by transformers as custom attributes of the model's
`generation_config`, and written back by `save_pretrained`):

- `eos_min_prob` (float, 0 = off): the end token is only chosen while the model gives it at least this probability;
- `poem_format` (bool): decode classical verse (5- or 7-character lines, a comma after odd lines and a full stop
  after even ones, the end only after 4 or 8 lines). `poem_mark_ids` ({"mid": [...], "end": [...]}) names the
  token ids of the two kinds of marks; Han-character tokens are those with a radical in the model's character table.

`ErnieZooForCausalLM` adds the processors below to `generate()` from those keys unless the caller passes its own
(Taskflow builds them from its tokenizer), so `pipeline("text-generation")` and `model.generate()` decode as
Taskflow does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

# The verse form shared by `poem_format` decoding and the format checks of ernie_zoo.evaluation.poetry.
MID_MARKS = "，、,;；:："  # ends the first line of a couplet
END_MARKS = "。！？.!?"  # ends a couplet
HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LINE_LENGTHS = (5, 7)  # Han characters per line
LINE_COUNTS = (4, 8)  # lines of a quatrain (绝句) and an octave (律诗)


class EosMinProb(LogitsProcessor):
    """Forbid the end token in every row where the model gives it less than `min_prob` (computed from the scores
    it receives: after repetition_penalty; for beam search these are log-probabilities, which softmax maps back)."""

    def __init__(self, eos_id: int, min_prob: float):
        self.eos_id, self.min_prob = eos_id, min_prob

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        p_end = scores.float().softmax(-1)[:, self.eos_id]
        scores = scores.clone()
        scores[p_end < self.min_prob, self.eos_id] = -float("inf")
        return scores


_HAN, _MID, _END, _OTHER = 0, 1, 2, 3


def token_classes(tokens: list[str]) -> torch.Tensor:
    """Class of each vocabulary token for PoemFormat: one Han character, a line-internal mark (，、；：),
    a line-final mark (。！？), or anything else (WordPiece's ``##`` prefix is ignored)."""
    out = []
    for tok in tokens:
        t = tok[2:] if tok.startswith("##") else tok
        if len(t) == 1 and HAN_RE.fullmatch(t):
            out.append(_HAN)
        elif len(t) == 1 and t in MID_MARKS:
            out.append(_MID)
        elif len(t) == 1 and t in END_MARKS:
            out.append(_END)
        else:
            out.append(_OTHER)
    return torch.tensor(out, dtype=torch.long)


@dataclass
class VerseState:
    """Where a poem stands: lines completed, their common length (None until the first line ends) and Han
    characters in the current line."""

    lines: int = 0
    length: int | None = None
    chars: int = 0

    def step(self, cls: int) -> None:
        if cls == _HAN:
            self.chars += 1
        elif cls in (_MID, _END) and self.chars:
            self.length = self.length or self.chars
            self.lines, self.chars = self.lines + 1, 0

    @classmethod
    def from_prompt(cls, classes: list[int]) -> VerseState:
        """The state after a prompt that holds complete lines of one length (5 or 7), e.g. a first line; any
        other prompt (a title) starts a new poem."""
        lengths, chars = [], 0
        for c in classes:
            if c == _HAN:
                chars += 1
            elif c in (_MID, _END) and chars:
                lengths.append(chars)
                chars = 0
        if lengths and len(set(lengths)) == 1 and lengths[0] in LINE_LENGTHS and chars < lengths[0]:
            return cls(len(lengths), lengths[0], chars)
        return cls()


class PoemFormat(LogitsProcessor):
    """Keep only the tokens that continue a well-formed 5- or 7-character quatrain or octave (see
    GenerationOptions.poem_format); the model's scores decide among them."""

    def __init__(self, classes: torch.Tensor, eos_id: int, prompt_len: int, prompt_states: list[VerseState]):
        self.classes, self.eos_id, self.prompt_len = classes, eos_id, prompt_len
        self.prompt_states = prompt_states  # one per batch row before beams / return sequences expand it
        self.masks = {c: classes == c for c in (_HAN, _MID, _END)}

    def allowed(self, state: VerseState) -> torch.Tensor:
        mark = self.masks[_MID] if state.lines % 2 == 0 else self.masks[_END]
        none = torch.zeros_like(mark)
        if state.chars == 0:
            if state.lines >= max(LINE_COUNTS):
                ok = none.clone()
            else:
                ok = self.masks[_HAN].clone()
            if state.lines in LINE_COUNTS:
                ok[self.eos_id] = True
            return ok
        lengths = (state.length,) if state.length else LINE_LENGTHS
        ok = none.clone()
        if state.chars < max(lengths):
            ok |= self.masks[_HAN]
        if state.chars in lengths:
            ok |= mark
        return ok

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        expand = input_ids.shape[0] // len(self.prompt_states)
        classes = self.classes.to(input_ids.device)[input_ids[:, self.prompt_len :]].tolist()
        for row, row_classes in enumerate(classes):
            start = self.prompt_states[row // expand]
            state = VerseState(start.lines, start.length, start.chars)
            for c in row_classes:
                state.step(c)
            ok = self.allowed(state).to(scores.device)
            if ok.any():
                scores[row, ~ok] = -float("inf")
        return scores


def poem_classes(radical_ids: torch.Tensor, mark_ids: dict) -> torch.Tensor:
    """`token_classes` of a vocabulary from the model's radical table (a Han character has a radical) and the mark
    ids of `generation_config.poem_mark_ids`."""
    classes = torch.full_like(radical_ids, _OTHER)
    classes[radical_ids > 0] = _HAN
    classes[torch.as_tensor(mark_ids.get("mid", []), dtype=torch.long)] = _MID
    classes[torch.as_tensor(mark_ids.get("end", []), dtype=torch.long)] = _END
    return classes


def poem_mark_ids(tokens: list[str]) -> dict[str, list[int]]:
    """`generation_config.poem_mark_ids` of a vocabulary (its tokens in id order)."""
    classes = token_classes(tokens).tolist()
    return {
        "mid": [i for i, c in enumerate(classes) if c == _MID],
        "end": [i for i, c in enumerate(classes) if c == _END],
    }


def causal_lm_generation_fields(tokenizer, poem_format: bool, max_new_tokens: int = 64) -> dict:
    """generation_config.json fields that make transformers' `generate()` / `pipeline("text-generation")` decode an
    ErnieZoo causal LM (BERT-style vocabulary: the poem ends at `[SEP]`) as Taskflow does: greedy, `max_new_tokens`,
    the end token, and (with `poem_format`) the verse marks. `_from_model_config: false` makes transformers keep
    the ernie-zoo keys (`eos_min_prob`, `poem_format`, `poem_mark_ids`) as attributes of the model's
    generation_config, and write them back in `save_pretrained`."""
    fields = {
        "_from_model_config": False,
        "do_sample": False,
        "eos_token_id": tokenizer.sep_token_id,
        "max_new_tokens": max_new_tokens,
        "poem_format": poem_format,
    }
    if poem_format:
        fields["poem_mark_ids"] = poem_mark_ids(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
    return fields


def decoding_processors(
    generation_config, radical_ids: torch.Tensor | None, prompt_ids: torch.Tensor | None, present: list
) -> list[LogitsProcessor]:
    """The processors that `generation_config`'s `eos_min_prob` / `poem_format` ask for, minus those of a type in
    `present` (the caller's own)."""
    out: list[LogitsProcessor] = []
    eos = generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos
    kinds = {type(p) for p in present}
    min_prob = getattr(generation_config, "eos_min_prob", 0.0) or 0.0
    if min_prob > 0 and EosMinProb not in kinds:
        if eos is None:
            raise ValueError("generation_config.eos_min_prob needs generation_config.eos_token_id")
        out.append(EosMinProb(eos, float(min_prob)))
    if getattr(generation_config, "poem_format", False) and PoemFormat not in kinds:
        marks = getattr(generation_config, "poem_mark_ids", None)
        if eos is None or radical_ids is None or not marks:
            raise ValueError(
                "generation_config.poem_format needs eos_token_id, poem_mark_ids and a model with radical features"
            )
        classes = poem_classes(radical_ids.cpu(), marks)
        if (
            prompt_ids is None
            or prompt_ids.dim() != 2
            or prompt_ids.is_floating_point()
            or not prompt_ids.numel()
        ):
            # generation from inputs_embeds or from nothing: a new poem
            states, length = [VerseState()], 0
        else:
            states = [VerseState.from_prompt(row) for row in classes[prompt_ids.cpu()].tolist()]
            length = prompt_ids.shape[1]
        out.append(PoemFormat(classes, eos, length, states))
    return out


@torch.no_grad()  # not inference_mode: fine-tuning's dev generation runs on weights it trains afterwards (ZeRO-3)
def greedy_continuations(
    model,
    encoded: list[list[int]],
    *,
    eos_token_id: int,
    pad_token_id: int | None,
    max_new_tokens: int,
    decode,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    **generate_kwargs,
) -> list[str]:
    """Greedy continuations of the token-id prompts `encoded` by `model.generate`, cut before the end token and
    turned into text by `decode(new_ids)`. Prompts of equal length are generated together, up to `batch_size` at a
    time (no padding, so a prompt's continuation does not depend on the others beyond floating-point summation
    order; batch_size 1 generates each alone)."""
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    outs: list[str] = [""] * len(encoded)
    for length, group in sorted(by_length.items()):
        for k in range(0, len(group), batch_size):
            rows = group[k : k + batch_size]
            ids = torch.tensor([encoded[i] for i in rows], device=device)
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eos_token_id,
                pad_token_id=pad_token_id,
                **generate_kwargs,
            )
            for j, i in enumerate(rows):
                new = gen[j, length:].tolist()
                if eos_token_id in new:
                    new = new[: new.index(eos_token_id)]
                outs[i] = decode(new)
    return outs


__all__ = [
    "greedy_continuations",
    "EosMinProb",
    "causal_lm_generation_fields",
    "PoemFormat",
    "VerseState",
    "decoding_processors",
    "poem_classes",
    "poem_mark_ids",
    "token_classes",
]

"""Text generation: continue each prompt with a causal language model (greedy, sampling or beam search).

Usage with the shipped default model, ernie-zoo-mini-generator (a 7M-parameter ERNIE 4.5 decoder pretrained here on
news, reviews, dictionary and idiom text; it continues text in its register, and invents facts; greedy with the
model's repetition_penalty 1.1):

>>> from ernie_zoo.taskflow import Taskflow
>>> Taskflow("text_generation")(["今天天气很好，", "成语“画蛇添足”是什么意思？答："])  # doctest: +NORMALIZE_WHITESPACE
[{'text': '今天天气很好，', 'generated': ['我们还是不错的。']},
 {'text': '成语“画蛇添足”是什么意思？答：', 'generated': ['形容人的声音。']}]

Classical verse is `mode="poetry"` (ernie-zoo-mini-poetry, a 4-layer toy poet; its outputs are those it gave as the
default before the generator shipped: repetition_penalty 1.2, eos_min_prob 0.1, poem_format on):

>>> Taskflow("text_generation", mode="poetry")(["春眠不觉晓，", "登高"])  # doctest: +NORMALIZE_WHITESPACE
[{'text': '春眠不觉晓，', 'generated': ['春色已成秋。不是春风里,无人不见愁。']},
 {'text': '登高', 'generated': ['一日一江东,一片云间万。山色不可见,山色无人见。']}]

With a local model directory (task_path=; here a tiny ErnieZooForCausalLM the test-suite trains on two Tang
poems):

>>> poet = Taskflow("text_generation", task_path=poetry_dir, max_new_tokens=9)
>>> poet("床前明月光，")
{'text': '床前明月光，', 'generated': ['疑是地上霜。举头望']}
>>> sampler = Taskflow("text_generation", task_path=poetry_dir, decode_strategy="sampling", seed=7, num_return_sequences=2)
>>> len(sampler("春眠不觉晓，")["generated"])
2

Works with any local causal-LM directory transformers can load (ErnieZooForCausalLM, GPT-2, ...). With a
BERT-style tokenizer the prompt is `[CLS] text` (no `[SEP]`), generation stops at `[SEP]` and the continuation is
joined without spaces between Chinese characters (ErnieZoo/BERT vocabularies are NFKC-normalised and lower-cased,
so full-width punctuation such as "，" comes back as "," and Latin letters lower-case). A prompt longer than
`max_seq_len - max_new_tokens` tokens keeps its start token and its last tokens (logged); where max_new_tokens leaves
no room for even one token of the prompt, the prompt is refused (ValueError; HTTP 422).

A tokenizer with a chat template (a decoder fine-tuned by `ernie-finetune` with task instruction saves one) turns
each text into one user turn with the template's generation prompt, as `tokenizer.apply_chat_template(...,
add_generation_prompt=True)` does, and the answer is generated from there. Such a model also takes a whole
conversation as one input, a list of `{"role": "system" | "user" | "assistant", "content": ...}` messages (a list
of conversations gives a list of results); its result's `text` is the conversation as given (docs/decoders.md
trains such a model; tests/test_finetune_chat.py checks the answers against `model.generate`):

    chat = Taskflow("text_generation", task_path="outputs/chat-dpo")
    chat([{"role": "system", "content": "你只回答反义词。"}, {"role": "user", "content": "大的反义词是什么？"}])
    # -> {'text': [{'role': 'system', ...}, {'role': 'user', ...}], 'generated': [...]}

Determinism: greedy and beam search are deterministic; prompts of equal token length are batched together, so
no padding is ever needed and results do not depend on batch size or input order. Sampling with `seed` runs each
prompt alone with the RNG seeded to `seed`, so a prompt gets the same continuation whatever else is in the call.

Streaming: with `stream=True` a call takes one text and returns an iterator of text pieces, yielded as the model
produces them (greedy or sampling, one continuation); joined, the pieces equal the `generated[0]` a non-streamed
call returns with the same options. Closing the iterator early (`.close()`, or leaving a `for` loop that holds
the last reference) stops the generation.

>>> pieces = Taskflow("text_generation", task_path=poetry_dir, max_new_tokens=9, stream=True)("床前明月光，")
>>> "".join(pieces)
'疑是地上霜。举头望'

Options: `max_new_tokens`, `min_new_tokens`, `eos_min_prob`, `poem_format`, `decode_strategy`, `num_beams`,
`temperature`, `top_k`, `top_p`, `repetition_penalty`, `num_return_sequences`, `seed`, `stream`.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from ..models.decoder import chat_prompt_ids
from ..models.generation import EosMinProb, PoemFormat, VerseState, token_classes
from .task import Result, Task, register_task, require, without_onednn
from .text import clean_surrogates, join_wordpieces

logger = logging.getLogger(__name__)
# Upper bounds of the size options: each multiplies the work of a call (num_beams=5000 was accepted and ran
# 5,000 beams per prompt). Far above any useful setting for a small model; raise them here if one ever needs more.
MAX_NEW_TOKENS = 4096
MAX_BEAMS = 64
MAX_RETURN_SEQUENCES = 64
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
_RNG_LOCK = threading.Lock()  # sampling uses torch's global RNG


@dataclass
class GenerationOptions:
    """Options of text_generation.

    max_new_tokens: tokens to generate after the prompt (64: an eight-line poem of 7-character lines with its
        punctuation); at most 4096, and the prompt must still fit the model's positions.
    min_new_tokens: the end token is suppressed until this many tokens are generated (0 = off), e.g. to get more
        than one line of a poem.
    eos_min_prob: the end token is only chosen while the model gives it at least this probability (0 = off).
        Greedy search otherwise stops wherever the end token is merely the single most likely token, even when
        most of the probability is on going on (a poem ending after its first couplet with p(end) = 0.03).
        None: the model's default (`eos_min_prob` in its generation_config.json; ernie-zoo-mini-poetry ships
        0.1, chosen on dev titles), else 0.
    poem_format: decode classical verse: every line 5 or 7 Han characters (the first line decides, or the
        prompt's lines when it ends in a complete line), a comma after odd lines and a full stop (or ! ?) after
        even ones, and the end only after 4 or 8 lines (it is forced after 8). Only Han characters and those
        marks are generated. The model still chooses every character; this only rules out malformed verse.
        None: the model's default (`poem_format` in its generation_config.json; ernie-zoo-mini-poetry ships
        true), else off.
    decode_strategy: "greedy", "sampling" or "beam_search".
    num_beams: beams for beam_search (1 to 64).
    temperature: softmax temperature for sampling (> 0).
    top_k: sample among the k most likely tokens (0 = no limit; at most the vocabulary size).
    top_p: nucleus sampling: the smallest set of tokens whose probability reaches top_p (1.0 = no limit).
    repetition_penalty: > 1 discourages repeating tokens (1.0 = off). None: the model's default (its
        generation_config.json; ernie-zoo-mini-poetry ships 1.2), else 1.0.
    num_return_sequences: continuations per prompt (sampling or beam_search; 1 to 64, at most num_beams for
        beams).
    seed: makes sampling reproducible per prompt (an integer torch.manual_seed accepts: -2**63 to 2**64 - 1).
    stream: a call takes one text and returns an iterator of text pieces as they are generated (greedy or
        sampling, num_return_sequences 1); joined they equal the non-streamed continuation.
    """

    max_new_tokens: int = 64
    min_new_tokens: int = 0
    eos_min_prob: float | None = None
    poem_format: bool | None = None
    decode_strategy: Literal["greedy", "sampling", "beam_search"] = "greedy"
    num_beams: int = 4
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float | None = None
    num_return_sequences: int = 1
    seed: int | None = None
    stream: bool = False

    def validate(self) -> None:
        require(
            1 <= self.max_new_tokens <= MAX_NEW_TOKENS,
            f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS}, got {self.max_new_tokens}",
        )
        require(
            0 <= self.min_new_tokens <= self.max_new_tokens,
            f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], got {self.min_new_tokens}",
        )
        require(
            1 <= self.num_beams <= MAX_BEAMS,
            f"num_beams must be between 1 and {MAX_BEAMS}, got {self.num_beams}",
        )
        require(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        require(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        require(
            self.repetition_penalty is None or self.repetition_penalty > 0,
            f"repetition_penalty must be > 0, got {self.repetition_penalty}",
        )
        require(
            self.eos_min_prob is None or 0 <= self.eos_min_prob < 1,
            f"eos_min_prob must be in [0, 1), got {self.eos_min_prob}",
        )
        require(
            1 <= self.num_return_sequences <= MAX_RETURN_SEQUENCES,
            f"num_return_sequences must be between 1 and {MAX_RETURN_SEQUENCES}, got {self.num_return_sequences}",
        )
        require(
            self.seed is None or SEED_RANGE[0] <= self.seed <= SEED_RANGE[1],
            f"seed must be between -2**63 and 2**64 - 1, got {self.seed}",
        )
        require(
            self.decode_strategy != "greedy" or self.num_return_sequences == 1,
            "greedy decoding gives one continuation: use decode_strategy='sampling' or 'beam_search' "
            "for num_return_sequences > 1",
        )
        require(
            self.decode_strategy != "beam_search" or self.num_return_sequences <= self.num_beams,
            f"num_return_sequences ({self.num_return_sequences}) must be <= num_beams ({self.num_beams})",
        )
        require(
            not self.stream or (self.decode_strategy != "beam_search" and self.num_return_sequences == 1),
            "stream=True yields one continuation as it is generated: use decode_strategy 'greedy' or 'sampling' "
            "with num_return_sequences=1 (beam search only knows its best sequence at the end)",
        )


@dataclass
class Prompts:
    texts: list[Any]  # the inputs: texts, or conversations
    ids: list[list[int]]  # token ids of each prompt


@dataclass
class GenerationResult(Result):
    text: str | list[dict[str, str]]  # the input: a text, or a conversation
    generated: list[str] = field(default_factory=list)


@register_task("text_generation", aliases=("generation",), default_model="ernie-zoo-mini-generator")
class TextGeneration(Task):
    auto_class = "AutoModelForCausalLM"
    modes = {"general": "ernie-zoo-mini-generator", "poetry": "ernie-zoo-mini-poetry"}
    takes_conversations = True
    Options = GenerationOptions

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        assert self.loaded is not None
        self.model, self.tokenizer = self.loaded.model, self.loaded.tokenizer
        tok, config = self.tokenizer, self.model.config
        limit = self.settings.max_seq_len
        max_pos = getattr(config, "max_position_embeddings", None)
        if isinstance(max_pos, int) and max_pos > 0:
            limit = min(limit, max_pos)
        vocab = len(self.tokenizer)
        require(
            self.options.top_k <= vocab,
            f"top_k must be at most the vocabulary size ({vocab} tokens; 0 = no limit), got {self.options.top_k}",
        )
        self.window = limit
        self.prompt_budget = limit - self.options.max_new_tokens
        if self.prompt_budget < 1:
            raise ValueError(
                f"max_new_tokens={self.options.max_new_tokens} leaves no room for the prompt within "
                f"{limit} positions (max_seq_len / the model's max_position_embeddings)"
            )
        decoder = getattr(getattr(tok, "backend_tokenizer", None), "decoder", None)
        self.wordpiece = type(decoder).__name__ == "WordPiece" or "WordPiece" in repr(decoder)
        gen = getattr(self.model, "generation_config", None)
        eos = tok.sep_token_id if self.wordpiece and tok.sep_token_id is not None else tok.eos_token_id
        if eos is None and gen is not None:
            eos = gen.eos_token_id
        self.eos_id = eos
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        self.pad_id = pad if pad is not None else 0
        self.special_ids = set(tok.all_special_ids)
        self.repetition_penalty, self.eos_min_prob, self.poem_format = self._decoding_defaults(gen)
        self.token_classes = None
        if self.poem_format:
            if self.eos_id is None:
                raise ValueError("poem_format needs an end token, and this model's tokenizer has none")
            self.token_classes = token_classes(tok.convert_ids_to_tokens(list(range(len(tok)))))

    def _decoding_defaults(self, gen: Any) -> tuple[float, float, bool]:
        """(repetition_penalty, eos_min_prob, poem_format): the options, else the model's
        generation_config.json, else off.

        `repetition_penalty` is a transformers field (plain `generate()` uses it too); `eos_min_prob` and
        `poem_format` are ernie-zoo keys of the same file (see ernie_zoo.models.generation)."""
        opts = self.options
        penalty = opts.repetition_penalty
        if penalty is None:
            penalty = getattr(gen, "repetition_penalty", None) or 1.0
        # transformers keeps them as custom attributes of generation_config (models/generation.py); a directory
        # whose generation_config.json says `_from_model_config: true` has them only in the file.
        saved: dict[str, Any] = {
            k: getattr(gen, k) for k in ("eos_min_prob", "poem_format") if hasattr(gen, k)
        }
        source = self.loaded.source
        path = Path(source.location) / "generation_config.json"
        if (
            not saved
            and source.kind != "hub"
            and path.is_file()
            and (opts.eos_min_prob is None or opts.poem_format is None)
        ):
            saved = json.loads(path.read_text(encoding="utf-8"))
        min_prob = opts.eos_min_prob
        if min_prob is None:
            value = saved.get("eos_min_prob", 0.0)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
                raise ValueError(f"{path}: eos_min_prob must be a number in [0, 1), got {value!r}")
            min_prob = float(value)
        poem = opts.poem_format
        if poem is None:
            poem = saved.get("poem_format", False)
            if not isinstance(poem, bool):
                raise ValueError(f"{path}: poem_format must be true or false, got {poem!r}")
        if min_prob > 0 and self.eos_id is None:
            raise ValueError("eos_min_prob needs an end token, and this model's tokenizer has none")
        return float(penalty), min_prob, poem

    # -- preprocess: token ids per prompt (no trailing [SEP]; left-truncated to the budget)
    def preprocess(self, texts: list[str]) -> Prompts:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return self._chat_prompts(texts)
        chats = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if chats:
            raise ValueError(
                f"text_generation input {chats[0]} is a conversation, but this model's tokenizer has no chat template "
                "to put it in; give texts, or a chat model (ernie-finetune --task instruction saves the template)"
            )
        with self.loaded.lock:
            enc = tok(
                [clean_surrogates(t) for t in texts],
                add_special_tokens=True,
                return_special_tokens_mask=True,
                return_attention_mask=False,
                split_special_tokens=True,
                verbose=False,
            )
        return self._budgeted(texts, [list(ids) for ids in enc["input_ids"]], enc["special_tokens_mask"])

    def _chat_prompts(self, texts: list[str]) -> Prompts:
        """A tokenizer with a chat template (an instruction-tuned decoder, `ernie-finetune --task instruction`):
        each text is one user turn, with the template's generation prompt, as `apply_chat_template` gives it."""
        tok = self.tokenizer
        with self.loaded.lock:
            ids = [
                chat_prompt_ids(
                    tok,
                    clean_surrogates(t)
                    if isinstance(t, str)
                    else [{**m, "content": clean_surrogates(m["content"])} for m in t],
                )
                for t in texts
            ]
        special_ids = set(tok.all_special_ids)
        return self._budgeted(texts, ids, [[int(t in special_ids) for t in row] for row in ids])

    def _budgeted(self, texts: list[str], all_ids: list[list[int]], all_special: Any) -> Prompts:
        tok = self.tokenizer
        prompts = []
        for i in range(len(texts)):
            ids, special = list(all_ids[i]), list(all_special[i])
            while self.wordpiece and len(ids) > 1 and special[-1] and ids[-1] == tok.sep_token_id:
                ids.pop()  # BERT-style prompt: [CLS] text, without the closing [SEP]
                special.pop()
            if not ids:
                if tok.bos_token_id is None:
                    raise ValueError(f"text_generation input {i} is empty and the tokenizer has no BOS token")
                ids = [tok.bos_token_id]
            if len(ids) > self.prompt_budget:
                # keep the leading special token ([CLS] / BOS) and the prompt's tail; with no room for even one
                # token of the prompt beside it, every prompt would generate the same text: refuse instead
                head = 1 if special and special[0] else 0
                keep = self.prompt_budget - head
                if keep < 1:
                    raise ValueError(
                        f"text_generation input {i} has {len(ids) - head} prompt tokens (+{head} start token), "
                        f"but max_new_tokens={self.options.max_new_tokens} leaves {self.prompt_budget} of the "
                        f"{self.window}-token window for the prompt, not even one prompt token beside the start "
                        f"token; use max_new_tokens <= {self.window - head - 1}"
                    )
                logger.warning(
                    "prompt %d has %d tokens; keeping %s its last %d (a %d-token window - max_new_tokens %d)",
                    i,
                    len(ids),
                    "its start token and" if head else "",
                    keep,
                    self.window,
                    self.options.max_new_tokens,
                )
                ids = ids[:head] + ids[len(ids) - keep :]
            prompts.append(ids)
        return Prompts(texts, prompts)

    # -- forward: batches of equal-length prompts (no padding), or one seeded prompt at a time
    def forward(self, prepared: Prompts) -> list[list[list[int]]]:
        opts, prompts = self.options, prepared.ids
        outputs: list[Any] = [None] * len(prompts)
        if opts.decode_strategy == "sampling" and opts.seed is not None:
            groups = [[i] for i in range(len(prompts))]
        else:
            by_length: dict[int, list[int]] = {}
            for i, ids in enumerate(prompts):
                by_length.setdefault(len(ids), []).append(i)
            size = self.settings.batch_size
            groups = [g[k : k + size] for _, g in sorted(by_length.items()) for k in range(0, len(g), size)]
        for group in groups:
            input_ids = torch.tensor([prompts[i] for i in group], dtype=torch.long, device=self.loaded.device)
            sequences = self._generate(input_ids)
            n = opts.num_return_sequences
            for j, i in enumerate(group):
                rows = sequences[j * n : (j + 1) * n, input_ids.shape[1] :]
                outputs[i] = [self._trim(row.tolist()) for row in rows]
        return outputs

    def _generate(self, input_ids: torch.Tensor, **extra: Any) -> torch.Tensor:
        opts = self.options
        kwargs: dict[str, Any] = dict(
            extra,
            max_new_tokens=opts.max_new_tokens,
            min_new_tokens=opts.min_new_tokens,
            num_return_sequences=opts.num_return_sequences,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_id,
            repetition_penalty=self.repetition_penalty,
            do_sample=opts.decode_strategy == "sampling",
            num_beams=opts.num_beams if opts.decode_strategy == "beam_search" else 1,
        )
        gen = self.model.generation_config
        # A model that applies eos_min_prob / poem_format itself (ErnieZooForCausalLM) leaves them to the
        # processors below, which follow the options.
        kwargs.update({k: v for k, v in (("eos_min_prob", 0.0), ("poem_format", False)) if hasattr(gen, k)})
        processors = LogitsProcessorList()
        if self.eos_min_prob > 0:
            processors.append(EosMinProb(self.eos_id, self.eos_min_prob))
        if self.poem_format:  # after EosMinProb: the end it forces after 8 lines wins
            classes = self.token_classes[input_ids.cpu()].tolist()
            states = [VerseState.from_prompt(row) for row in classes]
            processors.append(PoemFormat(self.token_classes, self.eos_id, input_ids.shape[1], states))
        if processors:
            kwargs["logits_processor"] = processors
        if opts.decode_strategy == "sampling":
            kwargs.update(temperature=opts.temperature, top_k=opts.top_k, top_p=opts.top_p)
        mask = torch.ones_like(input_ids)
        if opts.decode_strategy != "sampling":
            with torch.inference_mode():
                return self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        with _RNG_LOCK, torch.inference_mode():
            if opts.seed is None:  # the global RNG moves on: each call samples afresh
                return self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            # Seeded: a private RNG state, the caller's global state is restored afterwards.
            devices = [self.loaded.device.index or 0] if self.loaded.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(opts.seed)
                return self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)

    # -- stream: one prompt, text pieces as they are generated (a generation thread feeds a queue)
    def stream(self, text: str) -> Iterator[str]:
        """The continuation of `text` piece by piece; `close()` on the iterator stops the generation."""
        return self._pieces(self.stream_ids(self.preprocess([text]).ids[0]))

    def stream_ids(self, prompt: list[int]) -> Iterator[list[int]]:
        """The new token ids of `prompt`'s continuation as `generate()` produces them (the end token included, if
        reached); `close()` on the iterator stops the generation at its next step. The server's OpenAI endpoints
        stream from here, with prompts they built themselves (a chat template)."""
        input_ids = torch.tensor([prompt], dtype=torch.long, device=self.loaded.device)
        pieces: queue.Queue = queue.Queue()
        stop = threading.Event()
        streamer = _QueueStreamer(pieces)

        def work() -> None:
            try:
                with without_onednn(self.settings.precision != "bf16"):
                    self._generate(
                        input_ids,
                        streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([_Cancelled(stop)]),
                    )
            except BaseException as exc:  # handed to the consumer, raised there
                pieces.put(exc)
            finally:
                pieces.put(_END)

        worker = threading.Thread(target=work, name="text_generation-stream", daemon=True)
        worker.start()
        try:
            while True:
                item = pieces.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()

    def _pieces(self, tokens: Iterator[list[int]]) -> Iterator[str]:
        ids: list[int] = []
        sent = ""
        try:
            for item in tokens:
                if self.eos_id is not None and self.eos_id in ids:
                    continue  # generation may run on for other rows; this continuation has ended
                ids.extend(item)
                text = self.decode(self._trim(ids))
                # An unfinished multi-byte character decodes to U+FFFD until its last byte arrives: hold it back.
                ready = text.rstrip("\ufffd")
                if len(ready) > len(sent) and ready.startswith(sent):
                    yield ready[len(sent) :]
                    sent = ready
            final = self.decode(self._trim(ids))
            if final != sent:
                if not final.startswith(
                    sent
                ):  # a decoder that rewrites earlier text: say so, never send twice
                    raise RuntimeError(
                        "the tokenizer's decoding of the continuation changed text already streamed "
                        f"({sent!r} -> {final!r}); use stream=False for this model"
                    )
                yield final[len(sent) :]
        finally:
            tokens.close()  # type: ignore[attr-defined]

    def _trim(self, ids: list[int]) -> list[int]:
        if self.eos_id is not None and self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return ids

    def postprocess(self, prepared: Prompts, outputs: list[list[list[int]]]) -> list[GenerationResult]:
        return [
            GenerationResult(t, [self.decode(ids) for ids in seqs])
            for t, seqs in zip(prepared.texts, outputs)
        ]

    def decode(self, ids: list[int]) -> str:
        ids = [i for i in ids if i not in self.special_ids]
        if self.wordpiece:
            return join_wordpieces(self.tokenizer.convert_ids_to_tokens(ids))
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


_END = object()  # the generation thread is done


class _QueueStreamer(BaseStreamer):
    """transformers' streamer protocol: `put` gets the prompt first, then each new token; ids go to a queue."""

    def __init__(self, pieces: queue.Queue):
        self.pieces = pieces
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.pieces.put(value.reshape(-1).tolist())

    def end(self) -> None:
        pass


class _Cancelled(StoppingCriteria):
    """Ends generation once the consumer closed the stream (a client that went away)."""

    def __init__(self, stop: threading.Event):
        self.stop = stop

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        return torch.full(
            (input_ids.shape[0],), self.stop.is_set(), dtype=torch.bool, device=input_ids.device
        )

"""Text plumbing shared by every task: input validation and surrogate cleaning (word pieces are joined by
`ernie_zoo.tokenization.tokenizer.join_wordpieces`, the tokenizer's own `decode`).

Long texts: a model sees at most `max_seq_len` tokens. Longer texts are cut into contiguous chunks by
`ernie_zoo.text.sentences.chunk_spans` (sentences first, then clauses, then by length; never through a `[MASK]`
literal), run as separate rows of the batch, and joined back by the task: sentiment averages scores weighted by
chunk length; NER shifts entity offsets into the original string; features average embeddings weighted by token
count; fill-mask predicts each mask within its own chunk.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from ernie_zoo.tokenization.tokenizer import join_wordpieces  # noqa: F401  (re-exported for the tasks)

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_conversation(value: object) -> bool:
    """Whether `value` is a chat: a non-empty list of {"role": str, "content": str} dicts."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value
        )
    )


def normalize_inputs(inputs: object, conversations: bool = False) -> tuple[list[Any], bool]:
    """Check what a Taskflow was called with: a `str` -> `([str], True)`, a list/tuple of `str` -> `(list, False)`.
    With `conversations` (a task that takes chats: text_generation) a conversation (`is_conversation`) counts as one
    input too: one -> `([conversation], True)`, a list mixing texts and conversations -> `(list, False)`.

    Raises TypeError naming the offending item for anything else (None, bytes, numbers, nested lists, dicts).
    """
    if isinstance(inputs, str):
        return [inputs], True
    if conversations and is_conversation(inputs):
        return [[dict(m) for m in inputs]], True
    if conversations and isinstance(inputs, (list, tuple)) and any(is_conversation(i) for i in inputs):
        for i, item in enumerate(inputs):
            if not isinstance(item, str) and not is_conversation(item):
                raise TypeError(
                    f"Taskflow input item {i} is neither a str nor a conversation (a list of {{role, content}} "
                    f"messages): {item!r:.80}"
                )
        return [item if isinstance(item, str) else [dict(m) for m in item] for item in inputs], False
    if isinstance(inputs, (bytes, bytearray)):
        raise TypeError("Taskflow input is bytes; decode it to str first (for example data.decode('utf-8'))")
    if isinstance(inputs, (list, tuple)):
        for i, item in enumerate(inputs):
            if not isinstance(item, str):
                hint = " (decode bytes to str first)" if isinstance(item, (bytes, bytearray)) else ""
                kind = "a nested list" if isinstance(item, (list, tuple)) else f"{type(item).__name__}"
                raise TypeError(f"Taskflow input item {i} is {kind}, expected str{hint}: {item!r:.80}")
        return list(inputs), False
    raise TypeError(
        f"Taskflow input must be a str or a list of str, got {type(inputs).__name__}: {inputs!r:.80}"
    )


def is_pair(value: object) -> bool:
    """Whether `value` is a pair of texts: a list or tuple of exactly two `str`."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(t, str) for t in value)


def normalize_pairs(inputs: object) -> tuple[list[tuple[str, str]], bool]:
    """Check what a pair task (text_similarity) was called with: one pair `[text1, text2]` -> `([pair], True)`, a
    list/tuple of pairs -> `(list, False)`. Raises TypeError naming the offending item for anything else (a str, a
    pair of three texts or of non-str, a dict)."""
    if is_pair(inputs):
        return [(inputs[0], inputs[1])], True  # type: ignore[index]
    if isinstance(inputs, str):
        raise TypeError(
            "this task compares pairs of texts: pass [text1, text2] or a list of such pairs, got a str: "
            f"{inputs!r:.80}"
        )
    if isinstance(inputs, (list, tuple)):
        for i, item in enumerate(inputs):
            if not is_pair(item):
                raise TypeError(f"Taskflow input item {i} is not a pair [text1, text2] of str: {item!r:.80}")
        return [(a, b) for a, b in inputs], False
    raise TypeError(
        f"Taskflow input must be a pair [text1, text2] or a list of pairs, got {type(inputs).__name__}: "
        f"{inputs!r:.80}"
    )


def clean_surrogates(text: str) -> str:
    """Replace unpaired UTF-16 surrogates (e.g. '\\ud800', not encodable as UTF-8) by U+FFFD.

    One code point in, one out, so character offsets stay valid for the original string.
    """
    return _SURROGATE.sub("\ufffd", text)


def has_letters(text: str) -> bool:
    """Whether `text` holds a letter of any script (Unicode category L*: Chinese characters, Latin, kana, ...).

    A text without one (empty, whitespace, punctuation, digits, emoji: "😀😂🎉👍🏽", "？！。。。") has no words for a
    model to read: sentiment gives it no label and NER no entities, rather than the model's prior as a confident
    answer (an emoji-only review came out negative with probability 0.93).
    """
    return any(unicodedata.category(ch)[0] == "L" for ch in text)


__all__ = [
    "clean_surrogates",
    "has_letters",
    "is_pair",
    "join_wordpieces",
    "normalize_inputs",
    "normalize_pairs",
]

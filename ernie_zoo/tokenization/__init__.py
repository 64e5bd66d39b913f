"""Chinese tokenization: the fast tokenizer, context-aware pinyin ids, per-character radical/stroke tables."""

from .tokenizer import (
    SPECIAL_TOKENS,
    ErnieZooTokenizerFast,
    load_tokenizer,
    read_vocab_file,
    tokenizer_model_type,
)

__all__ = [
    "ErnieZooTokenizerFast",
    "SPECIAL_TOKENS",
    "load_tokenizer",
    "read_vocab_file",
    "tokenizer_model_type",
]

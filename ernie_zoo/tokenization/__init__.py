"""Chinese tokenization: the fast tokenizer, context-aware pinyin ids, per-character radical/stroke tables."""

from .tokenizer import SPECIAL_TOKENS, ErnieZooTokenizerFast, read_vocab_file

__all__ = ["ErnieZooTokenizerFast", "SPECIAL_TOKENS", "read_vocab_file"]

"""`ErnieZooConfig`: transformers' ERNIE config plus the character-feature switches.

The character features follow two lines of work:
- ERNIE 1.0/3.0 (Sun et al. 2019, 2021): a BERT-style encoder whose embeddings are summed (additive fusion);
- ChineseBERT (Sun et al. 2021): char, pinyin and glyph embeddings concatenated and projected (concat fusion).
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import ErnieConfig

FUSIONS = ("add", "concat")
POOLINGS = ("cls", "mean")


@strict
class ErnieZooConfig(ErnieConfig):
    r"""
    use_pinyin (`bool`, defaults to `True`):
        Embed the context-aware pinyin (syllable + tone) of each Han character. The tokenizer produces
        `pinyin_ids` (one int per token, `syllable_id * 6 + tone`); without them the model falls back to each
        token's most common reading (`default_pinyin_ids` buffer), which is what generation uses.
    pinyin_vocab_size (`int`, *optional*):
        Number of distinct `pinyin_ids` (syllables x 6 tones). Defaults to the size of the packaged syllable table.
    use_radical (`bool`, defaults to `True`):
        Embed the Kangxi radical (Unihan kRSUnicode, 214 radicals) of each character, looked up from the token id.
    use_strokes (`bool`, defaults to `True`):
        Embed the total stroke count (Unihan kTotalStrokes) of each character.
    use_stroke_sequence (`bool`, defaults to `False`):
        Also embed the 5-type stroke sequence (h/s/p/n/z), mean-pooled over its first `stroke_seq_len` strokes.
    feature_fusion (`str`, defaults to `"add"`):
        `"add"`: each feature is a `hidden_size` embedding summed into the word embedding (ERNIE-style).
        `"concat"`: features of size `char_feature_dim` are concatenated to the word embedding and projected back
        to `hidden_size` by a linear layer (ChineseBERT-style).
    char_feature_dim (`int`, *optional*):
        Width of each feature embedding for concat fusion; defaults to `hidden_size // 4`.
    pooling (`str`, defaults to `"cls"`):
        What the pooler (dense + tanh) of a sentence-level head reads: `"cls"` the first token's final hidden state
        (BERT / ERNIE), `"mean"` the mean over the non-padding tokens (`attention_mask`), as E5 / sentence encoders
        were trained to summarise a text (the e5 base sets it).
    """

    model_type = "ernie_zoo"

    use_pinyin: bool = True
    pinyin_vocab_size: int | None = None
    use_radical: bool = True
    num_radicals: int = 214
    use_strokes: bool = True
    max_strokes: int = 64
    use_stroke_sequence: bool = False
    stroke_seq_len: int = 32
    feature_fusion: str = "add"
    char_feature_dim: int | None = None
    pooling: str = "cls"

    def __post_init__(self, **kwargs):
        if self.pinyin_vocab_size is None:
            from ernie_zoo.tokenization.pinyin import num_pinyin_ids

            self.pinyin_vocab_size = num_pinyin_ids()
        if self.char_feature_dim is None:
            self.char_feature_dim = max(1, self.hidden_size // 4)
        self._check_features()  # plain ValueError before the strict-dataclass validators wrap it
        super().__post_init__(**kwargs)

    @property
    def use_char_features(self) -> bool:
        return self.use_pinyin or self.use_radical or self.use_strokes or self.use_stroke_sequence

    def validate_architecture(self):
        """Part of `@strict` validation (also run on `config.validate()` after edits)."""
        self._check_features()

    def _check_features(self):
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.feature_fusion not in FUSIONS:
            raise ValueError(f"feature_fusion must be one of {FUSIONS}, got {self.feature_fusion!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        for name in (
            "num_radicals",
            "max_strokes",
            "stroke_seq_len",
            "pinyin_vocab_size",
            "char_feature_dim",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")


__all__ = ["ErnieZooConfig"]

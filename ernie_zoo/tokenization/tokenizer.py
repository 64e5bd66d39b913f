"""`ErnieZooTokenizerFast`: a tokenizers-backed Chinese tokenizer that also returns context-aware pinyin.

One token per CJK character (BERT's Chinese-character splitting), WordPiece for Latin text and numbers,
NFKC normalisation first so full-width letters/digits (ＡＢＣ１２３) and compatibility ideographs map to
their usual forms. The backend keeps the alignment to the original string, so `offset_mapping` points into the
text the user passed (NER needs that), and `pinyin_ids` are looked up through the same offsets.

Traditional input (`traditional_to_simplified=True`, the default): before the backend sees a string, each
Traditional character that the vocabulary lacks but whose Simplified form it has is replaced by that form
(這 -> 这 for a vocabulary trained on Simplified text; a BERT-zh vocabulary that has 這 keeps it). The map is
one character to one character (`text/traditional.py`), so `offset_mapping` still indexes the original string.
`pinyin_ids` are computed on the original string (pinyin.py converts Traditional runs itself).
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import WordPiece
from transformers import BertTokenizer

from ernie_zoo.text.traditional import t2s_mapping, to_simplified

from .pinyin import batch_char_pinyin_ids, default_pinyin_id

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# CJK characters and punctuation, full-width forms: no space is written next to them when tokens are joined.
_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")


def join_wordpieces(tokens: Sequence[str]) -> str:
    """Join WordPiece tokens into text the Chinese way: no spaces around CJK characters or punctuation,
    `##` pieces glued to the previous token, one space between two Latin/number words."""
    out: list[str] = []
    prev = ""
    for token in tokens:
        if token.startswith("##"):
            piece = token[2:]
            out.append(piece)
            prev = piece
            continue
        if (
            prev
            and prev[-1].isalnum()
            and token[:1].isalnum()
            and not _CJK.match(prev[-1])
            and not _CJK.match(token[0])
        ):
            out.append(" ")
        out.append(token)
        prev = token
    return "".join(out)


def read_vocab_file(path: str | os.PathLike) -> dict[str, int]:
    """Read a BERT/ERNIE `vocab.txt` (one token per line, id = line number)."""
    vocab: dict[str, int] = collections.OrderedDict()
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            token = line.rstrip("\n")
            if token in vocab:
                raise ValueError(
                    f"{path}: token {token!r} appears twice (lines {vocab[token] + 1} and {index + 1})"
                )
            vocab[token] = index
    if not vocab:
        raise ValueError(f"{path}: empty vocabulary file")
    return vocab


def _check_texts(texts, name: str) -> None:
    """Name the bad item instead of letting the Rust backend fail with a type-union message."""
    if isinstance(texts, str):
        return
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"{name} must be a str or a list of str, got {type(texts).__name__}")
    for i, item in enumerate(texts):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(item).__name__}: {item!r:.50}")


def _simplified_training_item(item):
    """`to_simplified` for one item of `train_vocab`'s iterator (a text, or a batch of texts)."""
    if isinstance(item, (list, tuple)):
        return [to_simplified(t) for t in item]
    return to_simplified(item)


def _continuation_pieces(backend: Tokenizer, texts: Sequence) -> list[str]:
    """Sorted "##c" for every character that continues a word of `texts` (after `backend`'s normalizer and
    pre-tokenizer): the symbols the WordPiece trainer would number in a hash map's order. Items that are not
    text are left to the trainer, which names their type."""
    normalize, split = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    chars: set[str] = set()
    for item in texts:
        for text in item if isinstance(item, (list, tuple)) else (item,):
            if isinstance(text, str):
                for word, _ in split(normalize(text)):
                    chars.update(word[1:])
    return [f"##{c}" for c in sorted(chars)]


def _normalizer(do_lower_case: bool) -> normalizers.Normalizer:
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.BertNormalizer(
                clean_text=True,
                handle_chinese_chars=True,
                strip_accents=do_lower_case,
                lowercase=do_lower_case,
            ),
        ]
    )


def tokenizer_model_type(source: str | os.PathLike) -> str | None:
    """The `model.type` of a local directory's tokenizer.json ("WordPiece", "Unigram", "BPE"), None when `source` is
    not a directory holding one (a hub id, a vocab.txt-only BERT directory)."""
    path = Path(source) / "tokenizer.json" if isinstance(source, (str, os.PathLike)) else None
    if path is None or not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return (json.load(f).get("model") or {}).get("type")


def load_tokenizer(source: str | os.PathLike, **kwargs):
    """The tokenizer of an encoder directory: `ErnieZooTokenizerFast` for a WordPiece vocabulary (the zoo's, BERT-zh,
    ERNIE 3.0; a hub id), transformers' `AutoTokenizer` for anything else (ernie-zoo-e5-small-zh-pieces: e5's
    sentencepiece unigram pieces)."""
    if tokenizer_model_type(source) not in (None, "WordPiece"):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(source), **kwargs)
    return ErnieZooTokenizerFast.from_pretrained(
        str(source) if isinstance(source, os.PathLike) else source, **kwargs
    )


class ErnieZooTokenizerFast(BertTokenizer):
    """BERT-zh compatible WordPiece tokenizer with NFKC normalisation and `pinyin_ids`.

    Args:
        vocab: a token -> id dict, or the path of a `vocab.txt`.
        vocab_file: the path of a `vocab.txt` (what `from_pretrained` passes for a BERT/ERNIE directory).
        return_pinyin_ids: add `pinyin_ids` to every encoding (`syllable_id * 6 + tone`, 0 for non-Han tokens).
        traditional_to_simplified: before encoding, replace each Traditional character that the vocabulary
            lacks by its Simplified form when the vocabulary has that form (這 -> 这, 臺 -> 台). Vocabulary-aware, so
            it is safe for vocabularies with Traditional characters too; saved in `tokenizer_config.json`.
        add_sep_token: end a single text with `[SEP]` (`[CLS] text [SEP]`, BERT's layout). False for the prompts of
            a causal LM, which continue the text and treat `[SEP]` as the end of a poem (`[CLS] text`); pairs
            keep both `[SEP]`s. Saved in `tokenizer_config.json` and in tokenizer.json's post-processor.
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask", "pinyin_ids"]

    def __init__(
        self,
        vocab: str | dict[str, int] | None = None,
        vocab_file: str | None = None,
        do_lower_case: bool = True,
        return_pinyin_ids: bool = True,
        traditional_to_simplified: bool = True,
        add_sep_token: bool = True,
        **kwargs,
    ):
        if not isinstance(traditional_to_simplified, bool):
            raise TypeError(
                f"traditional_to_simplified must be a bool, got {type(traditional_to_simplified).__name__}"
            )
        # transformers' BertTokenizer ignores `vocab_file` and silently builds an all-[UNK] vocabulary; read it.
        if vocab is None and vocab_file is not None:
            vocab = vocab_file
        if isinstance(vocab, (str, os.PathLike)):
            vocab = read_vocab_file(vocab)
        if vocab is None and kwargs.get("name_or_path"):
            # from_pretrained found neither tokenizer.json nor vocab.txt: BertTokenizer would quietly build a
            # tokenizer of the 5 special tokens that maps all text to [UNK].
            raise ValueError(  # not OSError: from_pretrained would replace the message with a generic one
                f"{kwargs['name_or_path']}: no vocabulary found (expected tokenizer.json or vocab.txt next to "
                "tokenizer_config.json)"
            )
        kwargs.pop("tokenize_chinese_chars", None)
        kwargs.setdefault("model_max_length", 512)
        super().__init__(vocab=vocab, do_lower_case=do_lower_case, tokenize_chinese_chars=True, **kwargs)
        self._tokenizer.normalizer = _normalizer(do_lower_case)
        self.add_sep_token = add_sep_token
        if not add_sep_token:  # (the default is not written to tokenizer_config.json)
            self.init_kwargs["add_sep_token"] = False
            self._tokenizer.post_processor = processors.TemplateProcessing(
                single=f"{self.cls_token}:0 $A:0",
                pair=f"{self.cls_token}:0 $A:0 {self.sep_token}:0 $B:1 {self.sep_token}:1",
                special_tokens=[(self.cls_token, self.cls_token_id), (self.sep_token, self.sep_token_id)],
            )
        self.return_pinyin_ids = return_pinyin_ids
        self.init_kwargs["return_pinyin_ids"] = return_pinyin_ids
        self.traditional_to_simplified = traditional_to_simplified
        self.init_kwargs["traditional_to_simplified"] = traditional_to_simplified
        self._t2s_cache: tuple[int, dict[int, int]] | None = None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedTokenizerFast.from_pretrained`, refusing a directory whose tokenizer.json is not WordPiece (e5's
        sentencepiece pieces: BertTokenizer would silently rebuild it as WordPiece over the same strings, cutting
        Chinese into single characters; `load_tokenizer` picks the right class)."""
        kind = tokenizer_model_type(pretrained_model_name_or_path)
        if kind not in (None, "WordPiece"):
            raise ValueError(
                f"{pretrained_model_name_or_path}: its tokenizer.json is a {kind} model, not a WordPiece vocabulary "
                "ErnieZooTokenizerFast can read; load it with ernie_zoo.tokenization.load_tokenizer (or "
                "transformers.AutoTokenizer)"
            )
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    # ------------------------------------------------------------------ vocabulary
    @classmethod
    def train_vocab(
        cls,
        texts: Iterable[str],
        vocab_size: int = 21128,
        min_frequency: int = 2,
        do_lower_case: bool = True,
        show_progress: bool = True,
        traditional_to_simplified: bool = True,
        **kwargs,
    ) -> ErnieZooTokenizerFast:
        """Learn a WordPiece vocabulary from an iterator of texts: every CJK character seen at least
        `min_frequency` times becomes a token; the rest of the budget goes to Latin/number word pieces.
        With `traditional_to_simplified` the texts are converted to Simplified first (a Traditional character
        counts towards its Simplified form), and the tokenizer converts its inputs the same way."""
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(
                f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}"
            )
        backend = Tokenizer(WordPiece(unk_token="[UNK]"))
        backend.normalizer = _normalizer(do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        if traditional_to_simplified:
            texts = map(_simplified_training_item, texts)
        # read twice: counted, then trained
        texts = texts if isinstance(texts, (list, tuple)) else list(texts)
        # Reproducible: the trainer (a BPE trainer underneath) breaks ties between equally frequent pairs by token
        # id, and numbers the characters as they come out of a Rust hash map -- except the continuation pieces
        # ("##c"), which it numbered in that map's per-process order, so when the budget ended inside a tie
        # which of the tied word pieces got in varied by process (2 of 6 processes on a small mixed Chinese and
        # English corpus). Counted here and given to the trainer first, in sorted order, they get the same ids in
        # every process, and so does every merge after them.
        continuation = _continuation_pieces(backend, texts)
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[*SPECIAL_TOKENS, *continuation],
            show_progress=show_progress,
            continuing_subword_prefix="##",
        )
        backend.train_from_iterator(texts, trainer=trainer)
        # Number the learned tokens canonically (special tokens, then characters, then word pieces, each sorted)
        # so the same vocabulary gets the same ids whatever the trainer's order.
        learned = [t for t in backend.get_vocab() if t not in SPECIAL_TOKENS]
        learned.sort(key=lambda t: (t.startswith("##"), len(t) > 1 and not t.startswith("##"), t))
        vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *learned])}
        return cls(
            vocab=vocab,
            do_lower_case=do_lower_case,
            traditional_to_simplified=traditional_to_simplified,
            **kwargs,
        )

    def char_feature_tables(self, vocab_size: int | None = None) -> dict:
        """Per-token-id feature tables for `ErnieZooPreTrainedModel.load_char_tables`:
        `default_pinyin_ids`, `radical_ids`, `stroke_counts` (V,) and `stroke_seqs` (V, 32), int64."""
        import torch

        from .char_tables import build_vocab_tables

        vocab = self.get_vocab()
        size = vocab_size if vocab_size is not None else len(vocab)
        if size < len(vocab):
            raise ValueError(f"vocab_size {size} is smaller than the tokenizer's vocabulary ({len(vocab)})")
        tables = build_vocab_tables(vocab, size)
        pinyin = torch.zeros(size, dtype=torch.long)
        for token, index in vocab.items():
            char = token[2:] if token.startswith("##") else token
            if len(char) == 1:
                pinyin[index] = default_pinyin_id(char)
        tables["default_pinyin_ids"] = pinyin
        return tables

    # ------------------------------------------------------------------ Traditional -> Simplified
    def _t2s_table(self) -> dict[int, int]:
        """`str.translate` table: Traditional chars missing from the vocabulary whose Simplified form is in it."""
        size = len(self)
        cached = self._t2s_cache
        if cached is None or cached[0] != size:  # rebuilt when tokens are added
            vocab = self.get_vocab()
            table = {ord(t): ord(s) for t, s in t2s_mapping().items() if t not in vocab and s in vocab}
            cached = self._t2s_cache = (size, table)
        return cached[1]

    def _simplify(self, texts):
        """Convert a str, a list of str, or a list of lists of str (pre-split words); other items pass through
        untouched so the usual input validation reports them."""
        table = self._t2s_table()
        if not table:
            return texts

        def convert(item):
            if isinstance(item, str):
                return item.translate(table)
            if isinstance(item, (list, tuple)):
                return [convert(t) for t in item]
            return item

        return convert(texts)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' `save_pretrained`; tokenizer.json's normalizer also maps Traditional to Simplified (the
        vocabulary-aware table of `traditional_to_simplified`, one `Replace` per character, before NFKC), so a
        program that loads the directory without `import ernie_zoo` (transformers' generic tokenizer) still gets
        the same `input_ids`. In this class the table is applied in Python instead (`_simplify`)."""
        backend = self._tokenizer
        normalizer = backend.normalizer
        table = self._t2s_table() if self.traditional_to_simplified else {}
        if table:
            replace = [normalizers.Replace(chr(t), chr(s)) for t, s in sorted(table.items())]
            backend.normalizer = normalizers.Sequence([*replace, normalizer])
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            backend.normalizer = normalizer

    def _decode(
        self, token_ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces=None, **kwargs
    ):
        """`decode` without the space WordPiece's decoder writes between every two tokens ("春 眠 不 觉"): tokens are
        joined by `join_wordpieces`, so transformers' pipelines return Chinese text as Taskflow does."""
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if isinstance(token_ids, dict):
            token_ids = token_ids["input_ids"]
        ids = [int(i) for i in token_ids]
        if skip_special_tokens:
            special = set(self.all_special_ids)
            ids = [i for i in ids if i not in special]
        return join_wordpieces(self.convert_ids_to_tokens(ids))

    # ------------------------------------------------------------------ pinyin_ids
    def _encode_plus(self, text, text_pair=None, **kwargs):
        if not kwargs.get("is_split_into_words", False):
            _check_texts(text, "text")
            if text_pair is not None:
                _check_texts(text_pair, "text_pair")
        return_tensors = kwargs.get("return_tensors")
        if self.traditional_to_simplified:  # 1:1 per char: offsets still index the original strings
            out = super()._encode_plus(
                self._simplify(text), self._simplify(text_pair) if text_pair is not None else None, **kwargs
            )
        else:
            out = super()._encode_plus(text, text_pair, **kwargs)
        if not self.return_pinyin_ids or out.encodings is None:
            return out
        split_words = kwargs.get("is_split_into_words", False)
        batched = isinstance(text, (list, tuple)) and (
            not split_words or (text and isinstance(text[0], (list, tuple)))
        )
        firsts = list(text) if batched else [text]
        seconds = (
            (list(text_pair) if batched else [text_pair]) if text_pair is not None else [None] * len(firsts)
        )
        if split_words:  # pinyin is computed on the joined words so phrases still disambiguate
            firsts = [list(words) for words in firsts]
            seconds = [list(words) if words is not None else None for words in seconds]
        samples = out.get("overflow_to_sample_mapping") or range(len(out.encodings))
        pinyin = [
            self._encoding_pinyin(enc, firsts[s], seconds[s], split_words)
            for enc, s in zip(out.encodings, samples)
        ]
        if return_tensors is not None:
            out["pinyin_ids"] = pinyin
            out.convert_to_tensors(tensor_type=return_tensors)
        elif not batched and not kwargs.get("return_overflowing_tokens"):
            out["pinyin_ids"] = pinyin[0]
        else:
            out["pinyin_ids"] = pinyin
        return out

    @staticmethod
    def _encoding_pinyin(encoding, first, second, split_words: bool) -> list[int]:
        sources = [first, second]
        char_ids: list[list[int] | None] = [None, None]
        word_starts: list[list[int] | None] = [None, None]
        for i, src in enumerate(sources):
            if src is None:
                continue
            if split_words:
                starts, pos = [], 0
                for word in src:
                    starts.append(pos)
                    pos += len(word)
                word_starts[i] = starts
                src = "".join(src)
            char_ids[i] = batch_char_pinyin_ids([src])[0]
        result = []
        for seq, word, (start, end), special in zip(
            encoding.sequence_ids, encoding.word_ids, encoding.offsets, encoding.special_tokens_mask
        ):
            if special or seq is None or end - start != 1 or char_ids[seq] is None:
                result.append(0)
                continue
            if split_words:
                start += word_starts[seq][word]
            chars = char_ids[seq]
            result.append(chars[start] if start < len(chars) else 0)
        return result

    def _pad(
        self,
        encoded_inputs,
        max_length=None,
        padding_strategy=None,
        pad_to_multiple_of=None,
        padding_side=None,
        return_attention_mask=None,
    ):
        before = len(encoded_inputs[self.model_input_names[0]])
        kwargs = {} if padding_strategy is None else {"padding_strategy": padding_strategy}
        encoded_inputs = super()._pad(
            encoded_inputs,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
            **kwargs,
        )
        difference = len(encoded_inputs[self.model_input_names[0]]) - before
        if difference > 0 and "pinyin_ids" in encoded_inputs:
            side = padding_side if padding_side is not None else self.padding_side
            pad = [0] * difference
            values = list(encoded_inputs["pinyin_ids"])
            encoded_inputs["pinyin_ids"] = values + pad if side == "right" else pad + values
        return encoded_inputs


__all__ = ["ErnieZooTokenizerFast", "join_wordpieces", "read_vocab_file", "SPECIAL_TOKENS"]

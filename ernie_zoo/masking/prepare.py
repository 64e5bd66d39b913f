"""Turn raw text into a cached, tokenized dataset with precomputed phrase and entity boundaries.

    >>> ds = prepare_dataset(["新华社北京电，国务院总理李克强今天会见了外宾。"], tokenizer, max_seq_len=64,
    ...                      lexicon=EntityLexicon(["新华社", "国务院"]), use_pos_entities=True)
    >>> ds[0].keys()
    dict_keys(['input_ids', 'token_type_ids', 'pinyin_ids', 'phrase_ids', 'entity_ids'])

Each row holds int lists of one length: `phrase_ids` numbers the word units of the segmenter (consecutive
from 0, -1 at [CLS]/[SEP]); `entity_ids` numbers entity spans (from the lexicon, then POS-tag entities that
do not overlap a lexicon entity), -1 outside entities. With a sentiment lexicon (SKEP's sentiment masking
unit) two more columns: `sentiment_ids` numbers the sentiment words (`SentimentWords` matches that start and
end on the segmenter's word boundaries), -1 outside them, and `sentiment_polarity` gives each token of a
sentiment word its polarity (+1 / -1; 0 outside). A token belongs to the unit that contains its first
character.

Bad input never stops the run; it is counted in `PrepareStats`:

* empty / whitespace-only lines are skipped;
* invalid UTF-8 is decoded with U+FFFD replacements (which the tokenizer's normaliser then drops);
* jsonl records that do not parse, or lack a string `text` field, are skipped;
* lines longer than `max_seq_len - 2` characters (counted after NFKC, which turns `…` into `...`) are
  cut by `ernie_zoo.text.sentences.chunk_text`: after sentence punctuation, sentences packed greedily into
  pieces that fit; a sentence that alone is too long is cut after clause punctuation, then by length.
  (A token never covers less than one normalised character, so such a piece fits in `max_seq_len`
  tokens; anything the tokenizer still truncates is counted.)

Boundaries are computed once, in a batched `datasets.map` over `num_proc` processes, and the result is
saved with `save_to_disk` under `cache_dir` keyed by a hash of the inputs and every setting; the
collator then only samples.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import unicodedata
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow.compute as pc
from tqdm.auto import tqdm

from ernie_zoo.text.lexicon import EntityLexicon
from ernie_zoo.text.segment import Segmenter
from ernie_zoo.text.sentences import chunk_text, sentence_spans
from ernie_zoo.utils import atomic_directory, unique_keys

from .sentiment import SentimentWords

logger = logging.getLogger(__name__)

__all__ = [
    "COLUMNS",
    "PrepareStats",
    "SENTIMENT_COLUMNS",
    "load_prepared",
    "prepare_dataset",
    "prepare_dataset_with_stats",
    "read_documents",
    "save_prepared",
    "split_long_text",
]

#: The columns of a prepared example.
COLUMNS = ("input_ids", "token_type_ids", "pinyin_ids", "phrase_ids", "entity_ids")
#: The extra columns of an example prepared with a sentiment lexicon (the sentiment masking unit).
SENTIMENT_COLUMNS = ("sentiment_ids", "sentiment_polarity")
FORMAT_VERSION = 2  # 2: long lines cut by ernie_zoo.text.sentences (clauses before length)
STATS_FILE = "ernie_zoo_prepare.json"
_JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")


@dataclass
class PrepareStats:
    """What `prepare_dataset` read, repaired and skipped."""

    files: int = 0
    lines: int = 0  #: lines (txt) or records (jsonl) read, or texts passed in
    empty_lines: int = 0  #: skipped: empty or whitespace only
    decode_errors: int = 0  #: lines with invalid UTF-8, decoded with replacement characters
    bad_json: int = 0  #: skipped: jsonl lines that are not valid JSON (or name a key twice)
    missing_field: int = 0  #: skipped: jsonl records without a string text field
    documents: int = 0  #: non-empty texts kept
    eval_documents: int = 0  #: of which assigned to the eval split
    long_lines: int = 0  #: texts longer than max_seq_len - 2 characters, split
    long_line_pieces: int = 0  #: pieces those texts were split into
    hard_splits: int = 0  #: sentences too long to fit alone (cut at clauses, then by length)
    packed_from: int = 0  #: pieces before packing (0: not packed)
    truncated: int = 0  #: examples the tokenizer still truncated (NFKC expansion)
    dropped_no_tokens: int = 0  #: texts that produced no token at all
    examples: int = 0  #: rows in the train dataset
    eval_examples: int = 0  #: rows in the eval dataset
    tokens: int = 0  #: non-special tokens, both splits
    phrase_units: int = 0
    entity_units: int = 0  #: entity spans that cover at least one token (lexicon + POS)
    pos_entity_units: int = 0  #: of which from POS tags
    sentiment_units: int = 0  #: sentiment words that cover at least one token (with a sentiment lexicon)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrepareStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in names})

    def summary(self) -> str:
        """A human-readable multi-line report."""
        return "\n".join(f"  {f.name:<18} {getattr(self, f.name):>12,}" for f in fields(self))


# ---------------------------------------------------------------------------------------------- reading
def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _iter_file(path: Path, text_field: str, stats: PrepareStats, show_progress: bool) -> Iterator[str]:
    is_json = path.name.endswith(_JSON_SUFFIXES)
    stats.files += 1
    total = path.stat().st_size if not path.name.endswith(".gz") else None
    with (
        _open_binary(path) as f,
        tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            desc=f"read {path.name}",
            disable=not show_progress,
            leave=False,
        ) as bar,
    ):
        for number, raw in enumerate(f):
            bar.update(len(raw))
            stats.lines += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                stats.decode_errors += 1
            if number == 0:
                line = line.lstrip("\ufeff")
            if is_json:
                if not line.strip():
                    stats.empty_lines += 1
                    continue
                try:
                    record = json.loads(line, object_pairs_hook=unique_keys)  # a key twice: a bad line
                except ValueError:
                    stats.bad_json += 1
                    continue
                text = record.get(text_field) if isinstance(record, dict) else None
                if not isinstance(text, str):
                    stats.missing_field += 1
                    continue
                line = text
            line = line.strip()
            if not line:
                stats.empty_lines += 1
                continue
            yield line


def _resolve_inputs(
    texts_or_files: Any, input_type: Literal["auto", "text", "file"]
) -> tuple[list[str], list[Path]]:
    """Split the user's input into (texts, files)."""
    if input_type not in ("auto", "text", "file"):
        raise ValueError(f"input_type must be 'auto', 'text' or 'file', got {input_type!r}")
    if isinstance(texts_or_files, (str, os.PathLike)):
        if input_type == "text":
            return [str(texts_or_files)], []
        items: list[Any] = [texts_or_files]
        if input_type == "auto" and isinstance(texts_or_files, str) and not os.path.isfile(texts_or_files):
            raise ValueError(
                f"{texts_or_files!r} is not an existing file; pass a list of strings to prepare texts "
                "(or input_type='text')"
            )
    elif isinstance(texts_or_files, Iterable):
        items = list(texts_or_files)
    else:
        raise TypeError(f"expected texts or file paths, got {type(texts_or_files).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"item {i}: expected a str or a path, got {type(item).__name__}: {item!r}")
    if input_type == "file":
        as_files = True
    elif input_type == "text":
        as_files = False
    else:
        # Paths are files; plain strings are files only if every one of them names an existing file.
        as_files = bool(items) and all(
            isinstance(x, os.PathLike) or ("\n" not in x and len(x) < 4096 and os.path.isfile(x))
            for x in items
        )
        if not as_files and any(isinstance(x, os.PathLike) for x in items):
            raise ValueError("mix of paths and texts: pass either file paths or texts (or set input_type)")
    if as_files:
        files = [Path(x) for x in items]
        for p in files:
            if not p.is_file():
                raise ValueError(f"input file not found: {p}")
        return [], files
    return [str(x) for x in items], []


def read_documents(
    texts_or_files: Any,
    text_field: str = "text",
    input_type: Literal["auto", "text", "file"] = "auto",
    stats: PrepareStats | None = None,
    show_progress: bool = True,
) -> Iterator[str]:
    """Yield the non-empty, stripped documents of texts or text/jsonl files (`.gz` too), counting bad data
    into `stats`. A txt line or a jsonl record is one document."""
    stats = stats if stats is not None else PrepareStats()
    texts, files = _resolve_inputs(texts_or_files, input_type)
    for text in texts:
        stats.lines += 1
        text = text.strip()
        if not text:
            stats.empty_lines += 1
            continue
        yield text
    for path in files:
        yield from _iter_file(path, text_field, stats, show_progress)


def _size(text: str) -> int:
    """Characters after NFKC, the tokenizer's first step (`…` becomes `...`: three tokens, not one)."""
    return len(text) if text.isascii() else len(unicodedata.normalize("NFKC", text))


def split_long_text(text: str, limit: int) -> tuple[list[str], int]:
    """Cut `text` into pieces of at most `limit` (NFKC) characters with `ernie_zoo.text.sentences.chunk_text`.
    Returns (pieces, number of sentences too long to fit alone, cut at clauses or by length)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if _size(text) <= limit:
        return [text], 0
    hard = sum(_size(text[a:b]) > limit for a, b in sentence_spans(text))
    return chunk_text(text, limit, width=_size), hard


def pack_pieces(pieces: list[str], limit: int) -> list[str]:
    """Greedily join consecutive pieces (each at most `limit` NFKC characters) into texts of at most `limit`
    characters, so short lines fill whole examples instead of padding (RoBERTa's FULL-SENTENCES packing).
    Order is kept; a piece is never split."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for piece in pieces:
        n = _size(piece)
        if current and size + n > limit:
            out.append("".join(current))
            current, size = [], 0
        current.append(piece)
        size += n
    if current:
        out.append("".join(current))
    return out


# ---------------------------------------------------------------------------------------------- encoding
def _renumber(keys: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Consecutive ids from 0 for runs of equal `keys` among `member` tokens; -1 elsewhere."""
    out = np.full(keys.shape, -1, dtype=np.int64)
    k = keys[member]
    if k.size:
        idx = np.flatnonzero(member)
        # a new unit where the key changes or the previous member token is not adjacent
        new = np.r_[True, (k[1:] != k[:-1]) | (idx[1:] != idx[:-1] + 1)]
        out[member] = np.cumsum(new) - 1
    return out


class _Encoder:
    """The `datasets.map` function: tokenize a batch and attach phrase/entity unit ids (picklable)."""

    def __init__(
        self,
        tokenizer,
        max_seq_len: int,
        segmenter: Segmenter,
        lexicon: EntityLexicon | None,
        use_pos_entities: bool,
        sentiment: SentimentWords | None = None,
    ):
        self.tokenizer = tokenizer
        self.max_seq_len = max_seq_len
        self.segmenter = segmenter
        self.lexicon = lexicon
        self.use_pos_entities = use_pos_entities
        self.sentiment = sentiment

    def entity_spans(self, text: str) -> list[tuple[int, int, bool]]:
        """Lexicon spans, plus POS-tag spans that overlap none of them, sorted, as (start, end, from_pos)."""
        spans = [(s, e, False) for s, e in self.lexicon.find(text)] if self.lexicon is not None else []
        if self.use_pos_entities:
            covered = np.zeros(len(text) + 1, dtype=bool)
            for s, e, _ in spans:
                covered[s:e] = True
            extra = [(s, e, True) for s, e in self.segmenter.pos_entity_spans(text) if not covered[s:e].any()]
            spans = sorted(spans + extra)
        return spans

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        texts = batch["text"]
        enc = self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_seq_len,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            return_token_type_ids=True,
        )
        extra = (*SENTIMENT_COLUMNS, "_n_sentiment") if self.sentiment is not None else ()
        out: dict[str, list] = {
            k: [] for k in (*COLUMNS, "_n_phrase", "_n_entity", "_n_pos_entity", "_truncated", *extra)
        }
        for i, text in enumerate(texts):
            special = np.asarray(enc["special_tokens_mask"][i], dtype=bool)
            content = ~special
            if not content.any():
                continue  # nothing but [CLS] [SEP]: dropped (counted by the caller)
            offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
            starts = offsets[:, 0]
            word_spans = self.segmenter.spans(text)
            word_starts = np.fromiter((s for s, _ in word_spans), dtype=np.int64)
            word = np.searchsorted(word_starts, starts, side="right") - 1
            phrase = _renumber(word, content)

            spans = self.entity_spans(text)
            if spans:
                ent_start, ent_end, from_pos = (np.array(col) for col in zip(*spans))
                j = np.searchsorted(ent_start, starts, side="right") - 1
                inside = content & (j >= 0) & (starts < ent_end[np.maximum(j, 0)])
                entity = _renumber(j, inside)
                kept = np.unique(j[inside])  # spans that cover at least one token
                n_entity, n_pos = int(kept.size), int(from_pos[kept].sum())
            else:
                entity = np.full(len(starts), -1, dtype=np.int64)
                n_entity = n_pos = 0
            if self.sentiment is not None:
                # whole words only: a sentiment word must start and end where the segmenter cuts
                boundaries = {s for s, _ in word_spans}
                boundaries.add(len(text))
                sentiment_spans = self.sentiment.find(text, boundaries)
                if sentiment_spans:
                    s_start, s_end, s_pol = (np.array(col) for col in zip(*sentiment_spans))
                    j = np.searchsorted(s_start, starts, side="right") - 1
                    inside = content & (j >= 0) & (starts < s_end[np.maximum(j, 0)])
                    sentiment = _renumber(j, inside)
                    polarity = np.where(inside, s_pol[np.maximum(j, 0)], 0)
                    n_sentiment = int(np.unique(j[inside]).size)
                else:
                    sentiment = np.full(len(starts), -1, dtype=np.int64)
                    polarity = np.zeros(len(starts), dtype=np.int64)
                    n_sentiment = 0
                out["sentiment_ids"].append(sentiment.tolist())
                out["sentiment_polarity"].append(polarity.tolist())
                out["_n_sentiment"].append(n_sentiment)
            last_end = int(offsets[content][-1, 1])
            out["input_ids"].append(enc["input_ids"][i])
            out["token_type_ids"].append(enc["token_type_ids"][i])
            out["pinyin_ids"].append(enc["pinyin_ids"][i])
            out["phrase_ids"].append(phrase.tolist())
            out["entity_ids"].append(entity.tolist())
            out["_n_phrase"].append(int(phrase.max()) + 1)
            out["_n_entity"].append(n_entity)
            out["_n_pos_entity"].append(n_pos)
            out["_truncated"].append(last_end < len(text.rstrip()))
        return out


def _features(sentiment: bool = False):
    from datasets import Features, List, Value

    columns = {
        "input_ids": List(Value("int32")),
        "token_type_ids": List(Value("int8")),
        "pinyin_ids": List(Value("int32")),
        "phrase_ids": List(Value("int32")),
        "entity_ids": List(Value("int32")),
        "_n_phrase": Value("int32"),
        "_n_entity": Value("int32"),
        "_n_pos_entity": Value("int32"),
        "_truncated": Value("bool"),
    }
    if sentiment:
        columns["sentiment_ids"] = List(Value("int32"))
        columns["sentiment_polarity"] = List(Value("int8"))
        columns["_n_sentiment"] = Value("int32")
    return Features(columns)


# ---------------------------------------------------------------------------------------------- caching
def _tokenizer_fingerprint(tokenizer) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(type(tokenizer).__name__.encode())
    for token, index in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        h.update(f"{index}\t{token}\n".encode())
    h.update(repr(getattr(tokenizer, "do_lower_case", None)).encode())
    return h.hexdigest()


def _input_fingerprint(texts: list[str], files: list[Path]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for text in texts:
        h.update(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
    for path in files:
        h.update(f"\0file:{path.name}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def save_prepared(
    dataset, stats: PrepareStats | None, path: str | os.PathLike, extra: dict | None = None
) -> Path:
    """Atomically `save_to_disk` a prepared Dataset/DatasetDict with its stats (temp dir + rename)."""
    path = Path(path)
    meta = {"format_version": FORMAT_VERSION, "stats": stats.to_dict() if stats else None, **(extra or {})}
    with atomic_directory(path) as tmp:
        dataset.save_to_disk(str(tmp))
        with open(tmp / STATS_FILE, "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=2)
    return path


def load_prepared(path: str | os.PathLike):
    """Load what `save_prepared` (or `ernie-zoo prepare-data`) wrote: (Dataset or DatasetDict, stats)."""
    from datasets import load_from_disk

    path = Path(path)
    meta_file = path / STATS_FILE
    if not meta_file.is_file():
        raise ValueError(f"{path} is not a prepared ernie-zoo dataset (no {STATS_FILE})")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    stats = PrepareStats.from_dict(meta["stats"]) if meta.get("stats") else None
    return load_from_disk(str(path)), stats


# ---------------------------------------------------------------------------------------------- API
def prepare_dataset_with_stats(
    texts_or_files: Any,
    tokenizer,
    max_seq_len: int = 128,
    num_proc: int = 1,
    lexicon: EntityLexicon | str | os.PathLike | Iterable[str] | None = None,
    user_dict: str | os.PathLike | Iterable[str] | None = None,
    use_pos_entities: bool = False,
    cache_dir: str | os.PathLike | None = None,
    *,
    input_type: Literal["auto", "text", "file"] = "auto",
    text_field: str = "text",
    eval_fraction: float = 0.0,
    seed: int = 0,
    batch_size: int = 1000,
    segmenter: Segmenter | None = None,
    show_progress: bool = True,
    pack: bool = False,
    sentiment_lexicon: SentimentWords | str | os.PathLike | dict[str, int] | None = None,
):
    """`prepare_dataset`, also returning the `PrepareStats`. See `prepare_dataset` for the arguments."""
    from datasets import DatasetDict

    if not isinstance(max_seq_len, int) or max_seq_len < 3:
        raise ValueError(f"max_seq_len must be an int >= 3 ([CLS] x [SEP]), got {max_seq_len!r}")
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    if lexicon is not None and not isinstance(lexicon, EntityLexicon):
        lexicon = (
            EntityLexicon.load(lexicon) if isinstance(lexicon, (str, os.PathLike)) else EntityLexicon(lexicon)
        )
    if sentiment_lexicon is not None and not isinstance(sentiment_lexicon, SentimentWords):
        sentiment_lexicon = (
            SentimentWords.from_file(sentiment_lexicon)
            if isinstance(sentiment_lexicon, (str, os.PathLike))
            else SentimentWords(sentiment_lexicon)
        )
    if segmenter is None:
        segmenter = Segmenter(user_dict=user_dict)
    elif user_dict is not None:
        raise ValueError("pass user_dict to your Segmenter, not both")

    texts, files = _resolve_inputs(texts_or_files, input_type)
    key = None
    if cache_dir is not None:
        h = hashlib.blake2b(digest_size=16)
        settings = (FORMAT_VERSION, max_seq_len, use_pos_entities, text_field, eval_fraction, seed)
        if pack:  # appended only when on, so unpacked caches keep their keys
            settings += ("pack",)
        if sentiment_lexicon is not None:  # likewise
            settings += ("sentiment", sentiment_lexicon.fingerprint())
        h.update(repr(settings).encode())
        h.update(_tokenizer_fingerprint(tokenizer).encode())
        h.update(segmenter.fingerprint().encode())
        h.update((lexicon.fingerprint() if lexicon is not None else "-").encode())
        h.update(_input_fingerprint(texts, files).encode())
        key = h.hexdigest()
        target = Path(cache_dir) / f"prepared-{key}"
        if (target / STATS_FILE).is_file():
            logger.info("loading prepared dataset from cache %s", target)
            dataset, stats = load_prepared(target)
            return dataset, stats

    stats = PrepareStats()
    docs = list(read_documents(texts + files, text_field, "text" if texts else "file", stats, show_progress))
    stats.documents = len(docs)
    if not docs:
        raise ValueError(f"no text to prepare: {stats.lines} lines read, all empty or unreadable")

    is_eval = np.zeros(len(docs), dtype=bool)
    if eval_fraction > 0:
        n_eval = max(1, int(round(eval_fraction * len(docs))))
        if n_eval >= len(docs):
            raise ValueError(f"eval_fraction {eval_fraction} leaves no training document out of {len(docs)}")
        is_eval[np.random.default_rng(seed).permutation(len(docs))[:n_eval]] = True
        stats.eval_documents = n_eval

    limit = max_seq_len - 2
    splits: dict[str, list[str]] = {"train": [], "eval": []}
    for doc, ev in zip(docs, is_eval):
        pieces, hard = split_long_text(doc, limit)
        if len(pieces) > 1 or hard:
            stats.long_lines += 1
            stats.long_line_pieces += len(pieces)
            stats.hard_splits += hard
        splits["eval" if ev else "train"].extend(pieces)
    del docs
    if pack:
        stats.packed_from = len(splits["train"]) + len(splits["eval"])
        splits = {name: pack_pieces(pieces, limit) for name, pieces in splits.items()}

    encoder = _Encoder(tokenizer, max_seq_len, segmenter, lexicon, use_pos_entities, sentiment_lexicon)
    with _progress_bars(show_progress):
        results = _encode_splits(splits, encoder, eval_fraction, num_proc, batch_size, key, stats)
    dataset = DatasetDict(results) if eval_fraction > 0 else results["train"]
    logger.info("prepared %d examples (+%d eval):\n%s", stats.examples, stats.eval_examples, stats.summary())

    if key is not None:
        dataset = _save_and_reload(dataset, stats, Path(cache_dir) / f"prepared-{key}")
    return dataset, stats


@contextlib.contextmanager
def _progress_bars(enabled: bool):
    import datasets

    was_enabled = not datasets.are_progress_bars_disabled()
    if enabled != was_enabled:
        (datasets.enable_progress_bars if enabled else datasets.disable_progress_bars)()
    try:
        yield
    finally:
        if enabled != was_enabled:
            (datasets.enable_progress_bars if was_enabled else datasets.disable_progress_bars)()


def _encode_splits(splits, encoder, eval_fraction, num_proc, batch_size, key, stats) -> dict:
    from datasets import Dataset

    results = {}
    for name, pieces in splits.items():
        if name == "eval" and eval_fraction == 0:
            continue
        raw = Dataset.from_dict({"text": pieces})
        ds = raw.map(
            encoder,
            batched=True,
            batch_size=batch_size,
            num_proc=num_proc if num_proc > 1 and len(pieces) > batch_size else None,
            remove_columns=["text"],
            features=_features(encoder.sentiment is not None),
            # without a cache key the result is in memory only: give it a unique fingerprint
            new_fingerprint=f"{key}-{name}" if key is not None else uuid.uuid4().hex,
            desc=f"tokenize + boundaries ({name})",
        )
        stats.dropped_no_tokens += len(pieces) - len(ds)
        if len(ds):
            table = ds.data
            stats.phrase_units += _column_sum(table, "_n_phrase")
            stats.entity_units += _column_sum(table, "_n_entity")
            stats.pos_entity_units += _column_sum(table, "_n_pos_entity")
            stats.truncated += _column_sum(table, "_truncated")
            if encoder.sentiment is not None:
                stats.sentiment_units += _column_sum(table, "_n_sentiment")
            # every row has [CLS] ... [SEP]
            stats.tokens += int(pc.sum(pc.list_value_length(table.column("input_ids"))).as_py()) - 2 * len(ds)
        helpers = ["_n_phrase", "_n_entity", "_n_pos_entity", "_truncated"]
        ds = ds.remove_columns(helpers + (["_n_sentiment"] if encoder.sentiment is not None else []))
        if name == "train":
            stats.examples = len(ds)
        else:
            stats.eval_examples = len(ds)
        results[name] = ds
    return results


def _column_sum(table, name: str) -> int:
    column = table.column(name)
    if column.type == "bool":
        column = pc.cast(column, "int64")
    return int(pc.sum(column).as_py() or 0)


def _save_and_reload(dataset, stats: PrepareStats, path: Path):
    from datasets import load_from_disk

    save_prepared(dataset, stats, path)
    return load_from_disk(str(path))


def prepare_dataset(
    texts_or_files: Any,
    tokenizer,
    max_seq_len: int = 128,
    num_proc: int = 1,
    lexicon: EntityLexicon | str | os.PathLike | Iterable[str] | None = None,
    user_dict: str | os.PathLike | Iterable[str] | None = None,
    use_pos_entities: bool = False,
    cache_dir: str | os.PathLike | None = None,
    **kwargs,
):
    """Tokenize texts and precompute masking boundaries into a `datasets.Dataset`.

    Args:
        texts_or_files: a list of texts, or text/jsonl file paths (one document per line; jsonl reads
            the `text_field`; `.gz` is decompressed). A single str must be a file path. With
            `input_type="auto"` a list of strings is read as files only if every string is an existing file.
        tokenizer: an `ErnieZooTokenizerFast` (gives `input_ids`, `token_type_ids`, `pinyin_ids`).
        max_seq_len: maximum tokens per example, [CLS] and [SEP] included; longer texts are split.
        num_proc: processes for the `datasets.map` step.
        lexicon: an `EntityLexicon`, a lexicon file (`EntityLexicon.load`: one entity per line, or the NER tagger's
            typed format) or an iterable of entities.
        user_dict: a jieba-format user dictionary (path or lines) for the word segmenter.
        use_pos_entities: also take words tagged nr/ns/nt/nz by the POS tagger as entities.
        cache_dir: if set, save the result under `cache_dir/prepared-<hash>` and reuse it when the inputs
            and settings hash the same.
        **kwargs: `input_type` ("auto"/"text"/"file"), `text_field` ("text"), `eval_fraction` (0.0; if > 0 a
            seeded fraction of the documents goes to an "eval" split and a `DatasetDict` with "train" and
            "eval" is returned), `seed`, `batch_size`, `segmenter`, `show_progress`, `pack` (False; True joins
            consecutive short documents into examples of up to max_seq_len tokens, see `pack_pieces`),
            `sentiment_lexicon` (None; a `SentimentWords`, a lexicon file written by
            `python -m ernie_zoo.data.sentiment_lexicon`, or a {word: +1/-1} dict: adds `SENTIMENT_COLUMNS` for
            the sentiment masking unit).

    Returns:
        a `datasets.Dataset` with columns `COLUMNS` (plus `SENTIMENT_COLUMNS` with a sentiment lexicon), or a
        `DatasetDict` when `eval_fraction > 0`.
    """
    dataset, _ = prepare_dataset_with_stats(
        texts_or_files,
        tokenizer,
        max_seq_len=max_seq_len,
        num_proc=num_proc,
        lexicon=lexicon,
        user_dict=user_dict,
        use_pos_entities=use_pos_entities,
        cache_dir=cache_dir,
        **kwargs,
    )
    return dataset

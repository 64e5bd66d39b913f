"""`ernie-zoo prepare-data`: tokenize text/jsonl files and cache the knowledge-masking boundaries.

    ernie-zoo prepare-data corpus.txt more.jsonl --tokenizer tok/ --output data/prepared \\
        --max-seq-len 128 --num-proc 4 --lexicon entities.txt --user-dict userdict.txt --pos-entities \\
        --eval-fraction 0.01 --seed 0

The output directory is a `datasets` `save_to_disk` directory (a Dataset, or a DatasetDict with "train"
and "eval" when --eval-fraction > 0) plus `ernie_zoo_prepare.json` with the counts of what was read,
repaired and skipped; load it with `ernie_zoo.masking.load_prepared(path)`. With --train-vocab-size N and
a --tokenizer directory that does not exist yet, a tokenizer is first trained on the input and saved there.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Args:
    """Tokenize text/jsonl files and cache the knowledge-masking boundaries."""

    inputs: list[str]
    """Text files (one document per line) or .jsonl files (.gz ok)."""
    tokenizer: str | None = None
    """Tokenizer directory (save_pretrained) or vocab.txt (required)."""
    output: str | None = None
    """Directory to write the prepared dataset to (required)."""
    max_seq_len: int = 128
    """Tokens per example incl. [CLS]/[SEP]."""
    num_proc: int = 1
    """Processes for tokenization/segmentation."""
    lexicon: str | None = None
    """Entity lexicon: one entity per line, optional type after a tab."""
    user_dict: str | None = None
    """Jieba-format user dictionary for word segmentation."""
    pos_entities: bool = False
    """Also use nr/ns/nt/nz POS words as entities."""
    sentiment_lexicon: str | None = None
    """Sentiment lexicon (python -m ernie_zoo.data.sentiment_lexicon) for the sentiment masking unit."""
    sentiment_min_sources: int = 1
    """With --sentiment-lexicon: only words at least this many of its sources agree on."""
    text_field: str = "text"
    """Jsonl field holding the text."""
    eval_fraction: float = 0.0
    """Fraction of documents held out."""
    seed: int = 0
    """Seed of the train/eval split."""
    train_vocab_size: int | None = None
    """If --tokenizer does not exist, train a tokenizer with this vocabulary size on the inputs first."""
    min_frequency: int = 2
    """With --train-vocab-size: occurrences a character needs to get its own token."""
    no_progress: bool = False
    """Hide progress bars."""

    def validate(self) -> None:
        missing = [f"--{k}" for k in ("tokenizer", "output") if getattr(self, k) is None]
        if missing or not self.inputs:
            raise ValueError(f"give INPUT files, --tokenizer and --output (missing: {missing or 'INPUT'})")


def _load_tokenizer(args: Args):
    from ernie_zoo.masking import read_documents
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    path = Path(args.tokenizer)
    if path.is_file():
        return ErnieZooTokenizerFast(vocab_file=str(path))
    if path.is_dir():
        return ErnieZooTokenizerFast.from_pretrained(str(path))
    if args.train_vocab_size is None:
        raise ValueError(f"tokenizer not found: {path} (give --train-vocab-size to train one there)")
    print(f"training a {args.train_vocab_size}-token vocabulary on the inputs ...", file=sys.stderr)
    documents = read_documents(
        args.inputs, text_field=args.text_field, input_type="file", show_progress=False
    )
    tokenizer = ErnieZooTokenizerFast.train_vocab(
        documents,
        vocab_size=args.train_vocab_size,
        min_frequency=args.min_frequency,
        show_progress=not args.no_progress,
    )
    tokenizer.save_pretrained(str(path))
    print(f"saved tokenizer ({len(tokenizer)} tokens) to {path}", file=sys.stderr)
    return tokenizer


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.masking import prepare_dataset_with_stats, save_prepared

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        tokenizer = _load_tokenizer(args)
        sentiment = None
        if args.sentiment_lexicon is not None:
            from ernie_zoo.masking import SentimentWords

            sentiment = SentimentWords.from_file(
                args.sentiment_lexicon, min_sources=args.sentiment_min_sources
            )
        dataset, stats = prepare_dataset_with_stats(
            args.inputs,
            tokenizer,
            max_seq_len=args.max_seq_len,
            num_proc=args.num_proc,
            lexicon=args.lexicon,
            user_dict=args.user_dict,
            use_pos_entities=args.pos_entities,
            sentiment_lexicon=sentiment,
            input_type="file",
            text_field=args.text_field,
            eval_fraction=args.eval_fraction,
            seed=args.seed,
            show_progress=not args.no_progress,
        )
    except (ValueError, TypeError, OSError) as e:
        print(f"prepare-data: error: {e}", file=sys.stderr)
        return 2
    settings = {
        "inputs": [str(p) for p in args.inputs],
        "tokenizer": str(args.tokenizer),
        "max_seq_len": args.max_seq_len,
        "lexicon": args.lexicon,
        "user_dict": args.user_dict,
        "pos_entities": args.pos_entities,
        "sentiment_lexicon": args.sentiment_lexicon,
        "sentiment_min_sources": args.sentiment_min_sources,
        "eval_fraction": args.eval_fraction,
        "seed": args.seed,
    }
    out = save_prepared(dataset, stats, args.output, extra={"settings": settings})
    print(f"wrote {out}")
    print(stats.summary())
    problems = stats.empty_lines + stats.decode_errors + stats.bad_json + stats.missing_field
    if problems or stats.long_lines or stats.truncated:
        print(
            "note: "
            + json.dumps(
                {
                    k: getattr(stats, k)
                    for k in (
                        "empty_lines",
                        "decode_errors",
                        "bad_json",
                        "missing_field",
                        "long_lines",
                        "truncated",
                    )
                }
            )
        )
    return 0

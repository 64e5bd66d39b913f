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

import argparse
import json
import logging
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs", nargs="+", help="text files (one document per line) or .jsonl files (.gz ok)"
    )
    parser.add_argument(
        "--tokenizer", required=True, help="tokenizer directory (save_pretrained) or vocab.txt"
    )
    parser.add_argument("--output", required=True, help="directory to write the prepared dataset to")
    parser.add_argument("--max-seq-len", type=int, default=128, help="tokens per example incl. [CLS]/[SEP]")
    parser.add_argument("--num-proc", type=int, default=1, help="processes for tokenization/segmentation")
    parser.add_argument("--lexicon", help="entity lexicon: one entity per line, optional type after a tab")
    parser.add_argument("--user-dict", help="jieba-format user dictionary for word segmentation")
    parser.add_argument(
        "--pos-entities", action="store_true", help="also use nr/ns/nt/nz POS words as entities"
    )
    parser.add_argument(
        "--sentiment-lexicon",
        help="sentiment lexicon (python -m ernie_zoo.data.sentiment_lexicon) for the sentiment masking unit",
    )
    parser.add_argument(
        "--sentiment-min-sources",
        type=int,
        default=1,
        help="with --sentiment-lexicon: only words at least this many of its sources agree on",
    )
    parser.add_argument("--text-field", default="text", help="jsonl field holding the text (default: text)")
    parser.add_argument("--eval-fraction", type=float, default=0.0, help="fraction of documents held out")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/eval split")
    parser.add_argument(
        "--train-vocab-size",
        type=int,
        help="if --tokenizer does not exist, train a tokenizer with this vocabulary size on the inputs first",
    )
    parser.add_argument("--min-frequency", type=int, default=2, help="with --train-vocab-size")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _load_tokenizer(args: argparse.Namespace):
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


def run(args: argparse.Namespace) -> int:
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

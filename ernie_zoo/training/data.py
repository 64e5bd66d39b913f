"""Data for pretraining: the tokenizer, the prepared dataset, the seeded train/eval split and a resumable,
data-parallel-sharded batch order.

The order of examples is a pure function of (seed, epoch): epoch e visits a permutation drawn from
`numpy.random.default_rng([seed, e])`; rank r of a data-parallel group of size W takes every W-th example of
it. The position in the data is therefore two integers, `DataPosition(epoch, index)` (index = examples of
this rank's share of the epoch already consumed), which is what a checkpoint stores.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ernie_zoo.data.sources import RESERVED_MEMBERS
from ernie_zoo.data.sources import check_not_reserved as _check_path

logger = logging.getLogger(__name__)


def check_not_reserved(files: list[str]) -> None:
    """Refuse files that DATA.md reserves for independent evaluation (`ernie_zoo.data.sources.RESERVED_MEMBERS`,
    the one deny list), named directly or through a symlink; raises ValueError naming the file."""
    for f in files:
        for path in dict.fromkeys((Path(f).as_posix(), Path(os.path.realpath(f)).as_posix())):
            try:
                _check_path(path)
            except PermissionError:
                raise ValueError(
                    f"data file {f!r} is reserved for independent evaluation (see DATA.md); remove it"
                ) from None


def split_indices(n: int, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of range(n) into (train, eval) index arrays; eval gets round(n * fraction) examples, at
    least one when the fraction is positive, and train keeps at least one."""
    if n <= 0:
        raise ValueError("the dataset is empty: no examples to split")
    n_eval = 0 if eval_fraction <= 0 else min(n - 1, max(1, round(n * eval_fraction)))
    perm = np.random.default_rng([seed, 0x5EED]).permutation(n)
    return np.sort(perm[n_eval:]), np.sort(perm[:n_eval])


@dataclass
class DataPosition:
    """Where the data order stands: the epoch and the examples of this rank's share of it consumed."""

    epoch: int = 0
    index: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}


class ShardedBatchSampler:
    """Deterministic, resumable batches of example indices, sharded over data-parallel ranks.

    Args:
        n: examples in the (training) dataset.
        batch_size: examples per micro batch (on each rank).
        seed: seeds every epoch's permutation.
        dp_rank, dp_world_size: this rank and the data-parallel group size; ranks see disjoint examples and the
            same number of batches per epoch (the tail that does not divide evenly is dropped).
    """

    def __init__(self, n: int, batch_size: int, seed: int, dp_rank: int = 0, dp_world_size: int = 1):
        if not 0 <= dp_rank < dp_world_size:
            raise ValueError(f"dp_rank must be in [0, {dp_world_size}), got {dp_rank}")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.dp_rank, self.dp_world_size = dp_rank, dp_world_size
        self.per_rank = n // dp_world_size
        self.batches_per_epoch = self.per_rank // batch_size
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"{n} training examples are too few for one batch of {batch_size} per rank on {dp_world_size} "
                "rank(s): lower micro_batch_size or add data"
            )

    def permutation(self, epoch: int) -> np.ndarray:
        """This rank's share of epoch `epoch`'s order."""
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return perm[self.dp_rank :: self.dp_world_size][: self.per_rank]

    def next_batch(self, position: DataPosition) -> tuple[np.ndarray, DataPosition]:
        """The batch at `position` and the position after it (moving to the next epoch when this one has no
        full batch left)."""
        epoch, index = position.epoch, position.index
        if index + self.batch_size > self.batches_per_epoch * self.batch_size:
            epoch, index = epoch + 1, 0
        batch = self.permutation(epoch)[index : index + self.batch_size]
        return batch, DataPosition(epoch, index + self.batch_size)


def rows(dataset, indices: np.ndarray | list[int]) -> list[dict[str, Any]]:
    """Examples of a `datasets.Dataset` as a list of row dicts (one columnar read, not one per row)."""
    columns = dataset[[int(i) for i in indices]]
    keys = list(columns)
    return [dict(zip(keys, values)) for values in zip(*(columns[k] for k in keys))]


def load_tokenizer(recipe, output_dir: Path):
    """The run's tokenizer: the copy saved in `output_dir/tokenizer` (so a resumed run uses the same one),
    else `tokenizer.path`, else a vocabulary trained on the data files and saved there."""
    from ernie_zoo.tokenization import ErnieZooTokenizerFast
    from ernie_zoo.utils import atomic_directory

    saved = output_dir / "tokenizer"
    if saved.is_dir():
        logger.info("tokenizer: %s (saved by this run)", saved)
        return ErnieZooTokenizerFast.from_pretrained(str(saved))
    t = recipe.tokenizer
    if t.path is not None:
        if not Path(t.path).is_dir():
            raise ValueError(f"recipe key 'tokenizer.path' = {t.path!r}: not a directory")
        tokenizer = ErnieZooTokenizerFast.from_pretrained(t.path)
        logger.info("tokenizer: %s (%d tokens)", t.path, len(tokenizer))
    else:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # Each rank would train its own vocabulary (and number it its own way): train it once instead.
            raise ValueError(
                "a multi-process run needs tokenizer.path: train the vocabulary once (e.g. a single-process "
                "run with --max_steps 1, then use its output_dir/tokenizer)"
            )
        files = recipe.data.files
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise ValueError(f"recipe key 'data.files': no such file(s) {missing}")
        check_not_reserved(files)
        texts = training_texts(files)
        if not texts:
            raise ValueError(f"no text to train a vocabulary on in data.files {files} (all lines empty?)")
        tokenizer = ErnieZooTokenizerFast.train_vocab(
            texts,
            vocab_size=t.vocab_size,
            min_frequency=t.min_frequency,
            do_lower_case=t.do_lower_case,
            show_progress=False,
        )
        logger.info("tokenizer: trained a %d-token vocabulary on %d texts", len(tokenizer), len(texts))
    if int(os.environ.get("RANK", "0")) == 0:  # one writer in a multi-process run
        with atomic_directory(saved) as tmp:
            tokenizer.save_pretrained(str(tmp))
    return tokenizer


def load_dataset(recipe, tokenizer) -> tuple[Any, Any, dict[str, Any]]:
    """(train dataset, eval dataset or None, statistics) for a recipe.

    From `data.files`: `prepare_dataset_with_stats` tokenizes them and holds out a seeded fraction of the
    *documents* (so pieces of one long document never straddle the split); its counts of skipped and repaired
    input (empty lines, invalid UTF-8, broken jsonl, split long lines) are logged and returned. From
    `data.dataset_dir`: a prepared dataset; its "eval" split if it has one, else a seeded fraction of rows.
    Raises `ValueError` before any training if there is nothing to train on.
    """
    import datasets

    from ernie_zoo.masking import load_prepared, prepare_dataset_with_stats

    d = recipe.data
    split_seed = recipe.seed if d.split_seed is None else d.split_seed
    stats: dict[str, Any] = {}
    eval_ds = None
    if d.dataset_dir is not None:
        path = Path(d.dataset_dir)
        if not path.is_dir():
            raise ValueError(f"recipe key 'data.dataset_dir' = {d.dataset_dir!r}: not a directory")
        try:
            dataset, prep_stats = load_prepared(path)
            stats.update(prep_stats.to_dict() if prep_stats is not None else {})
        except ValueError:  # a plain save_to_disk dataset without ernie-zoo's stats file
            dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            if "train" not in dataset:
                raise ValueError(f"{path}: a DatasetDict without a 'train' split ({list(dataset)})")
            eval_ds = dataset["eval"] if "eval" in dataset else None
            dataset = dataset["train"]
        if eval_ds is None and d.eval_fraction > 0 and len(dataset) > 1:
            train_idx, eval_idx = split_indices(len(dataset), d.eval_fraction, split_seed)
            dataset, eval_ds = dataset.select(train_idx), dataset.select(eval_idx)
    else:
        missing = [f for f in d.files if not os.path.isfile(f)]
        if missing:
            raise ValueError(f"recipe key 'data.files': no such file(s) {missing}")
        check_not_reserved(d.files)
        sentiment = None
        if d.sentiment_lexicon is not None:
            from ernie_zoo.masking import SentimentWords

            path = os.path.expanduser(d.sentiment_lexicon)
            if not os.path.isfile(path):
                raise ValueError(
                    f"recipe key 'data.sentiment_lexicon' = {d.sentiment_lexicon!r}: no such file (build it with "
                    "`python -m ernie_zoo.data.sentiment_lexicon --out FILE`)"
                )
            sentiment = SentimentWords.from_file(path, min_sources=d.sentiment_min_sources)
            logger.info("sentiment lexicon: %d sentiment words from %s", len(sentiment), d.sentiment_lexicon)
        dataset, prep_stats = prepare_dataset_with_stats(
            list(d.files),
            tokenizer,
            max_seq_len=d.max_seq_len,
            num_proc=d.num_proc,
            lexicon=d.lexicon,
            user_dict=d.user_dict,
            use_pos_entities=d.use_pos_entities,
            pack=d.pack,
            sentiment_lexicon=sentiment,
            cache_dir=d.cache_dir,
            input_type="file",
            eval_fraction=d.eval_fraction,
            seed=split_seed,
            show_progress=recipe.logging.progress_bar and int(os.environ.get("RANK", "0")) == 0,
        )
        stats.update(prep_stats.to_dict())
        if isinstance(dataset, datasets.DatasetDict):
            dataset, eval_ds = dataset["train"], dataset["eval"]
        _report_bad_input(stats)
    if "input_ids" not in dataset.column_names:
        raise ValueError(f"the dataset has no input_ids column (columns: {dataset.column_names})")
    if recipe.masking.uses_sentiment() and "sentiment_ids" not in dataset.column_names:
        raise ValueError(
            f"masking.schedule uses the sentiment unit, but the dataset {d.dataset_dir or d.files} has no "
            "sentiment_ids column: prepare it with a sentiment lexicon (data.sentiment_lexicon, or "
            "`ernie-zoo prepare-data --sentiment-lexicon`)"
        )
    if len(dataset) == 0:
        source = d.dataset_dir or d.files
        raise ValueError(f"no training examples in {source}: every line was empty, unreadable or held out")
    stats["train_examples"] = len(dataset)
    stats["eval_examples"] = len(eval_ds) if eval_ds is not None else 0
    return dataset, eval_ds, stats


def _report_bad_input(stats: dict[str, Any]) -> None:
    problems = {
        "empty_lines": "empty lines skipped",
        "decode_errors": "lines with invalid UTF-8 repaired",
        "bad_json": "jsonl lines that are not JSON skipped",
        "missing_field": "jsonl records without a text field skipped",
        "long_lines": "over-long lines split",
        "truncated": "examples truncated",
        "dropped_no_tokens": "texts without any token dropped",
    }
    found = [f"{stats[k]} {what}" for k, what in problems.items() if stats.get(k)]
    if found:
        logger.warning("data: %s", "; ".join(found))


def training_texts(files: list[str]) -> list[str]:
    """The documents of the data files (for training a vocabulary), read the way `prepare_dataset` reads them."""
    from ernie_zoo.masking import read_documents

    return list(read_documents(list(files), input_type="file", show_progress=False))


__all__ = [
    "DataPosition",
    "RESERVED_MEMBERS",
    "ShardedBatchSampler",
    "check_not_reserved",
    "training_texts",
    "load_dataset",
    "load_tokenizer",
    "rows",
    "split_indices",
]

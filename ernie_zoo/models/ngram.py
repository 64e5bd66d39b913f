"""Character n-gram language model with interpolated Kneser-Ney smoothing (Chen & Goodman 1998, §3.5).

A baseline for held-out perplexity (poetry generation): ``CharNgramLM(order=3).fit(train_texts)``
then ``lm.perplexity(test_texts)``.  Each text is scored on its own: it is preceded by ``order - 1``
BOS symbols, every character (punctuation and newlines included) is predicted, and nothing is
predicted after the last character, so perplexity is normalised over exactly the test characters::

    PPL = exp( - (1/N) * sum_texts sum_i log p(c_i | c_{i-n+1} .. c_{i-1}) ),  N = total characters

Model, for order k = n..1 with context h (k-1 symbols) and h' = h without its first symbol::

    p_k(w | h) = ( max(c_k(h w) - D_k, 0) + D_k * T_k(h) * p_{k-1}(w | h') ) / c_k(h)   if c_k(h) > 0
               = p_{k-1}(w | h')                                                        otherwise
    p_0(w)     = 1 / V        (V = training characters + <unk>; BOS is never predicted)

``c_n`` are raw counts; for k < n, ``c_k(h w)`` is the *continuation count* (how many distinct
symbols precede ``h w`` in the training n-grams); ``c_k(h) = sum_w c_k(h w)``; ``T_k(h)`` is the
number of distinct ``w`` with ``c_k(h w) > 0``.  ``D_k = n1 / (n1 + 2 n2)`` from the count-of-counts
of order k unless a fixed ``discount`` is given.  Each p_k(. | h) sums to 1 over the V symbols.

Characters seen fewer than ``min_count`` times in training (and unseen test characters) map to
``<unk>``.  Everything is numpy (sorted int64 n-gram keys + ``searchsorted``), so 19M training
characters fit in a few hundred MB and train in well under a minute.

Saved format (``save`` / ``load``): one safetensors file, nothing executable.  The header (string metadata) holds
``vocab`` (the characters in id order, id 2 first), ``config`` (JSON: order, discounts, min_count and, from
version 2, the n-gram count of each order) and ``version``.  Version 2 (what ``save`` writes by default), per
order k:

    key_deltas.{k}  uint8   varint stream of the first differences of the sorted int64 keys (the first key is
                            its difference from 0); key = sum_j id_j * base**(k-1-j), w the lowest digit
    counts.{k}      uint8   varint stream of the counts (raw at the top order, continuation counts below)

A varint is little-endian base 128: 7 bits a byte, the high bit set on every byte but the last, so a value below
128 takes one byte.  Sorted keys are dense (consecutive n-grams of one context differ only in w) and most
counts are small, so an n-gram takes ~2.6 bytes (the 3-gram LM of ernie-zoo-mini-csc: 1.8M n-grams, 12.6 MB in
version 1, 4.7 MB in version 2); ``load`` decodes the streams with numpy, a few array passes per order.
Version 1 (files without ``version``; still read, and written by ``save(path, version=1)``) stores ``ngrams.{k}`` as (N, k) uint16 symbol ids and
``counts.{k}`` as uint16 or uint32: 2k + 2 bytes an n-gram.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["CharNgramLM"]

BOS, UNK = 0, 1
FORMAT_VERSION = 2  # of the saved file: see the module docstring


def _varint_encode(values: np.ndarray) -> np.ndarray:
    """Non-negative integers (< 2**63) as one uint8 stream of little-endian base-128 varints."""
    values = np.asarray(values, dtype=np.int64)
    if len(values) and values.min() < 0:
        raise ValueError("varints encode non-negative integers only")
    lengths = np.ones(len(values), dtype=np.int64)
    rest = values >> 7
    while rest.any():
        lengths += rest > 0
        rest >>= 7
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for j in range(int(lengths.max(initial=0))):  # the j-th byte of every value that has one
        has = lengths > j
        byte = (values[has] >> (7 * j)) & 0x7F
        out[starts[has] + j] = byte | np.where(lengths[has] > j + 1, 0x80, 0)
    return out


def _varint_decode(stream: np.ndarray, count: int) -> np.ndarray:
    """The `count` int64 values of a stream written by `_varint_encode`: one vectorised pass per byte position."""
    stream = np.asarray(stream, dtype=np.uint8)
    if len(stream) == count and (count == 0 or stream.max() < 0x80):  # every value one byte (small counts)
        return stream.astype(np.int64)
    ends = np.flatnonzero(stream < 0x80)  # the last byte of each value
    lengths = np.diff(ends, prepend=-1)
    if len(ends) != count or ends[-1] != len(stream) - 1 or lengths.max() > 9:
        raise ValueError(
            f"corrupt varint stream: {len(ends)} values in {len(stream)} bytes, {count} expected"
        )
    starts = ends - (lengths - 1)
    out = stream[starts].astype(np.int64) & 0x7F
    for j in range(1, int(lengths.max())):  # the j-th byte of the values that have one
        byte = stream[np.minimum(starts + j, ends)].astype(np.int64) & 0x7F
        out |= np.where(lengths > j, byte, 0) << (7 * j)
    return out


class CharNgramLM:
    """Interpolated Kneser-Ney character n-gram LM.

    Args:
        order: n (>= 1).
        discount: fixed discount in (0, 1) for every order; ``None`` estimates ``n1 / (n1 + 2 n2)``.
        min_count: characters rarer than this in training become ``<unk>``.
    """

    def __init__(self, order: int = 3, discount: float | None = None, min_count: int = 1) -> None:
        if not isinstance(order, int) or order < 1:
            raise ValueError(f"order must be an integer >= 1, got {order!r}")
        if discount is not None and not 0.0 < discount < 1.0:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        self.order = order
        self.fixed_discount = discount
        self.min_count = min_count
        self.vocab: dict[str, int] = {}
        self._tables: list[dict[str, np.ndarray]] = []
        self.discounts: list[float] = []

    # ------------------------------------------------------------------------------------- fitting

    @property
    def base(self) -> int:
        """Radix of the n-gram keys: number of symbol ids (BOS, UNK and the characters)."""
        return len(self.vocab) + 2

    @property
    def num_predictable(self) -> int:
        """V: the symbols the model distributes probability over (characters + ``<unk>``)."""
        return len(self.vocab) + 1

    def _encode(self, texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Concatenate texts, each preceded by order-1 BOS; return (ids, indices of predicted positions)."""
        pad = self.order - 1
        ids: list[int] = []
        positions: list[int] = []
        get = self.vocab.get
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be str, got {type(text).__name__}")
            ids.extend([BOS] * pad)
            start = len(ids)
            ids.extend(get(ch, UNK) for ch in text)
            positions.extend(range(start, len(ids)))
        return np.asarray(ids, dtype=np.int64), np.asarray(positions, dtype=np.int64)

    def _keys(self, ids: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
        """int64 keys of the k-grams ending at ``positions`` (w is the lowest digit)."""
        key = np.zeros(len(positions), dtype=np.int64)
        for j in range(k - 1, -1, -1):
            key = key * self.base + ids[positions - j]
        return key

    def fit(self, texts: Sequence[str]) -> CharNgramLM:
        """Count n-grams of ``texts`` and build the smoothed tables; returns ``self``."""
        counts = Counter()
        for text in texts:
            counts.update(text)
        chars = sorted(ch for ch, c in counts.items() if c >= self.min_count)
        self.vocab = {ch: i + 2 for i, ch in enumerate(chars)}
        if self.base**self.order >= 2**63:
            raise ValueError(f"vocabulary of {self.base} symbols too large for order {self.order} keys")
        ids, positions = self._encode(texts)
        if len(positions) == 0:
            raise ValueError("cannot fit on texts without characters")
        self._tables = [{} for _ in range(self.order + 1)]
        self.discounts = [0.0] * (self.order + 1)
        keys, nums = np.unique(self._keys(ids, positions, self.order), return_counts=True)
        for k in range(self.order, 0, -1):
            self._store(k, keys, nums)
            if k > 1:  # continuation counts of the (k-1)-gram suffixes of the k-gram types
                keys, nums = np.unique(keys % self.base ** (k - 1), return_counts=True)
        return self

    def _store(self, k: int, keys: np.ndarray, nums: np.ndarray, discount: float | None = None) -> None:
        ctx = keys // self.base  # keys are sorted, so equal contexts are contiguous
        ctx_keys, starts, types = np.unique(ctx, return_index=True, return_counts=True)
        den = np.add.reduceat(nums, starts)
        if discount is not None:
            d = discount
        elif self.fixed_discount is not None:
            d = self.fixed_discount
        else:
            n1, n2 = int(np.sum(nums == 1)), int(np.sum(nums == 2))
            d = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
            d = min(max(d, 0.05), 0.95)
        self.discounts[k] = d
        self._tables[k] = {
            "keys": keys,
            "nums": nums.astype(np.float64),
            "ctx": ctx_keys,
            "den": den.astype(np.float64),
            "types": types.astype(np.float64),
        }

    def prune(self, min_count: int, from_order: int = 2) -> CharNgramLM:
        """Drop the n-grams of order >= `from_order` (at least 2) counted fewer than `min_count` times (continuation
        counts below the top order); the lower orders stay whole. The tables are rebuilt from what is kept, with the
        fitted discounts, so each p_k(. | h) still sums to 1 (the dropped mass goes to the lower orders). Returns
        ``self``."""
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if from_order < 2:
            raise ValueError(f"from_order must be >= 2 (unigrams are never pruned), got {from_order}")
        for k in range(from_order, self.order + 1):
            t = self._tables[k]
            keep = t["nums"] >= min_count
            self._store(k, t["keys"][keep], t["nums"][keep], self.discounts[k])
        return self

    @property
    def num_ngrams(self) -> int:
        return sum(len(t["keys"]) for t in self._tables[1:])

    def save(self, path: str | Path, version: int = FORMAT_VERSION) -> None:
        """Write the fitted model as safetensors in the module docstring's format `version`: 2, per order the sorted
        n-gram keys as a varint stream of their differences and the counts as a varint stream; 1 (for readers of
        earlier releases), (N, k) uint16 symbol ids and their counts. The vocabulary, order and discounts go in
        the header (nothing executable: read back with `load`)."""
        from safetensors.numpy import save_file

        if not self._tables:
            raise RuntimeError("the model is not fitted; call fit() first")
        if version not in (1, 2):
            raise ValueError(f"format version must be 1 or 2, got {version!r}")
        if version == 1 and self.base > 2**16:
            raise ValueError(f"{self.base} symbols do not fit the uint16 ids of format version 1")
        tensors, sizes = {}, []
        for k in range(1, self.order + 1):
            keys, nums = self._tables[k]["keys"], self._tables[k]["nums"]
            if len(nums) and not np.array_equal(nums, np.round(nums)):
                raise ValueError(f"order {k}: the counts are not integers")
            sizes.append(len(keys))
            if version == 2:
                tensors[f"key_deltas.{k}"] = _varint_encode(np.diff(keys, prepend=0))
                tensors[f"counts.{k}"] = _varint_encode(nums.astype(np.int64))
                continue
            digits = []
            for _ in range(k):
                digits.append(keys % self.base)
                keys = keys // self.base
            tensors[f"ngrams.{k}"] = np.stack(digits[::-1], axis=1).astype(np.uint16)
            tensors[f"counts.{k}"] = nums.astype(np.uint16 if nums.max(initial=0) < 2**16 else np.uint32)
        chars = "".join(sorted(self.vocab, key=self.vocab.get))
        meta = {"order": self.order, "discounts": self.discounts, "min_count": self.min_count}
        if version == 1:  # as earlier releases wrote it: no version, no n-gram counts
            save_file(tensors, str(path), metadata={"vocab": chars, "config": json.dumps(meta)})
            return
        meta["ngrams"] = sizes
        save_file(tensors, str(path), metadata={"vocab": chars, "config": json.dumps(meta), "version": "2"})

    @classmethod
    def load(cls, path: str | Path) -> CharNgramLM:
        """A model written by `save` (format version 2, or version 1 of earlier releases)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as f:
            header = f.metadata() or {}
            if "vocab" not in header or "config" not in header:
                raise ValueError(f"{path}: not a CharNgramLM file (no vocab/config in its header)")
            version = int(header.get("version", "1"))
            if version not in (1, 2):
                raise ValueError(f"{path}: CharNgramLM format version {version}; this release reads 1 and 2")
            meta = json.loads(header["config"])
            lm = cls(order=meta["order"], min_count=meta["min_count"])
            lm.vocab = {ch: i + 2 for i, ch in enumerate(header["vocab"])}
            lm._tables = [{} for _ in range(lm.order + 1)]
            lm.discounts = [float(d) for d in meta["discounts"]]
            for k in range(1, lm.order + 1):
                if version == 1:  # (N, k) uint16 symbol ids
                    digits = f.get_tensor(f"ngrams.{k}").astype(np.int64)
                    keys = np.zeros(len(digits), dtype=np.int64)
                    for j in range(k):
                        keys = keys * lm.base + digits[:, j]
                    nums = f.get_tensor(f"counts.{k}")
                else:
                    n = meta["ngrams"][k - 1]
                    keys = np.cumsum(_varint_decode(f.get_tensor(f"key_deltas.{k}"), n))
                    nums = _varint_decode(f.get_tensor(f"counts.{k}"), n)
                lm._store(k, keys, nums.astype(np.float64), lm.discounts[k])
        return lm

    # ------------------------------------------------------------------------------------- scoring

    @staticmethod
    def _lookup(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(sorted_keys, query)
        idx_c = np.minimum(idx, len(sorted_keys) - 1)
        hit = sorted_keys[idx_c] == query
        return np.where(hit, values[idx_c], 0.0)

    def _probs(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if not self._tables:
            raise RuntimeError("the model is not fitted; call fit() first")
        p = np.full(len(positions), 1.0 / self.num_predictable)
        for k in range(1, self.order + 1):
            t = self._tables[k]
            keys = self._keys(ids, positions, k)
            num = self._lookup(t["keys"], t["nums"], keys)
            ctx = keys // self.base
            den = self._lookup(t["ctx"], t["den"], ctx)
            types = self._lookup(t["ctx"], t["types"], ctx)
            d = self.discounts[k]
            safe = np.where(den > 0, den, 1.0)
            p = np.where(den > 0, (np.maximum(num - d, 0.0) + d * types * p) / safe, p)
        return p

    def log_probs(self, text: str) -> np.ndarray:
        """Natural-log probability of each character of ``text`` given its preceding characters."""
        ids, positions = self._encode([text])
        return np.log(self._probs(ids, positions))

    def prob(self, char: str, context: str = "") -> float:
        """p(char | last order-1 characters of ``context``), ``context`` taken as the start of a text."""
        if len(char) != 1:
            raise ValueError(f"char must be one character, got {char!r}")
        return float(math.exp(self.log_probs(context + char)[-1]))

    def distribution(self, context: str = "") -> dict[str, float]:
        """The full next-character distribution after ``context`` (keys: characters and ``"<unk>"``)."""
        symbols = list(self.vocab) + ["<unk>"]
        ids, _ = self._encode([context])
        ctx_ids = ids[len(ids) - (self.order - 1) :] if self.order > 1 else ids[:0]
        rows = np.tile(ctx_ids, (len(symbols), 1))
        last = np.array([self.vocab[s] for s in symbols[:-1]] + [UNK], dtype=np.int64)[:, None]
        flat = np.concatenate([rows, last], axis=1).reshape(-1)
        positions = np.arange(len(symbols), dtype=np.int64) * self.order + (self.order - 1)
        probs = self._probs(flat, positions)
        return dict(zip(symbols, probs.tolist()))

    def total_log_prob(self, texts: Iterable[str]) -> tuple[float, int]:
        """(sum of natural-log probabilities, number of characters) over ``texts``."""
        ids, positions = self._encode(texts)
        if len(positions) == 0:
            return 0.0, 0
        return float(np.log(self._probs(ids, positions)).sum()), int(len(positions))

    def perplexity(self, texts: Iterable[str]) -> float:
        """exp(-mean log-probability per character) over all characters of ``texts``.

        Raises:
            ValueError: no characters to score.
        """
        total, n = self.total_log_prob(texts)
        if n == 0:
            raise ValueError("perplexity of an empty text set is undefined")
        return math.exp(-total / n)

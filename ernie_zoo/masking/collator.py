"""`KnowledgeMaskingCollator`: pads prepared examples and masks whole char / phrase / entity / sentiment units.

All sampling is vectorised over the batch with numpy (no Python loop per unit or per token); the unit
boundaries come precomputed in each example (`phrase_ids`, `entity_ids`, see `prepare.py`).

How a batch is masked (B sequences, T padded length)::

    strategy per row        schedule.strategy_at(step) -> name, or a mixture sampled per row
    unit key per token      char: position | phrase: phrase_id | entity: entity_id, else phrase_id
                            | sentiment: sentiment_id, else phrase_id
    unit starts             maskable token whose key differs from the previous maskable token's key
    n-gram chunks           consecutive units grouped into spans of n ~ p(n) ∝ 1/n, n <= max_ngram
    budget per row          floor(n_maskable * mlm_probability + U(0,1))   (stochastic rounding, >= 1)
    selection               chunks in random order (entity chunks first at the entity level); take the
                            prefix that fits the budget, and the chunk that straddles it with probability
                            (budget left) / (chunk length), so the expected masked count equals the budget
                            sentiment level: sentiment-word chunks first, then the others, first fit: a
                            chunk is taken only if it fits in the room its row has left, so the row never
                            exceeds its budget
    80/10/10                decided once per chunk: all its tokens -> [MASK] / random tokens / kept
    polarity labels         (schedules with a sentiment stage) at the masked tokens of sentiment words in
                            sentiment rows: 1 positive, 0 negative; -100 elsewhere
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .schedule import STRATEGIES, MaskingSchedule

logger = logging.getLogger(__name__)

__all__ = ["KnowledgeMaskingCollator"]

_CHAR, _PHRASE, _ENTITY, _SENTIMENT = (STRATEGIES.index(s) for s in ("char", "phrase", "entity", "sentiment"))


def _as_schedule(schedule: Any) -> MaskingSchedule:
    if schedule is None:
        return MaskingSchedule.constant("phrase")
    if isinstance(schedule, MaskingSchedule):
        return schedule
    if isinstance(schedule, (str, Mapping)) and not (isinstance(schedule, Mapping) and "stages" in schedule):
        return MaskingSchedule.constant(schedule)
    return MaskingSchedule.from_config(schedule)


class KnowledgeMaskingCollator:
    """Collate prepared examples into a masked-LM batch with ERNIE 1.0 knowledge masking.

    Args:
        tokenizer: the tokenizer the examples were prepared with (`ErnieZooTokenizerFast`); gives the
            [MASK]/[PAD] ids, the special ids never to mask, and the default pinyin of random tokens.
        schedule: a `MaskingSchedule`, a strategy name / mixture dict (constant), or a `from_config` list.
            Default: phrase masking throughout.
        mlm_probability: the fraction of maskable tokens to predict (ERNIE/BERT: 0.15).
        max_ngram: mask spans of 1..max_ngram consecutive units, n drawn with p(n) ∝ 1/n (1: single units).
        seed: with `set_step(step)`, the masks of a step depend only on (seed, step) and the calls since.
        pad_to_multiple_of: pad T up to a multiple of this (e.g. 8 for tensor cores).
        mask_replace_prob / random_replace_prob: of the chosen units, the fraction replaced by [MASK] and by
            random tokens; the rest keep their tokens (0.8 / 0.1 / 0.1).
        entity_first: at the entity level, pick entity units before other units (then fill the budget with
            phrase units). If False, entities compete with phrases uniformly.

    The sentiment level (SKEP): the sentiment words of the examples (`sentiment_ids` / `sentiment_polarity`,
    made by `prepare_dataset(..., sentiment_lexicon=...)`) are units, always picked before the phrase units
    that fill the rest of the budget, and never beyond it (first fit, so a row's masked tokens never exceed
    its budget; a row whose every unit is longer than its budget stays unmasked). When the schedule has a
    sentiment stage, every batch also carries `polarity_labels` (B, T): the polarity of each masked token of
    a sentiment word in a sentiment row (1 positive, 0 negative), -100 elsewhere.

    Reproducibility: `set_step(step)` re-derives the generator from `(seed, step)`, so a run resumed at
    step k produces exactly the batches of an uninterrupted run, provided each step collates the same
    micro-batches in the same order. Collate in the training process (the collator is fast enough; set
    `DataLoader(num_workers=0)` or collate outside the loader): worker processes hold their own copy,
    which `set_step` in the main process does not reach.
    """

    def __init__(
        self,
        tokenizer,
        schedule: MaskingSchedule | str | Mapping[str, float] | Sequence[Mapping[str, Any]] | None = None,
        mlm_probability: float = 0.15,
        max_ngram: int = 1,
        seed: int = 0,
        pad_to_multiple_of: int | None = None,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        entity_first: bool = True,
    ):
        if not 0.0 < mlm_probability <= 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1], got {mlm_probability}")
        if not (isinstance(max_ngram, int) and max_ngram >= 1):
            raise ValueError(f"max_ngram must be an int >= 1, got {max_ngram!r}")
        if not (0 <= mask_replace_prob <= 1 and 0 <= random_replace_prob <= 1):
            raise ValueError("mask_replace_prob and random_replace_prob must be in [0, 1]")
        if mask_replace_prob + random_replace_prob > 1 + 1e-9:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob must be <= 1, got {mask_replace_prob + random_replace_prob}"
            )
        if pad_to_multiple_of is not None and (
            not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1
        ):
            raise ValueError(f"pad_to_multiple_of must be a positive int or None, got {pad_to_multiple_of!r}")
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs a [MASK] and a [PAD] token for masked-LM collation")
        self.tokenizer = tokenizer
        self.schedule = _as_schedule(schedule)
        self.mlm_probability = float(mlm_probability)
        self.max_ngram = max_ngram
        self.seed = int(seed)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.mask_replace_prob = float(mask_replace_prob)
        self.random_replace_prob = float(random_replace_prob)
        self.entity_first = entity_first

        self.mask_id = int(tokenizer.mask_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        vocab_size = len(tokenizer)
        self.vocab_size = vocab_size
        special_ids = np.array(sorted(set(tokenizer.all_special_ids)), dtype=np.int64)
        self.is_special = np.zeros(vocab_size, dtype=bool)
        self.is_special[special_ids[special_ids < vocab_size]] = True
        # Random replacements come from the ordinary vocabulary only (never [PAD]/[CLS]/[MASK]/[UNK]...).
        self.random_candidates = np.flatnonzero(~self.is_special).astype(np.int64)
        if self.random_candidates.size == 0:
            raise ValueError("the tokenizer has no non-special tokens to draw random replacements from")
        tables = tokenizer.char_feature_tables(vocab_size=vocab_size)
        self.default_pinyin = np.asarray(tables["default_pinyin_ids"], dtype=np.int64)  # (V,)
        n = np.arange(1, max_ngram + 1)
        self.ngram_probs = (1.0 / n) / (1.0 / n).sum()
        self._warned_no_units = False
        #: the schedule has a sentiment stage: stack the sentiment columns and emit `polarity_labels`
        self.uses_sentiment = self.schedule.uses("sentiment")
        self._warned_no_sentiment = False
        self.step = 0
        self.set_step(0)

    # ------------------------------------------------------------------ state
    def set_step(self, step: int) -> None:
        """Select the schedule stage for `step` and re-seed from `(seed, step)`."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        self.step = int(step)
        self._rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, self.step])))

    def strategy(self) -> str | dict[str, float]:
        """The strategy of the current step."""
        return self.schedule.strategy_at(self.step)

    # ------------------------------------------------------------------ collation
    def _stack(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """Pad the per-example int lists into (B, T) int64 arrays (one numpy conversion per column)."""
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        first = examples[0]
        if not isinstance(first, Mapping) or "input_ids" not in first:
            raise TypeError(
                "examples must be mappings with at least 'input_ids' (rows of a prepared dataset)"
            )
        lengths = np.fromiter((len(ex["input_ids"]) for ex in examples), dtype=np.int64, count=len(examples))
        T = int(lengths.max()) if len(lengths) else 0
        if self.pad_to_multiple_of:
            T = -(-T // self.pad_to_multiple_of) * self.pad_to_multiple_of
        B = len(examples)
        valid = np.arange(T)[None, :] < lengths[:, None]  # (B, T)
        defaults = {
            "input_ids": self.pad_id,
            "token_type_ids": 0,
            "pinyin_ids": 0,
            "phrase_ids": -1,
            "entity_ids": -1,
        }
        if self.uses_sentiment:
            defaults.update(sentiment_ids=-1, sentiment_polarity=0)
            if "sentiment_ids" not in first and not self._warned_no_sentiment:
                logger.warning(
                    "examples have no 'sentiment_ids' (not prepared with a sentiment lexicon): the sentiment "
                    "stage masks phrase units only"
                )
                self._warned_no_sentiment = True
        out: dict[str, np.ndarray] = {}
        for key, fill in defaults.items():
            arr = np.full((B, T), fill, dtype=np.int64)
            if key in first:
                columns = [ex[key] for ex in examples]
                if not np.array_equal(np.fromiter(map(len, columns), dtype=np.int64, count=B), lengths):
                    raise ValueError(f"'{key}' and 'input_ids' differ in length in some example")
                if isinstance(columns[0], (np.ndarray, torch.Tensor)):
                    flat = np.concatenate([np.asarray(c, dtype=np.int64).reshape(-1) for c in columns])
                else:
                    flat = np.fromiter(
                        itertools.chain.from_iterable(columns), dtype=np.int64, count=int(lengths.sum())
                    )
                arr[valid] = flat
            elif key == "phrase_ids":
                # Not prepared with boundaries: every token is its own unit (char-level masking).
                if not self._warned_no_units:
                    logger.warning(
                        "examples have no 'phrase_ids' (not made by prepare_dataset): masking single tokens"
                    )
                    self._warned_no_units = True
                arr[valid] = np.arange(T)[None, :].repeat(B, 0)[valid]
            out[key] = arr
        out["_valid"] = valid
        return out

    def _row_strategies(self, B: int) -> np.ndarray:
        strategy = self.strategy()  # already validated and normalised by MaskingStage
        if isinstance(strategy, str):
            return np.full(B, STRATEGIES.index(strategy), dtype=np.int64)
        names = list(strategy)
        probs = np.array([strategy[n] for n in names])
        codes = np.array([STRATEGIES.index(n) for n in names])
        return codes[self._rng.choice(len(names), size=B, p=probs)]

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        cols = self._stack(examples)
        ids, pinyin, phrase, entity, valid = (
            cols["input_ids"],
            cols["pinyin_ids"],
            cols["phrase_ids"],
            cols["entity_ids"],
            cols["_valid"],
        )
        B, T = ids.shape
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(
                f"input_ids outside the tokenizer's vocabulary [0, {self.vocab_size}): were these examples "
                "prepared with a different tokenizer?"
            )
        rng = self._rng
        maskable = valid & (phrase >= 0) & ~self.is_special[ids]
        sentiment = cols.get("sentiment_ids")
        masked, action, in_sentiment = self._sample_mask(
            maskable, phrase, entity, self._row_strategies(B), rng, sentiment
        )

        labels = np.where(masked, ids, -100)
        inputs = ids.copy()
        pinyin = pinyin.copy()
        self._replace(action, inputs, pinyin, rng)
        out = {
            "input_ids": torch.from_numpy(inputs),
            "attention_mask": torch.from_numpy(valid.astype(np.int64)),
            "token_type_ids": torch.from_numpy(cols["token_type_ids"]),
            "pinyin_ids": torch.from_numpy(pinyin),
            "labels": torch.from_numpy(labels),
        }
        if self.uses_sentiment:
            # SKEP's word-polarity targets: masked tokens of sentiment words picked as sentiment units
            positive = cols["sentiment_polarity"] > 0
            out["polarity_labels"] = torch.from_numpy(
                np.where(masked & in_sentiment, positive.astype(np.int64), -100)
            )
        return out

    # ------------------------------------------------------------------ sampling
    def _sample_mask(
        self,
        maskable: np.ndarray,
        phrase: np.ndarray,
        entity: np.ndarray,
        codes: np.ndarray,
        rng: np.random.Generator,
        sentiment: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tokens to predict, (B, T) bool; what to do with each, (B, T) int8: 0 [MASK], 1 random token,
        2 keep, -1 not masked (the 80/10/10 decision is made once per chunk); and which tokens are sentiment-word
        units of sentiment rows, (B, T) bool."""
        B, T = maskable.shape
        masked = np.zeros(B * T, dtype=bool)
        action = np.full(B * T, -1, dtype=np.int8)
        sentiment_tok = np.zeros(B * T, dtype=bool)
        # Work on the N maskable tokens only, flattened in (row, position) order.
        tok_pos = np.flatnonzero(maskable.reshape(-1))  # (N,) flat index
        N = tok_pos.size
        if N == 0:
            return masked.reshape(B, T), action.reshape(B, T), sentiment_tok.reshape(B, T)
        tok_row = tok_pos // T
        tok_code = codes[tok_row]
        tok_entity = entity.reshape(-1)[tok_pos]
        in_entity = (tok_code == _ENTITY) & (tok_entity >= 0)
        strict_rows = codes == _SENTIMENT  # (B,) rows selected first-fit, never beyond their budget
        any_sentiment = bool(strict_rows.any())
        # Unit key per token by its row's strategy: char -> its position; phrase -> phrase id; entity ->
        # entity id (offset by T so it cannot equal a phrase id) or else phrase id; sentiment -> sentiment
        # word id (offset by T) or else phrase id.
        key = np.where(tok_code == _CHAR, tok_pos, phrase.reshape(-1)[tok_pos])
        key = np.where(in_entity, tok_entity + T, key)
        if any_sentiment and sentiment is not None:
            tok_sentiment = sentiment.reshape(-1)[tok_pos]
            in_sentiment = (tok_code == _SENTIMENT) & (tok_sentiment >= 0)
            key = np.where(in_sentiment, tok_sentiment + T, key)
        else:
            in_sentiment = None
        # A unit starts where the row or the key changes from the previous maskable token, so a unit
        # interrupted by an unmaskable token such as [UNK] stays one unit.
        starts = np.empty(N, dtype=bool)
        starts[0] = True
        starts[1:] = (tok_row[1:] != tok_row[:-1]) | (key[1:] != key[:-1])
        tok_unit = np.cumsum(starts) - 1
        first = np.flatnonzero(starts)  # (U,) index of each unit's first token
        U = first.size
        unit_len = np.diff(np.r_[first, N])
        unit_row = tok_row[first]
        unit_is_entity = in_entity[first]
        unit_is_sentiment = in_sentiment[first] if in_sentiment is not None else None

        # ---- n-gram chunks: group consecutive units of a row into spans of n units
        if self.max_ngram > 1:
            unit_first = tok_pos[first]
            unit_last = tok_pos[np.r_[first[1:] - 1, N - 1]]  # flat index of each unit's last token
            n = rng.choice(np.arange(1, self.max_ngram + 1), size=U, p=self.ngram_probs)
            chunk_first = np.cumsum(n) - n
            chunk_start = np.zeros(U, dtype=bool)
            chunk_start[chunk_first[chunk_first < U]] = True
            chunk_start[0] = True
            # never span two rows, nor jump over unmaskable tokens ([SEP] between a pair, [UNK] runs)
            chunk_start[1:] |= (unit_row[1:] != unit_row[:-1]) | (unit_first[1:] != unit_last[:-1] + 1)
            unit_chunk = np.cumsum(chunk_start) - 1
            C = int(unit_chunk[-1]) + 1
            chunk_len = np.bincount(unit_chunk, weights=unit_len, minlength=C).astype(np.int64)
            chunk_row = unit_row[chunk_start]
            chunk_is_entity = np.bincount(unit_chunk, weights=unit_is_entity, minlength=C) > 0
            if unit_is_sentiment is not None:
                chunk_is_sentiment = np.bincount(unit_chunk, weights=unit_is_sentiment, minlength=C) > 0
        else:
            unit_chunk = np.arange(U)
            C, chunk_len, chunk_row, chunk_is_entity = U, unit_len, unit_row, unit_is_entity
            chunk_is_sentiment = unit_is_sentiment

        # ---- budget per row (stochastic rounding keeps the expected ratio exact), at least one token
        n_maskable = np.bincount(tok_row, minlength=B)
        budget = np.floor(n_maskable * self.mlm_probability + rng.random(B)).astype(np.int64)
        budget = np.minimum(np.maximum(budget, (n_maskable > 0).astype(np.int64)), n_maskable)

        # ---- random order within each row; entity chunks first at the entity level
        order_key = rng.random(C)
        if self.entity_first:
            order_key = order_key - chunk_is_entity
        if unit_is_sentiment is not None:  # sentiment words first (a row is never both entity and sentiment)
            order_key = order_key - chunk_is_sentiment
        # one argsort instead of a lexsort: key in [-1, 1), so rows stay apart with a stride of 4
        order = np.argsort(chunk_row * 4.0 + order_key, kind="stable")
        rows, lengths = chunk_row[order], chunk_len[order]
        if not any_sentiment:
            take = self._select(rows, lengths, budget, n_maskable > 0, rng)
        else:
            strict = strict_rows[rows]
            take = np.zeros(C, dtype=bool)
            if not strict.all():
                loose = ~strict
                take[loose] = self._select(rows[loose], lengths[loose], budget, n_maskable > 0, rng)
            take[strict] = self._select_within(rows[strict], lengths[strict], budget)
        chunk_take = np.zeros(C, dtype=bool)
        chunk_take[order] = take
        token_chunk = unit_chunk[tok_unit]
        sel = chunk_take[token_chunk]
        masked[tok_pos[sel]] = True
        # one 80/10/10 draw per chunk: 0 = [MASK], 1 = random token, 2 = keep
        r = rng.random(C)
        chunk_action = np.where(
            r < self.mask_replace_prob,
            0,
            np.where(r < self.mask_replace_prob + self.random_replace_prob, 1, 2),
        ).astype(np.int8)
        action[tok_pos[sel]] = chunk_action[token_chunk[sel]]
        if in_sentiment is not None:
            sentiment_tok[tok_pos[in_sentiment]] = True
        return masked.reshape(B, T), action.reshape(B, T), sentiment_tok.reshape(B, T)

    @staticmethod
    def _select_within(
        rows: np.ndarray, lengths: np.ndarray, budget: np.ndarray, max_rounds: int = 8
    ) -> np.ndarray:
        """Choose chunks, given in priority order grouped by row, first fit: a chunk is taken if it fits in
        the room its row has left, so no row ever exceeds its budget. Vectorised in rounds: drop the chunks
        longer than their row's room, take the prefix of the rest that fits; the first chunk that did not fit
        is longer than the room left after that prefix, so the next round drops it and goes on after it.
        Deterministic (the order carries the randomness); after `max_rounds` rounds the leftover room stays
        unused."""
        B = budget.size
        take = np.zeros(rows.size, dtype=bool)
        alive = np.ones(rows.size, dtype=bool)  # neither taken nor ruled out
        room = budget.astype(np.int64).copy()
        for _ in range(max_rounds):
            alive &= lengths <= room[rows]
            if not alive.any():
                break
            length = np.where(alive, lengths, 0)
            total = np.bincount(rows, weights=length, minlength=B).astype(np.int64)
            cum_after = np.cumsum(length) - (np.cumsum(total) - total)[rows]
            fits = alive & (cum_after <= room[rows])
            take |= fits
            alive &= ~fits
            room -= np.bincount(rows, weights=np.where(fits, lengths, 0), minlength=B).astype(np.int64)
        return take

    @staticmethod
    def _select(
        rows: np.ndarray,
        lengths: np.ndarray,
        budget: np.ndarray,
        needs_one: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Choose chunks, given in random order grouped by row: the prefix that fits each row's budget,
        plus the chunk straddling the budget with probability (room left) / (its length), which makes the
        expected count equal to the budget. A row left empty (its first chunk was longer than the budget
        and lost the draw) drops that chunk and tries again, a few rounds, then takes its first chunk."""
        B = budget.size
        C = rows.size
        b = budget[rows]
        u = rng.random(C)
        take = np.zeros(C, dtype=bool)
        alive = np.ones(C, dtype=bool)
        done = ~needs_one
        for _ in range(4):
            length = np.where(alive, lengths, 0)
            total = np.bincount(rows, weights=length, minlength=B).astype(np.int64)
            cum_after = np.cumsum(length) - (np.cumsum(total) - total)[rows]
            cum_before = cum_after - length
            fits = alive & (cum_after <= b)
            straddle = alive & (cum_before < b) & (cum_after > b)
            won = straddle & (u * lengths < b - cum_before)
            open_rows = ~done[rows]
            take |= open_rows & (fits | won)
            done |= np.bincount(rows, weights=take, minlength=B) > 0
            if done.all():
                return take
            alive &= ~(straddle & ~won & ~done[rows])
        # still empty: take the row's first remaining chunk (or its first chunk if none remains)
        row_start = np.searchsorted(rows, rows, side="left")
        alive_cum = np.cumsum(alive)
        rank = alive_cum - (alive_cum - alive)[row_start]
        take |= ~done[rows] & alive & (rank == 1)
        done |= np.bincount(rows, weights=take, minlength=B) > 0
        take |= ~done[rows] & (np.arange(C) == row_start)
        return take

    def _replace(
        self, action: np.ndarray, inputs: np.ndarray, pinyin: np.ndarray, rng: np.random.Generator
    ) -> None:
        """Apply 80/10/10 in place. [MASK] positions get pinyin 0 (the reading would reveal the character);
        random tokens get their own default reading; kept tokens keep theirs."""
        action = action.reshape(-1)
        ids_flat = inputs.reshape(-1)
        pin_flat = pinyin.reshape(-1)
        to_mask = np.flatnonzero(action == 0)
        ids_flat[to_mask] = self.mask_id
        pin_flat[to_mask] = 0
        to_random = np.flatnonzero(action == 1)
        if to_random.size:
            random_ids = self.random_candidates[
                rng.integers(0, self.random_candidates.size, size=to_random.size)
            ]
            ids_flat[to_random] = random_ids
            pin_flat[to_random] = self.default_pinyin[random_ids]

"""ERNIE 1.0 knowledge masking: whole characters, phrases or entities, on a staged schedule.

Reference: Yu Sun, Shuohuan Wang, Yukun Li, et al. "ERNIE: Enhanced Representation through Knowledge
Integration", arXiv:1904.09223 (2019). ERNIE keeps BERT's masked-LM objective but masks *knowledge units*
instead of single characters, learning in three stages: basic-level masking (random characters), then
phrase-level masking (whole words/phrases from a segmenter), then entity-level masking (whole named
entities), so that a masked unit must be recovered from its context rather than from its own visible half.

Usage::

    from ernie_zoo.masking import (EntityLexicon, KnowledgeMaskingCollator, MaskingSchedule, MaskingStage,
                                   prepare_dataset)

    ds = prepare_dataset(["新华社北京电，国务院总理今天会见了来访的外国代表团。", ...], tokenizer,
                         max_seq_len=128, lexicon=EntityLexicon(["新华社", "国务院"]), use_pos_entities=True)
    schedule = MaskingSchedule([MaskingStage("char", 1000), MaskingStage("phrase", 3000),
                                MaskingStage("entity", None)])
    collator = KnowledgeMaskingCollator(tokenizer, schedule=schedule, mlm_probability=0.15, seed=0)
    collator.set_step(step)                      # before collating the batch of `step`
    batch = collator([ds[i] for i in range(32)])  # input_ids, attention_mask, token_type_ids, pinyin_ids, labels

Design
------
* **Boundaries once, offline** (`prepare.py`): a batched, multi-process `datasets.map` tokenizes each text
  and stores per token `phrase_ids` (its word unit from rjieba/jieba, with an optional user dictionary) and
  `entity_ids` (its entity span: leftmost-longest, non-overlapping Aho-Corasick matches of a user lexicon,
  then, optionally, words POS-tagged nr/ns/nt/nz that overlap no lexicon entity); the result is saved with
  `save_to_disk`. Bad input (empty lines, invalid UTF-8, broken jsonl, huge lines) is repaired or skipped
  and counted, never fatal.
* **Sampling only, vectorised** (`collator.py`): per batch, every row's strategy comes from the schedule
  (a name, or a mixture sampled per row). Units are the tokens (char), the phrase units (phrase), or the
  entities plus the phrase units of the remaining tokens (entity; entities are picked first). With
  `max_ngram > 1`, spans of n consecutive units are masked together, n ~ p(n) ∝ 1/n (ERNIE / SpanBERT
  style). Each row gets a budget of `mlm_probability` of its maskable tokens (stochastic rounding, at least
  one unit); units are taken in random order while they fit, and the unit that straddles the budget with
  probability (room left)/(unit length), so the expected masked fraction is exactly `mlm_probability`
  and a unit is always masked whole. Each chosen unit then becomes [MASK] (80%), random tokens (10%) or
  stays (10%), all its tokens alike. Labels are -100 except at chosen tokens.
* **Pinyin does not leak**: a [MASK] position gets `pinyin_ids` 0 (its reading would give the character
  away), a random token gets that token's default reading, a kept token keeps its own.
* **Never masked**: special tokens ([CLS], [SEP], [UNK], ...) and padding.
* **Reproducible**: `set_step(step)` re-derives the generator from `(seed, step)`, so a resumed run masks
  its batches exactly like an uninterrupted one.
* **Sentiment unit (SKEP)**: Tian et al., "SKEP: Sentiment Knowledge Enhanced Pre-training for Sentiment
  Analysis", ACL 2020. `prepare_dataset(..., sentiment_lexicon=...)` marks the words of a sentiment lexicon
  (`SentimentWords`: `python -m ernie_zoo.data.sentiment_lexicon` output, matched leftmost-longest like
  entities but only on the segmenter's word boundaries) with their polarity; a `sentiment` stage masks them
  first, whole, then fills the same budget with phrase units, first fit, so a row never exceeds its budget;
  80/10/10 as for every unit. Batches of such a schedule carry `polarity_labels` (1 positive, 0 negative at
  the masked sentiment-word tokens, -100 elsewhere) for the word-polarity head of `ernie-pretrain`.
"""

from ernie_zoo.text.lexicon import EntityLexicon
from ernie_zoo.text.segment import ENTITY_POS_TAGS, Segmenter

from .collator import KnowledgeMaskingCollator
from .prepare import (
    COLUMNS,
    SENTIMENT_COLUMNS,
    PrepareStats,
    load_prepared,
    prepare_dataset,
    prepare_dataset_with_stats,
    read_documents,
    save_prepared,
    split_long_text,
)
from .schedule import STRATEGIES, MaskingSchedule, MaskingStage
from .sentiment import SentimentWords

__all__ = [
    "COLUMNS",
    "ENTITY_POS_TAGS",
    "EntityLexicon",
    "KnowledgeMaskingCollator",
    "MaskingSchedule",
    "MaskingStage",
    "PrepareStats",
    "SENTIMENT_COLUMNS",
    "STRATEGIES",
    "Segmenter",
    "SentimentWords",
    "load_prepared",
    "prepare_dataset",
    "prepare_dataset_with_stats",
    "read_documents",
    "save_prepared",
    "split_long_text",
]

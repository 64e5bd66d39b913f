"""Knowledge masking: matcher, segmenter, schedule and the collator's sampling guarantees."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch

from ernie_zoo.masking import (
    EntityLexicon,
    KnowledgeMaskingCollator,
    MaskingSchedule,
    MaskingStage,
    Segmenter,
    prepare_dataset,
)
from ernie_zoo.text.lexicon import AhoCorasick

ENTITIES = ["新华社", "国务院", "北京大学", "中国人民银行", "联合国", "长城", "长江", "重庆", "上海浦东新区"]


@pytest.fixture(scope="module")
def prepared(tiny_tokenizer, zh_sentences):
    return prepare_dataset(
        zh_sentences, tiny_tokenizer, max_seq_len=64, lexicon=EntityLexicon(ENTITIES), show_progress=False
    )


@pytest.fixture(scope="module")
def examples(prepared):
    return [prepared[i] for i in range(len(prepared))]


def _batches(collator, examples, steps, batch_size=25, start=0):
    for step in range(start, start + steps):
        collator.set_step(step)
        rows = [examples[(step * batch_size + i) % len(examples)] for i in range(batch_size)]
        yield rows, collator(rows)


def _pad(rows, key, T, fill):
    out = np.full((len(rows), T), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r[key])] = r[key]
    return out


# ---------------------------------------------------------------------------------------------- matcher
def _brute_leftmost_longest(text, patterns):
    spans, i = [], 0
    while i < len(text):
        hits = [p for p in patterns if p and text.startswith(p, i)]
        if hits:
            n = max(map(len, hits))
            spans.append((i, i + n))
            i += n
        else:
            i += 1
    return spans


def test_aho_corasick_matches_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        alphabet = "abc北京"
        patterns = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 8))
        }
        text = "".join(rng.choice(alphabet + "x") for _ in range(rng.randint(0, 40)))
        ac = AhoCorasick(patterns)
        assert ac.find_longest(text) == _brute_leftmost_longest(text, patterns), (patterns, text)
        every = sorted(ac.iter_matches(text))
        expected = sorted(
            (i, i + len(p)) for p in patterns for i in range(len(text)) if text.startswith(p, i)
        )
        assert every == expected


def test_entity_lexicon(tmp_path):
    lex = EntityLexicon(["北京", "北京大学", "大学生", "清华大学"])
    assert lex.find("北京大学生在清华大学") == [(0, 4), (6, 10)]
    path = tmp_path / "lex.txt"
    path.write_text("# comment\n北京大学\tORG\n\n北京 LOC\n", encoding="utf-8")
    typed = EntityLexicon.load(path)
    assert len(typed) == 2 and "北京" in typed
    assert typed.find_typed("我在北京大学和北京") == [(2, 6, "ORG"), (7, 9, "LOC")]
    assert pickle.loads(pickle.dumps(typed)).find("北京大学") == [(0, 4)]
    assert EntityLexicon(["北京", "长"], min_length=2).find("长北京") == [(1, 3)]
    with pytest.raises(TypeError):
        EntityLexicon("北京")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        EntityLexicon.load(empty)


# ---------------------------------------------------------------------------------------------- segmenter
def test_segmenter_spans_cover_text_and_user_dict(zh_sentences):
    seg = Segmenter()
    for text in zh_sentences:
        spans = seg.spans(text)
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert "云计算平台" not in seg.cut("他在云计算平台上班")
    custom = Segmenter(user_dict=["云计算平台 nz"])
    assert "云计算平台" in custom.cut("他在云计算平台上班")
    assert (2, 7) in custom.pos_entity_spans("他在云计算平台上班")
    # picklable (datasets.map with num_proc > 1), and the rebuilt backend keeps the user dictionary
    clone = pickle.loads(pickle.dumps(custom))
    assert clone.spans("他在云计算平台上班") == custom.spans("他在云计算平台上班")
    assert seg.pos_entity_spans("李克强在北京会见外宾") == [(0, 3), (4, 6)]


def test_segmenter_jieba_fallback():
    seg = Segmenter(backend="jieba", user_dict=["云计算平台"])
    text = "他在云计算平台上班"
    assert "云计算平台" in seg.cut(text)
    spans = seg.spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert (0, 3) in seg.pos_entity_spans("李克强在北京会见外宾")
    with pytest.raises(ValueError, match="backend"):
        Segmenter(backend="thulac")


# ---------------------------------------------------------------------------------------------- schedule
def test_schedule_switches_at_the_right_step():
    schedule = MaskingSchedule(
        [MaskingStage("basic", 1000), MaskingStage("phrase", 3000), MaskingStage("entity")]
    )
    assert [schedule.strategy_at(s) for s in (0, 999, 1000, 2999, 3000, 10**9)] == [
        "char",
        "char",
        "phrase",
        "phrase",
        "entity",
        "entity",
    ]
    config = [
        {"strategy": "char", "until_step": 10},
        {"strategy": {"phrase": 1, "entity": 3}, "until_step": None},
    ]
    s2 = MaskingSchedule.from_config(config)
    assert s2.strategy_at(10) == {"phrase": 0.25, "entity": 0.75}
    assert MaskingSchedule.from_config(s2.to_config()) == s2
    assert MaskingSchedule.from_config({"stages": config}) == s2
    assert MaskingStage({"phrase": 2.0, "char": 0}).strategy == "phrase"
    for bad in (
        [{"strategy": "char", "until_step": 10}, {"strategy": "phrase", "until_step": 5}],
        [{"strategy": "char"}, {"strategy": "phrase"}],
        [{"strategy": "words"}],
        [{"strategy": "char", "until": 3}],
        [{"strategy": {"char": -1}}],
        [],
    ):
        with pytest.raises((ValueError, TypeError)):
            MaskingSchedule.from_config(bad)


def test_collator_follows_schedule(tiny_tokenizer, examples):
    schedule = MaskingSchedule([MaskingStage("char", 5), MaskingStage("phrase", None)])
    collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule=schedule, seed=1)
    split_by_stage = {"char": 0, "phrase": 0}
    for rows, batch in _batches(collator, examples, 10):
        stage = "char" if collator.step < 5 else "phrase"
        assert collator.strategy() == stage
        split_by_stage[stage] += _count_split_units(rows, batch["labels"].numpy(), "phrase_ids")
    assert split_by_stage["phrase"] == 0
    assert split_by_stage["char"] > 0  # character masking cuts words


# ---------------------------------------------------------------------------------------------- collator
def _count_split_units(rows, labels, key):
    """Units (of `key`) with some but not all tokens masked."""
    masked = labels != -100
    split = 0
    for i, r in enumerate(rows):
        ids = np.asarray(r[key])
        for u in np.unique(ids[ids >= 0]):
            m = masked[i, : len(ids)][ids == u]
            split += bool(m.any() and not m.all())
    return split


@pytest.mark.parametrize("strategy", ["char", "phrase", "entity"])
def test_masking_ratio(tiny_tokenizer, examples, strategy):
    collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule=strategy, seed=0)
    masked = maskable = 0
    for _, batch in _batches(collator, examples, 160):
        masked += int((batch["labels"] != -100).sum())
        maskable += int(batch["attention_mask"].sum()) - 2 * batch["labels"].shape[0]
    ratio = masked / maskable
    assert abs(ratio - 0.15) < 0.01, ratio


@pytest.mark.parametrize("max_ngram", [1, 3])
def test_units_are_never_split(tiny_tokenizer, examples, max_ngram):
    for strategy in ("phrase", "entity"):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule=strategy, max_ngram=max_ngram, seed=3)
        for rows, batch in _batches(collator, examples, 30):
            labels = batch["labels"].numpy()
            assert _count_split_units(rows, labels, "entity_ids") == 0
            if strategy == "phrase":
                assert _count_split_units(rows, labels, "phrase_ids") == 0
            else:  # the phrase units outside entities are whole too
                for i, r in enumerate(rows):
                    ent = np.asarray(r["entity_ids"])
                    outside = {"phrase_ids": np.where(ent >= 0, -1, np.asarray(r["phrase_ids"]))}
                    assert _count_split_units([outside], labels[i : i + 1], "phrase_ids") == 0


def test_ngram_spans_cover_consecutive_units(tiny_tokenizer, examples):
    def longest_masked_run_of_units(rows, labels):
        best = 0
        for i, r in enumerate(rows):
            phrase = np.asarray(r["phrase_ids"])
            m = labels[i, : len(phrase)] != -100
            units = set()
            for t in range(len(phrase)):
                if m[t]:
                    units.add(phrase[t])
                    best = max(best, len(units))
                else:
                    units = set()
        return best

    runs = {}
    for n in (1, 3):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule="phrase", max_ngram=n, seed=0)
        runs[n] = [
            longest_masked_run_of_units(rows, b["labels"].numpy())
            for rows, b in _batches(collator, examples, 40)
        ]
    assert max(runs[3]) >= 3
    assert np.mean(runs[3]) > np.mean(runs[1])


def test_lexicon_entities_masked_whole_and_first(tiny_tokenizer, examples):
    def entity_hits(strategy):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule=strategy, seed=5)
        hits = total = 0
        for rows, batch in _batches(collator, examples, 40):
            labels = batch["labels"].numpy()
            for i, r in enumerate(rows):
                ent = np.asarray(r["entity_ids"])
                for u in np.unique(ent[ent >= 0]):
                    m = labels[i, : len(ent)][ent == u] != -100
                    assert m.all() or not m.any()
                    hits += bool(m.all())
                    total += 1
        return hits / total

    entity_rate, phrase_rate = entity_hits("entity"), entity_hits("phrase")
    assert entity_rate > 0.6  # entities are picked first at the entity level
    assert entity_rate > 3 * phrase_rate


def test_lexicon_entity_tokens_match_the_entity(tiny_tokenizer, examples):
    found = set()
    for r in examples:
        ent = np.asarray(r["entity_ids"])
        for u in np.unique(ent[ent >= 0]):
            tokens = tiny_tokenizer.convert_ids_to_tokens(np.asarray(r["input_ids"])[ent == u].tolist())
            word = "".join(tokens)
            assert word in ENTITIES
            found.add(word)
    assert found >= {"新华社", "国务院", "北京大学", "中国人民银行"}


def test_labels_specials_padding_and_pinyin(tiny_tokenizer, examples):
    collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule="phrase", seed=0, pad_to_multiple_of=8)
    table = tiny_tokenizer.char_feature_tables()["default_pinyin_ids"].numpy()
    counts = np.zeros(3)
    special = set(tiny_tokenizer.all_special_ids)
    for rows, batch in _batches(collator, examples, 160):
        B, T = batch["input_ids"].shape
        assert T % 8 == 0 and all(v.dtype == torch.long and v.shape == (B, T) for v in batch.values())
        orig = _pad(rows, "input_ids", T, tiny_tokenizer.pad_token_id)
        orig_pinyin = _pad(rows, "pinyin_ids", T, 0)
        ids, labels, pinyin = batch["input_ids"].numpy(), batch["labels"].numpy(), batch["pinyin_ids"].numpy()
        attn = batch["attention_mask"].numpy()
        masked = labels != -100
        assert (attn == (np.arange(T) < np.array([len(r["input_ids"]) for r in rows])[:, None])).all()
        assert np.array_equal(labels[masked], orig[masked])
        assert not np.isin(orig[masked], list(special)).any() and not masked[attn == 0].any()
        assert (masked.sum(1) >= 1).all()
        assert np.array_equal(ids[~masked], orig[~masked]) and np.array_equal(
            pinyin[~masked], orig_pinyin[~masked]
        )
        is_mask = masked & (ids == tiny_tokenizer.mask_token_id)
        is_kept = masked & (ids == orig)
        is_random = masked & ~is_mask & ~is_kept
        assert (pinyin[is_mask] == 0).all()
        assert np.array_equal(pinyin[is_random], table[ids[is_random]])
        assert np.array_equal(pinyin[is_kept], orig_pinyin[is_kept])
        assert not np.isin(ids[is_random], list(special)).any()
        counts += [is_mask.sum(), is_random.sum(), is_kept.sum()]
    fractions = counts / counts.sum()
    assert counts.sum() > 10000
    # a random replacement equal to the original counts as kept (probability 1/vocab): within tolerance
    np.testing.assert_allclose(fractions, [0.8, 0.1, 0.1], atol=0.02)


def test_deterministic_and_resumable(tiny_tokenizer, examples):
    schedule = MaskingSchedule([MaskingStage("char", 2), MaskingStage({"phrase": 0.5, "entity": 0.5})])

    def collate(seed, steps, start=0):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule, max_ngram=2, seed=seed)
        return [b for _, b in _batches(collator, examples, steps, start=start)]

    run, again, resumed, other_seed = collate(7, 6), collate(7, 6), collate(7, 3, start=3), collate(8, 6)
    for a, b in zip(run, again):
        assert all(torch.equal(a[k], b[k]) for k in a)
    for a, b in zip(run[3:], resumed):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a["labels"], b["labels"]) for a, b in zip(run, other_seed))
    # two calls within one step (gradient accumulation) give different masks
    collator = KnowledgeMaskingCollator(tiny_tokenizer, "phrase", seed=0)
    collator.set_step(4)
    first, second = collator(examples), collator(examples)
    assert not torch.equal(first["labels"], second["labels"])


def test_mixture_picks_strategies_per_row(tiny_tokenizer):
    collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule={"char": 0.2, "entity": 0.8}, seed=0)
    codes = collator._row_strategies(20000)
    assert abs((codes == 0).mean() - 0.2) < 0.015 and abs((codes == 2).mean() - 0.8) < 0.015


def test_short_and_plain_examples(tiny_tokenizer):
    collator = KnowledgeMaskingCollator(tiny_tokenizer, "entity", seed=0)
    enc = tiny_tokenizer(["好", "长城", "[UNK]"])
    rows = [{k: enc[k][i] for k in ("input_ids", "token_type_ids", "pinyin_ids")} for i in range(3)]
    for step in range(20):
        collator.set_step(step)
        batch = collator(rows)
        masked = (batch["labels"] != -100).sum(1).tolist()
        assert masked[0] == 1 and masked[1] >= 1 and masked[2] == 0  # [UNK] is never masked
    with pytest.raises(ValueError, match="vocabulary"):
        collator([{"input_ids": [2, 10**6, 3]}])
    with pytest.raises(ValueError):
        collator([])
    with pytest.raises(ValueError):
        KnowledgeMaskingCollator(tiny_tokenizer, mlm_probability=0)
    with pytest.raises(ValueError):
        collator.set_step(-1)

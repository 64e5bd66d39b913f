"""SKEP's objectives in `ernie-pretrain` (issue #19): the sentiment masking unit (whole sentiment words first,
within the 15% budget, never beyond it, reproducible and resume-exact) and the word-polarity head (its loss by
hand, save/load, a tiny recipe end to end, exact resume after SIGKILL)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ernie_zoo.masking import (
    KnowledgeMaskingCollator,
    MaskingSchedule,
    MaskingStage,
    Segmenter,
    SentimentWords,
    prepare_dataset,
)
from ernie_zoo.masking.collator import _SENTIMENT
from ernie_zoo.recipe_cli import load_recipe
from ernie_zoo.training.logging_utils import read_metrics
from ernie_zoo.training.recipe import PretrainRecipe

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "pretrain" / "tiny-cpu-sentiment.yaml"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"

POSITIVE = "好 非常好 棒 好吃 不错 丰富 推荐 值得 合理 受欢迎 重要 很好 喜欢 满意 克制 友好".split()
NEGATIVE = "失望 太差 差 慢 破 太小 很差 睡不着 迟到 风险 争端 倒塌".split()
WORDS = {**dict.fromkeys(POSITIVE, 1), **dict.fromkeys(NEGATIVE, -1)}


def write_lexicon(path: Path) -> Path:
    """A tiny lexicon in the format `python -m ernie_zoo.data.sentiment_lexicon` writes (negators and degree
    adverbs included: they have no polarity and are not sentiment units)."""
    rows = ["# a tiny test lexicon", "# columns: word<TAB>kind<TAB>polarity<TAB>strength<TAB>sources"]
    rows += [f"{w}\tsentiment\t{'+1' if p > 0 else '-1'}\t0.5\ttest" for w, p in WORDS.items()]
    rows += ["不\tnegator\t0\t-1\ttest", "非常\tdegree\t0\t1.75\ttest", "很\tdegree\t0\t1.5\ttest"]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lexicon_file(tmp_path_factory) -> Path:
    return write_lexicon(tmp_path_factory.mktemp("lexicon") / "sentiment.tsv")


@pytest.fixture(scope="module")
def prepared(tiny_tokenizer, zh_sentences, lexicon_file):
    return prepare_dataset(
        zh_sentences,
        tiny_tokenizer,
        max_seq_len=64,
        sentiment_lexicon=SentimentWords.from_file(lexicon_file),
        show_progress=False,
    )


@pytest.fixture(scope="module")
def examples(prepared):
    return [prepared[i] for i in range(len(prepared))]


def _batches(collator, examples, steps, batch_size=25, start=0):
    for step in range(start, start + steps):
        collator.set_step(step)
        rows = [examples[(step * batch_size + i) % len(examples)] for i in range(batch_size)]
        yield rows, collator(rows)


def _units(row, key):
    ids = np.asarray(row[key])
    return {int(u): np.flatnonzero(ids == u) for u in np.unique(ids[ids >= 0])}


# -------------------------------------------------------------------------------------------- lexicon
def test_lexicon_file_and_whole_word_matching(lexicon_file):
    words = SentimentWords.from_file(lexicon_file)
    assert len(words) == len(WORDS) and "不" not in words and "很" not in words  # negators, degrees left out
    assert words.polarity["失望"] == -1 and words.polarity["好"] == 1
    text = "他好像很失望，但菜很好吃"
    boundaries = {s for s, _ in Segmenter().spans(text)} | {len(text)}
    # 好 inside 好像 and inside 好吃 is not a sentiment word of its own; 好吃 is
    assert [(text[s:e], p) for s, e, p in words.find(text, boundaries)] == [("失望", -1), ("好吃", 1)]
    # without boundaries: 好 of 好像, and 很好 (很 | 好吃 in the segmentation) instead of 好吃
    assert [text[s:e] for s, e, _ in words.find(text)] == ["好", "失望", "很好"]
    import pickle

    assert pickle.loads(pickle.dumps(words)).fingerprint() == words.fingerprint()
    with pytest.raises(ValueError, match="polarity"):
        SentimentWords({"好": 0})
    empty = lexicon_file.parent / "empty.tsv"
    empty.write_text("不\tnegator\t0\t-1\ttest\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentiment words"):
        SentimentWords.from_file(empty)


def test_prepared_sentiment_units_are_whole_words(tiny_tokenizer, examples, prepared):
    assert {"sentiment_ids", "sentiment_polarity"} <= set(prepared.column_names)
    found = set()
    for row in examples:
        polarity = np.asarray(row["sentiment_polarity"])
        phrase = np.asarray(row["phrase_ids"])
        sentiment = np.asarray(row["sentiment_ids"])
        assert ((sentiment >= 0) == (polarity != 0)).all()
        for idx in _units(row, "sentiment_ids").values():
            word = "".join(tiny_tokenizer.convert_ids_to_tokens(np.asarray(row["input_ids"])[idx].tolist()))
            assert word in WORDS and (polarity[idx] == WORDS[word]).all(), word
            # whole words: every phrase unit it touches lies inside it
            for u in np.unique(phrase[idx]):
                assert set(np.flatnonzero(phrase == u)) <= set(idx), word
            found.add(word)
    assert {"非常好", "失望", "太差", "很好", "睡不着", "迟到"} <= found  # one word, or several whole words


# ------------------------------------------------------------------------------------------- collator
def test_select_within_is_first_fit_and_never_exceeds_the_budget():
    rng = np.random.default_rng(0)
    for _ in range(300):
        B = int(rng.integers(1, 6))
        counts = rng.integers(0, 12, size=B)
        rows = np.repeat(np.arange(B), counts)
        lengths = rng.integers(1, 5, size=rows.size)
        budget = rng.integers(0, 12, size=B)
        take = KnowledgeMaskingCollator._select_within(rows, lengths, budget, max_rounds=64)
        expected = np.zeros(rows.size, dtype=bool)  # first fit, one chunk at a time
        room = budget.copy()
        for i, (r, n) in enumerate(zip(rows, lengths)):
            if n <= room[r]:
                expected[i] = True
                room[r] -= n
        assert np.array_equal(take, expected)
        few = KnowledgeMaskingCollator._select_within(rows, lengths, budget, max_rounds=2)
        assert (np.bincount(rows[few], weights=lengths[few], minlength=B) <= budget).all()
        assert not (few & ~take).any()  # fewer rounds: a prefix of the same choices


@pytest.mark.parametrize("max_ngram", [1, 3])
def test_sentiment_unit_never_exceeds_the_budget(tiny_tokenizer, examples, max_ngram):
    """Per row, masked tokens <= the row's budget max(1, floor(n * 0.15 + U(0, 1))), n its maskable tokens. With
    single units the budgets are replayed exactly (U is the first draw of the step's generator); with n-gram
    spans (drawn first) the bound max(1, ceil(n * 0.15)) is checked."""
    special = np.array(sorted(tiny_tokenizer.all_special_ids))
    collator = KnowledgeMaskingCollator(tiny_tokenizer, "sentiment", max_ngram=max_ngram, seed=11)
    masked = maskable = 0
    for step, (rows, batch) in enumerate(_batches(collator, examples, 60)):
        counts = (batch["labels"].numpy() != -100).sum(1)
        n = np.array(
            [((np.asarray(r["phrase_ids"]) >= 0) & ~np.isin(r["input_ids"], special)).sum() for r in rows]
        )
        assert (counts <= np.maximum(1, np.ceil(n * 0.15))).all()
        if max_ngram == 1:
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([11, step])))
            budget = np.minimum(np.maximum(np.floor(n * 0.15 + rng.random(len(rows))).astype(int), 1), n)
            assert (counts <= budget).all(), (counts, budget)
        masked += counts.sum()
        maskable += n.sum()
    ratio = masked / maskable
    assert 0.11 < ratio <= 0.15, ratio  # first fit fills most of the budget, never beyond it


def test_sentiment_words_are_masked_whole_and_first(tiny_tokenizer, examples):
    def sentiment_hits(schedule):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule, seed=5)
        hits = total = 0
        for rows, batch in _batches(collator, examples, 40):
            labels = batch["labels"].numpy()
            for i, row in enumerate(rows):
                m = labels[i, : len(row["input_ids"])] != -100
                sentiment = np.asarray(row["sentiment_ids"])
                unmasked_lengths = []
                for idx in _units(row, "sentiment_ids").values():
                    if schedule == "sentiment":  # whole words (phrase units may cut 非常好 into 非常 | 好)
                        assert m[idx].all() or not m[idx].any()
                    hits += bool(m[idx].all())
                    total += 1
                    if not m[idx].any():
                        unmasked_lengths.append(idx.size)
                if schedule == "sentiment":
                    # sentiment words are taken first: a word left out did not fit in the room left by
                    # the words taken before it, and the phrase units after it fill less than its length
                    # (phrase units outside sentiment words stay whole too)
                    others = m & (sentiment < 0)
                    if unmasked_lengths:
                        assert others.sum() < min(unmasked_lengths)
                    phrase = np.where(sentiment >= 0, -1, np.asarray(row["phrase_ids"]))
                    for u in np.unique(phrase[phrase >= 0]):
                        mu = m[phrase == u]
                        assert mu.all() or not mu.any()
        return hits / total

    sentiment_rate, phrase_rate = sentiment_hits("sentiment"), sentiment_hits("phrase")
    assert sentiment_rate > 0.6, sentiment_rate
    assert sentiment_rate > 3 * phrase_rate, (sentiment_rate, phrase_rate)


def test_polarity_labels(tiny_tokenizer, examples):
    schedule = MaskingSchedule([MaskingStage("phrase", 3), MaskingStage({"phrase": 0.5, "sentiment": 0.5})])
    collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule, seed=2)
    counts = np.zeros(3)  # [MASK], random, kept among polarity-labelled tokens
    n_labelled = {}
    for rows, batch in _batches(collator, examples, 40):
        labels, polarity = batch["labels"].numpy(), batch["polarity_labels"].numpy()
        assert polarity.shape == labels.shape and batch["polarity_labels"].dtype == torch.long
        labelled = polarity != -100
        assert not (labelled & (labels == -100)).any()  # only at masked positions
        assert set(np.unique(polarity[labelled])) <= {0, 1}
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            sentiment, sign = np.asarray(row["sentiment_ids"]), np.asarray(row["sentiment_polarity"])
            assert (sentiment[labelled[i, :n]] >= 0).all()
            assert np.array_equal(polarity[i, :n][labelled[i, :n]], (sign[labelled[i, :n]] > 0).astype(int))
            # a sentiment word is labelled whole or not at all
            for idx in _units(row, "sentiment_ids").values():
                assert labelled[i, idx].all() or not labelled[i, idx].any()
        ids = batch["input_ids"].numpy()
        is_mask = labelled & (ids == tiny_tokenizer.mask_token_id)
        is_kept = labelled & (ids == labels)
        counts += [is_mask.sum(), (labelled & ~is_mask & ~is_kept).sum(), is_kept.sum()]
        n_labelled[collator.step] = int(labelled.sum())
    assert all(v == 0 for k, v in n_labelled.items() if k < 3)  # phrase stage: no polarity targets
    assert sum(n_labelled.values()) > 300
    fractions = counts / counts.sum()
    np.testing.assert_allclose(fractions, [0.8, 0.1, 0.1], atol=0.05)  # 80/10/10, decided per word
    # no sentiment stage in the schedule: no polarity_labels key at all (batches stay what they were)
    assert "polarity_labels" not in KnowledgeMaskingCollator(tiny_tokenizer, "phrase")(examples[:4])


def test_other_strategies_are_unchanged(tiny_tokenizer, examples, zh_sentences):
    """Stages that are not sentiment mask exactly as before: same masks with or without the sentiment columns
    and with or without a later sentiment stage in the schedule."""
    plain = prepare_dataset(zh_sentences, tiny_tokenizer, max_seq_len=64, show_progress=False)
    plain_rows = [plain[i] for i in range(len(plain))]
    with_stage = KnowledgeMaskingCollator(
        tiny_tokenizer, [{"strategy": "char", "until_step": 4}, {"strategy": "sentiment"}], seed=3
    )
    without = KnowledgeMaskingCollator(tiny_tokenizer, "char", seed=3)
    for (_, a), (_, b) in zip(_batches(with_stage, examples, 4), _batches(without, plain_rows, 4)):
        assert all(torch.equal(a[k], b[k]) for k in b)
    phrase = KnowledgeMaskingCollator(tiny_tokenizer, {"phrase": 0.5, "entity": 0.5}, max_ngram=2, seed=4)
    again = KnowledgeMaskingCollator(tiny_tokenizer, {"phrase": 0.5, "entity": 0.5}, max_ngram=2, seed=4)
    for (_, a), (_, b) in zip(_batches(phrase, examples, 4), _batches(again, plain_rows, 4)):
        assert all(torch.equal(a[k], b[k]) for k in b)


def test_sentiment_masks_are_reproducible_and_resumable(tiny_tokenizer, examples):
    schedule = MaskingSchedule(
        [
            MaskingStage("char", 2),
            MaskingStage("sentiment", 4),
            MaskingStage({"phrase": 0.3, "sentiment": 0.7}),
        ]
    )

    def collate(seed, steps, start=0, max_ngram=2):
        collator = KnowledgeMaskingCollator(tiny_tokenizer, schedule, max_ngram=max_ngram, seed=seed)
        return [b for _, b in _batches(collator, examples, steps, start=start)]

    run, again, resumed, other_seed = collate(7, 8), collate(7, 8), collate(7, 4, start=4), collate(8, 8)
    for a, b in zip(run, again):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for a, b in zip(run[4:], resumed):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a["labels"], b["labels"]) for a, b in zip(run[2:], other_seed[2:]))
    # mixture rows: the sentiment code is drawn per row
    collator = KnowledgeMaskingCollator(tiny_tokenizer, {"phrase": 0.3, "sentiment": 0.7}, seed=0)
    assert abs((collator._row_strategies(20000) == _SENTIMENT).mean() - 0.7) < 0.015


def test_examples_without_sentiment_columns(tiny_tokenizer, zh_sentences, caplog):
    plain = prepare_dataset(zh_sentences[:6], tiny_tokenizer, max_seq_len=64, show_progress=False)
    collator = KnowledgeMaskingCollator(tiny_tokenizer, "sentiment", seed=0)
    with caplog.at_level("WARNING", logger="ernie_zoo.masking.collator"):
        batch = collator([plain[i] for i in range(6)])
    assert "sentiment_ids" in caplog.text
    assert (batch["polarity_labels"] == -100).all() and (batch["labels"] != -100).any()


# ------------------------------------------------------------------------------------- polarity head
def test_polarity_loss_by_hand_on_a_tiny_case():
    """_polarity_loss on 3 hand-made hidden states, a 2-class head with fixed weights: equals the
    cross-entropy written out with exp/log, and F.cross_entropy on the selected rows."""
    from ernie_zoo.training.mlm import _polarity_loss

    head = torch.nn.Linear(2, 2)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 2.0]]))
        head.bias.copy_(torch.tensor([0.0, -0.5]))
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]])
    targets = torch.tensor([1, -100, 0])
    details = {}
    loss = _polarity_loss(head, hidden, targets, details)
    # row 0: logits (1, 0.5 - 0.5 = 0), target 1 -> -log(e^0 / (e^1 + e^0))
    # row 2: logits (2 - 1 = 1, 1 + 2 - 0.5 = 2.5), target 0 -> -log(e^1 / (e^1 + e^2.5))
    by_hand = (math.log(math.e + 1) + math.log(math.e + math.exp(2.5)) - 1.0) / 2
    assert abs(float(loss.detach()) - by_hand) < 1e-6
    rows = torch.tensor([0, 2])
    torch.testing.assert_close(loss, F.cross_entropy(hidden[rows] @ head.weight.T + head.bias, targets[rows]))
    assert details == {"polarity_loss": pytest.approx(by_hand), "polarity_n": 2, "polarity_correct": 0}
    none = _polarity_loss(head, hidden, torch.full((3,), -100), None)
    assert float(none.detach()) == 0.0
    none.backward()
    assert head.weight.grad is not None and (head.weight.grad == 0).all()  # the head still ran


@pytest.mark.parametrize("sparse", [False, True])
def test_masked_lm_loss_adds_the_weighted_polarity_loss(tiny_tokenizer, make_config, examples, sparse):
    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.training.mlm import masked_lm_loss

    collator = KnowledgeMaskingCollator(tiny_tokenizer, "sentiment", seed=1)
    batch = collator(examples[:12])
    labelled = batch["polarity_labels"] != -100
    assert labelled.sum() >= 4
    torch.manual_seed(0)
    model = ErnieZooForMaskedLM(make_config(num_word_polarities=2))
    model.load_char_tables(tiny_tokenizer)
    model.eval()
    with torch.no_grad():  # fixed, non-trivial head weights
        model.word_polarity.weight.copy_(torch.linspace(-1, 1, 64).view(2, 32))
        model.word_polarity.bias.copy_(torch.tensor([0.3, -0.2]))
    hidden = model.ernie(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        pinyin_ids=batch["pinyin_ids"],
    ).last_hidden_state
    masked = batch["labels"] != -100
    mlm = F.cross_entropy(model.cls(hidden[masked]), batch["labels"][masked])
    logits = hidden[labelled] @ model.word_polarity.weight.T + model.word_polarity.bias  # (P, 2) by hand
    targets = batch["polarity_labels"][labelled]
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    polarity = -log_p[torch.arange(targets.numel()), targets].mean()
    torch.testing.assert_close(polarity, F.cross_entropy(logits, targets))
    details = {}
    loss, n, correct = masked_lm_loss(model, batch, sparse, polarity_weight=0.5, details=details)
    torch.testing.assert_close(loss, mlm + 0.5 * polarity, rtol=0, atol=1e-5)
    assert n == int(masked.sum()) and details["polarity_n"] == int(labelled.sum())
    assert details["mlm_loss"] == pytest.approx(float(mlm.detach()), abs=1e-5)
    assert details["polarity_loss"] == pytest.approx(float(polarity.detach()), abs=1e-5)
    # weight 0, no labels, or no head: the masked-LM loss alone
    for w, b, m in (
        (0.0, batch, model),
        (1.0, {k: v for k, v in batch.items() if k != "polarity_labels"}, model),
    ):
        torch.testing.assert_close(masked_lm_loss(m, b, sparse, polarity_weight=w)[0], mlm, rtol=0, atol=1e-5)
    loss.backward()
    assert model.word_polarity.weight.grad.abs().sum() > 0


def test_polarity_head_saves_loads_and_stays_out_of_other_heads(tmp_path, make_config):
    from safetensors.torch import load_file

    from ernie_zoo import ErnieZooForMaskedLM, ErnieZooForSequenceClassification
    from ernie_zoo.training.build import init_weights_from, save_model_weights

    torch.manual_seed(0)
    model = ErnieZooForMaskedLM(make_config(num_word_polarities=2))
    save_model_weights(model, tmp_path / "skep")
    assert "word_polarity.weight" in load_file(str(tmp_path / "skep" / "model.safetensors"))
    loaded = ErnieZooForMaskedLM.from_pretrained(str(tmp_path / "skep"))
    assert torch.equal(loaded.word_polarity.weight, model.word_polarity.weight)
    classifier = ErnieZooForSequenceClassification.from_pretrained(str(tmp_path / "skep"), num_labels=2)
    assert not hasattr(classifier, "word_polarity")
    own = dict(model.ernie.named_parameters())
    assert all(torch.equal(p, own[k]) for k, p in classifier.ernie.named_parameters() if k in own)
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    assert torch.isfinite(classifier(input_ids=ids).logits).all()
    # continued pretraining: a head-less checkpoint into a model with the head (fresh head) and back
    plain = ErnieZooForMaskedLM(make_config())
    save_model_weights(plain, tmp_path / "plain")
    fresh = ErnieZooForMaskedLM(make_config(num_word_polarities=2))
    init_weights_from(fresh, str(tmp_path / "plain"))
    assert torch.equal(
        fresh.ernie.embeddings.word_embeddings.weight, plain.ernie.embeddings.word_embeddings.weight
    )
    init_weights_from(plain, str(tmp_path / "skep"))  # the saved head is dropped, the encoder copied
    assert torch.equal(
        plain.ernie.embeddings.word_embeddings.weight, model.ernie.embeddings.word_embeddings.weight
    )


# ---------------------------------------------------------------------------------------- pretraining
def _overrides(output_dir: Path, lexicon: Path, **extra) -> dict:
    overrides = {
        "output_dir": str(output_dir),
        "data.files": [str(SENTENCES)],
        "data.sentiment_lexicon": str(lexicon),
        "num_threads": 1,
        "logging.progress_bar": False,
        "logging.tensorboard": False,
    }
    overrides.update(extra)
    return overrides


def _run(output_dir: Path, lexicon: Path, **extra) -> dict:
    from ernie_zoo.training.pretrain import pretrain

    return pretrain(load_recipe(RECIPE, _overrides(output_dir, lexicon, **extra), cls=PretrainRecipe))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("tokenizer")
    tiny_tokenizer.save_pretrained(str(path))
    return path


def test_tiny_sentiment_recipe_runs_end_to_end(tmp_path, lexicon_file, tokenizer_dir):
    from safetensors.torch import load_file

    from ernie_zoo import ErnieZooForMaskedLM

    recipe = load_recipe(RECIPE, _overrides(tmp_path, lexicon_file), cls=PretrainRecipe)
    assert recipe.masking.uses_sentiment() and recipe.masking.polarity_weight == 1.0
    summary = _run(
        tmp_path / "run",
        lexicon_file,
        **{
            "max_steps": 5,
            "tokenizer.path": str(tokenizer_dir),
            "masking.schedule": [{"strategy": "char", "until_step": 2}, {"strategy": "sentiment"}],
            "logging.interval": 1,
            "eval.interval": 5,
            "checkpoint.interval": 5,
        },
    )
    assert summary["steps"] == 5 and math.isfinite(summary["final_loss"])
    assert summary["data"]["sentiment_units"] > 0
    records = {}
    for r in read_metrics(tmp_path / "run" / "metrics.jsonl"):  # train and eval records of a step merged
        records.setdefault(r["step"], {}).update(r)
    assert all("train/mlm_loss" in records[s] for s in range(1, 6))
    assert all("train/polarity_loss" not in records[s] for s in (1, 2))  # char stage: no polarity targets
    for s in (3, 4, 5):  # sentiment stage: loss = mlm + 1.0 x polarity, per step (grad_accum_steps 1)
        r = records[s]
        assert 0 <= r["train/polarity_accuracy"] <= 1 and r["train/polarity_loss"] > 0
        assert r["train/loss"] == pytest.approx(r["train/mlm_loss"] + r["train/polarity_loss"], rel=1e-5)
    assert "eval/loss" in records[5] and "eval/polarity_loss" not in records[5]
    checkpoint = tmp_path / "run" / "checkpoint-5"
    assert {"word_polarity.weight", "word_polarity.bias"} <= set(
        load_file(str(checkpoint / "model.safetensors"))
    )
    assert json.loads((checkpoint / "config.json").read_text())["num_word_polarities"] == 2
    model = ErnieZooForMaskedLM.from_pretrained(str(checkpoint))
    assert model.word_polarity is not None and model.word_polarity.out_features == 2


def test_sentiment_stage_needs_a_lexicon(tmp_path, lexicon_file, tokenizer_dir):
    from ernie_zoo.masking import save_prepared

    with pytest.raises(ValueError, match="data.sentiment_lexicon"):
        load_recipe(
            RECIPE, _overrides(tmp_path, lexicon_file, **{"data.sentiment_lexicon": None}), cls=PretrainRecipe
        ).validate()
    with pytest.raises(ValueError, match="no such file"):
        _run(tmp_path / "a", tmp_path / "missing.tsv", max_steps=1)
    # a prepared dataset without the sentiment columns is refused before training
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    tok = ErnieZooTokenizerFast.from_pretrained(str(tokenizer_dir))
    texts = SENTENCES.read_text(encoding="utf-8").splitlines()
    save_prepared(prepare_dataset(texts, tok, max_seq_len=64, show_progress=False), None, tmp_path / "ds")
    with pytest.raises(ValueError, match="no sentiment_ids column"):
        _run(
            tmp_path / "b",
            lexicon_file,
            **{
                "max_steps": 1,
                "data.files": [],
                "data.dataset_dir": str(tmp_path / "ds"),
                "tokenizer.path": str(tokenizer_dir),
            },
        )


@pytest.mark.slow
def test_exact_resume_after_sigkill_with_the_sentiment_unit(tmp_path, lexicon_file, tokenizer_dir):
    """tests/test_pretrain.py's exact-resume check at a tiny scale with a sentiment stage and the polarity head:
    run A uninterrupted; run B SIGKILLs itself after step 5 (checkpoints at 2 and 4), resumes from checkpoint-4
    and finishes. Every logged number (polarity loss and accuracy included) and the final weights and optimizer
    state are bit-identical."""
    from safetensors.torch import load_file

    from ernie_zoo.training import checkpoint as ckpt
    from ernie_zoo.training.pretrain import KILL_ENV

    extra = {
        "max_steps": 6,
        "tokenizer.path": str(tokenizer_dir),
        "checkpoint.interval": 2,
        "checkpoint.keep_last": 5,
        "eval.interval": 3,
        "logging.interval": 1,
        "masking.schedule": [
            {"strategy": "char", "until_step": 2},
            {"strategy": {"phrase": 0.3, "sentiment": 0.7}, "until_step": None},
        ],
        "masking.max_ngram": 2,
        "grad_accum_steps": 2,
        "micro_batch_size": 4,
    }
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, lexicon_file, **extra)

    cmd = [sys.executable, "-m", "ernie_zoo.training.pretrain", str(RECIPE)]
    for key, value in _overrides(b, lexicon_file, **extra).items():
        cmd += [f"--{key}", json.dumps(value) if isinstance(value, list) else str(value)]
    env = {**os.environ, KILL_ENV: "5", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert [p.name for p in ckpt.list_checkpoints(b)] == ["checkpoint-2", "checkpoint-4"]

    summary = _run(b, lexicon_file, resume="latest", **extra)
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 6

    keys = (
        "step",
        "train/loss",
        "train/accuracy",
        "train/mlm_loss",
        "train/polarity_loss",
        "train/polarity_accuracy",
        "train/lr",
        "train/grad_norm",
        "train/tokens",
        "eval/loss",
        "eval/accuracy",
    )

    def history(run):  # everything but the timings
        return [{k: r.get(k) for k in keys} for r in read_metrics(run / "metrics.jsonl")]

    ha, hb = history(a), history(b)
    assert ha == hb
    assert sum("train/polarity_loss" in r for r in ha) >= 3
    for name in ("model.safetensors", "optimizer.safetensors"):
        wa, wb = load_file(str(a / "checkpoint-6" / name)), load_file(str(b / "checkpoint-6" / name))
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), name
    assert "word_polarity.weight" in load_file(str(a / "checkpoint-6" / "model.safetensors"))

"""Fused decoding for text correction (#22): the n-gram LM's prune/save/load, the word model, candidate gains and
the choice of changes, the n-gram corrector on the shared code, Taskflow with an LM shipped in the model
directory, and attaching an LM to a directory."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import sentences, tiny_config

from ernie_zoo.models.correction import (
    NGRAM_FILE,
    ErnieZooForSpellingCorrection,
    FusionWeights,
    candidate_gains,
    choose_corrections,
)
from ernie_zoo.models.ngram import CharNgramLM
from ernie_zoo.text.confusion import ConfusionSets
from ernie_zoo.text.words import WordUnigram

TEXTS = [
    "我们明天再见面吧。",
    "他非常高兴。",
    "我们再见。",
    "非常好，非常感谢。",
    "明天再说吧。",
] * 4 + ["他在家里看书。", "在家里很好。"] * 3


def _lm(order=3):
    return CharNgramLM(order=order).fit(TEXTS)


# ----------------------------------------------------------------------------- the n-gram LM


def test_lm_save_load_round_trip_is_exact(tmp_path):
    lm = _lm()
    lm.save(tmp_path / "lm.safetensors")
    again = CharNgramLM.load(tmp_path / "lm.safetensors")
    assert again.vocab == lm.vocab and again.order == lm.order and again.discounts == lm.discounts
    for text in ["我们明天在见面吧。", "他非长高兴", "没见过的字"]:
        assert np.array_equal(again.log_probs(text), lm.log_probs(text))
    with open(tmp_path / "bad.safetensors", "wb") as f:  # a safetensors file of something else
        from safetensors.numpy import save_file

        save_file({"x": np.zeros(2, dtype=np.float32)}, f.name)
    with pytest.raises(ValueError, match="not a CharNgramLM file"):
        CharNgramLM.load(tmp_path / "bad.safetensors")


def test_lm_saves_version_2_and_still_reads_version_1(tmp_path):
    from safetensors import safe_open

    # counts above 127 (two-byte varints)
    lm = CharNgramLM(order=4).fit(TEXTS * 30 + ["一二三四五六七八九十" * 40])
    assert lm._tables[1]["nums"].max() > 127 or lm._tables[4]["nums"].max() > 127
    lm.prune(2, from_order=4)
    lm.save(tmp_path / "v2.safetensors")
    lm.save(tmp_path / "v1.safetensors", version=1)  # what earlier releases wrote
    with safe_open(str(tmp_path / "v2.safetensors"), framework="np") as f:
        assert f.metadata()["version"] == "2" and all(f.get_tensor(n).dtype == np.uint8 for n in f.keys())
    with safe_open(str(tmp_path / "v1.safetensors"), framework="np") as f:  # as it was: no version key
        assert "version" not in f.metadata() and f.get_tensor("ngrams.4").dtype == np.uint16
    assert (tmp_path / "v2.safetensors").stat().st_size < (tmp_path / "v1.safetensors").stat().st_size
    for name in ("v1", "v2"):
        again = CharNgramLM.load(tmp_path / f"{name}.safetensors")
        assert again.vocab == lm.vocab and again.discounts == lm.discounts
        for k in range(1, lm.order + 1):
            assert np.array_equal(again._tables[k]["keys"], lm._tables[k]["keys"])
            assert np.array_equal(again._tables[k]["nums"], lm._tables[k]["nums"])
        for text in ["我们明天在见面吧。", "一二三四五六七八九十一二", "没见过的字"]:
            assert np.array_equal(again.log_probs(text), lm.log_probs(text))
    # a version this release does not know is refused, not misread
    from safetensors.numpy import save_file

    with safe_open(str(tmp_path / "v2.safetensors"), framework="np") as f:
        header, tensors = f.metadata(), {n: f.get_tensor(n) for n in f.keys()}
    save_file(tensors, str(tmp_path / "v3.safetensors"), metadata={**header, "version": "3"})
    with pytest.raises(ValueError, match="format version 3"):
        CharNgramLM.load(tmp_path / "v3.safetensors")


def test_varints_round_trip_and_corrupt_streams_are_refused():
    from ernie_zoo.models.ngram import _varint_decode, _varint_encode

    rng = np.random.default_rng(0)
    for values in [
        np.zeros(0, dtype=np.int64),
        np.array([0, 1, 127, 128, 16383, 16384, 2**35, 2**62, 2**63 - 1]),
        rng.integers(0, 2**50, 5000) >> rng.integers(0, 50, 5000),
        rng.integers(1, 100, 300),  # every value one byte
    ]:
        stream = _varint_encode(values)
        assert stream.dtype == np.uint8
        assert np.array_equal(_varint_decode(stream, len(values)), values)
    assert _varint_encode(np.array([1, 300])).tolist() == [1, 0xAC, 0x02]  # 300 = 0b10_0101100
    with pytest.raises(ValueError, match="non-negative"):
        _varint_encode(np.array([-1]))
    with pytest.raises(ValueError, match="corrupt"):
        _varint_decode(np.array([0xAC], dtype=np.uint8), 1)  # a value without its last byte
    with pytest.raises(ValueError, match="corrupt"):
        _varint_decode(np.array([1, 2], dtype=np.uint8), 3)  # fewer values than the header says


def test_lm_prune_drops_rare_ngrams_and_stays_normalised(tmp_path):
    lm = _lm()
    before = lm.num_ngrams
    rare = int(sum((lm._tables[k]["nums"] < 3).sum() for k in (2, 3)))
    lm.prune(3)
    assert lm.num_ngrams == before - rare > 0
    assert all((lm._tables[k]["nums"] >= 3).all() for k in (2, 3))
    # each conditional distribution still sums to 1 over the vocabulary
    for context in ["我们", "非常", "见面"]:
        assert math.isclose(sum(lm.distribution(context).values()), 1.0, rel_tol=1e-9)
    lm.save(tmp_path / "pruned.safetensors")  # and survives saving
    again = CharNgramLM.load(tmp_path / "pruned.safetensors")
    assert np.array_equal(again.log_probs("我们再见"), lm.log_probs("我们再见"))
    with pytest.raises(ValueError, match="min_count"):
        lm.prune(0)
    with pytest.raises(ValueError, match="from_order"):
        lm.prune(2, from_order=1)


def test_lm_prune_from_the_top_order_keeps_the_lower_orders_whole():
    lm, whole = _lm(), _lm()
    lm.prune(4, from_order=3)
    assert np.array_equal(lm._tables[2]["keys"], whole._tables[2]["keys"])  # bigrams untouched
    assert (lm._tables[2]["nums"] < 4).any()
    assert (lm._tables[3]["nums"] >= 4).all() and len(lm._tables[3]["keys"]) < len(whole._tables[3]["keys"])
    for context in ["我们", "非常", "见面"]:
        assert math.isclose(sum(lm.distribution(context).values()), 1.0, rel_tol=1e-9)


# ----------------------------------------------------------------------------- the word model


def test_word_unigram_prefers_the_dictionary_word():
    words = WordUnigram({"非常": 100, "高兴": 50, "非": 2, "长": 3, "常": 3, "高": 5, "兴": 1})
    total = 164
    # 非常 as one word beats 非 + 常
    assert words.logprob("非常") == pytest.approx(math.log(100 / total))
    assert words.logprob("非长") == pytest.approx(math.log(2 / total) + math.log(3 / total))
    assert words.logprob("他") == pytest.approx(math.log(1 / total))  # unknown character: count 1
    assert words.logprob("") == 0.0
    assert words.logprob("非常高兴") > words.logprob("非长高兴")
    with pytest.raises(ValueError, match="at least one word"):
        WordUnigram({})


def test_word_unigram_reads_jiebas_dictionary():
    words = WordUnigram.jieba()
    assert len(words.freqs) > 300_000
    assert WordUnigram.jieba() is words  # loaded once
    assert words.logprob("非常") > words.logprob("非长") + 5


# ----------------------------------------------------------------------------- gains and the choice


def test_candidate_gains_are_lm_differences_and_choices_respect_threshold_and_distance():
    lm = _lm()
    text = "我们明天在见面吧。"
    cands = {4: {"再": 0.5, "载": -1.0}}
    gains = candidate_gains(text, cands, lm)
    by = {c: g for _, c, g, _, _ in gains}
    # the n-gram gain: log P(text with the change) - log P(text), over the characters whose context holds 4
    for cand, gain in by.items():
        changed = text[:4] + cand + text[5:]
        expected = lm.log_probs(changed).sum() - lm.log_probs(text).sum()
        assert gain == pytest.approx(expected, abs=1e-9)
    assert [(i, c, w) for i, c, _, w, m in gains] == [(4, "再", 0.0), (4, "载", 0.0)]
    assert [m for *_, m in gains] == [0.5, -1.0]
    lm_only = FusionWeights(threshold=0.0)
    assert [(i, c) for i, c, _ in choose_corrections(gains, lm_only)] == [(4, "再")]
    high = FusionWeights(threshold=by["再"] + 1.0)
    assert choose_corrections(gains, high) == []
    assert choose_corrections(
        gains, FusionWeights(threshold=by["再"] + 0.25, model=1.0)
    )  # the model's 0.5 tips it
    # two changes closer than min_distance: only the better one is made
    near = [(3, "a", 5.0, 0.0, 0.0), (5, "b", 4.0, 0.0, 0.0), (9, "c", 3.0, 0.0, 0.0)]
    assert [i for i, _, _ in choose_corrections(near, FusionWeights(min_distance=4))] == [3, 9]
    assert [i for i, _, _ in choose_corrections(near, FusionWeights(min_distance=2))] == [3, 5, 9]


def test_word_gains_use_the_nine_character_window():
    lm = _lm()
    words = WordUnigram({"非常": 100, "高兴": 50})
    text = "今天我们大家都非长高兴"
    gains = candidate_gains(text, {8: {"常": 0.0}}, lm, words)
    (_, _, _, word_gain, _) = gains[0]
    window_before, window_after = (
        text[4:11],
        "大家都非常高兴",
    )  # 4 characters either side of 8, clipped at the end
    assert window_before == "大家都非长高兴"
    assert word_gain == pytest.approx(words.logprob(window_after) - words.logprob(window_before))
    assert word_gain > 0


def test_ngram_corrector_is_fused_decoding_with_the_lm_alone():
    from ernie_zoo.evaluation.correction import NgramCorrector

    lm = _lm()
    confusion = ConfusionSets({"在": {"same_tone": "再载"}, "长": {"same_tone": "常"}})
    corrector = NgramCorrector(lm, confusion, threshold=0.5)
    text = "我们明天在见面吧。他非长高兴。"
    expected = choose_corrections(
        candidate_gains(text, {4: dict.fromkeys("再载", 0.0), 11: {"常": 0.0}}, lm),
        FusionWeights(threshold=0.5, min_distance=lm.order),
    )
    assert corrector.proposals(text) == expected
    assert corrector.correct(text) == "我们明天再见面吧。他非常高兴。"


# ----------------------------------------------------------------------------- Taskflow with a shipped LM


@pytest.fixture(scope="module")
def tokenizer():
    from ernie_zoo import ErnieZooTokenizerFast

    return ErnieZooTokenizerFast.train_vocab(
        sentences() + TEXTS * 2, vocab_size=700, min_frequency=1, show_progress=False
    )


@pytest.fixture(scope="module")
def fused_dir(tokenizer, tmp_path_factory):
    """A tiny random model with an n-gram LM of TEXTS and weights that let the LM decide (model weight 0)."""
    torch.manual_seed(0)
    model = ErnieZooForSpellingCorrection(tiny_config(tokenizer)).eval()
    model.load_char_tables(tokenizer)
    model.confusion_sets = ConfusionSets({"在": {"same_tone": "再"}, "长": {"same_tone": "常"}})
    model.ngram_lm = _lm()
    model.config.correction_fusion = FusionWeights(lm=1.0, word=0.0, model=0.0, threshold=1.0).to_dict()
    directory = tmp_path_factory.mktemp("fused")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_save_load_keeps_the_lm_and_the_weights(fused_dir):
    assert (fused_dir / NGRAM_FILE).is_file()
    again = ErnieZooForSpellingCorrection.from_pretrained(fused_dir)
    assert again.fusion == FusionWeights(lm=1.0, word=0.0, model=0.0, threshold=1.0)
    assert np.array_equal(again.ngram_lm.log_probs("我们再见"), _lm().log_probs("我们再见"))
    again.ngram_lm = None  # weights without an LM: the model decodes alone
    assert again.fusion is None


def test_taskflow_fused_decoding_options_and_invariance(fused_dir):
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction", task_path=str(fused_dir))
    out = flow("我们明天在见面吧。")
    assert out["target"] == "我们明天再见面吧。"
    assert [(e["position"], e["correction"]) for e in out["errors"]] == [(4, ["在", "再"])]
    assert out["errors"][0]["score"] > 1.0
    # the LM as the test above: the score is the n-gram gain itself (model and word weights are 0)
    gain = (
        flow._task.model.ngram_lm.log_probs("我们明天再见面吧。").sum()
        - flow._task.model.ngram_lm.log_probs("我们明天在见面吧。").sum()
    )
    assert out["errors"][0]["score"] == pytest.approx(gain, abs=1e-3)
    # threshold per call; min_prob belongs to models decoded alone
    strict = Taskflow("text_correction", task_path=str(fused_dir), threshold=gain + 1.0)
    assert strict("我们明天在见面吧。")["errors"] == []
    with pytest.raises(ValueError, match="use threshold"):
        Taskflow("text_correction", task_path=str(fused_dir), min_prob=0.5)
    kept = Taskflow("text_correction", task_path=str(fused_dir), user_dict=["在见"])("我们明天在见面吧。")
    assert kept["errors"] == []
    trad = flow("我們明天在見面吧。")  # Traditional kept where untouched; length never changes
    assert trad["target"] == "我們明天再見面吧。"
    texts = ["我们明天在见面吧。他非长高兴。", "iPhone 在这里", "在" * 200, ""] * 2
    one = Taskflow("text_correction", task_path=str(fused_dir), batch_size=1, max_seq_len=64)(texts)
    many = Taskflow("text_correction", task_path=str(fused_dir), batch_size=5, max_seq_len=64)(texts)
    assert [r["target"] for r in one] == [r["target"] for r in many]
    assert all(len(r["target"]) == len(r["source"]) for r in one)
    assert one[0]["target"] == "我们明天再见面吧。他非常高兴。"


def test_threshold_needs_a_model_with_an_lm(tokenizer, tmp_path):
    from ernie_zoo.taskflow import Taskflow

    model = ErnieZooForSpellingCorrection(tiny_config(tokenizer)).eval()
    model.load_char_tables(tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="threshold applies to a model with an n-gram LM"):
        Taskflow("text_correction", task_path=str(tmp_path), threshold=3.0)


def test_attach_ngram_lm_writes_lm_weights_and_manifest(fused_dir, tmp_path):
    import shutil

    from ernie_zoo.evaluation.correction import attach_ngram_lm
    from ernie_zoo.utils import verify_manifest

    model_dir = tmp_path / "model"
    shutil.copytree(fused_dir, model_dir)
    (model_dir / NGRAM_FILE).unlink()
    data = tmp_path / "csc"
    data.mkdir()
    (data / "train.jsonl").write_text(
        "".join(json.dumps({"source": t, "target": t}, ensure_ascii=False) + "\n" for t in TEXTS),
        encoding="utf-8",
    )
    kept = CharNgramLM(order=2).fit(TEXTS).prune(2).num_ngrams
    fusion = tmp_path / "fusion.json"
    chosen = {"lm": 1.0, "word": 0.5, "model": 1.0, "threshold": 7.0, "min_distance": 4}
    fusion.write_text(
        json.dumps({"ngram_lm": {"order": 2, "min_count": 2, "ngrams_kept": kept}, "chosen": chosen})
    )
    out = attach_ngram_lm(model_dir, data, fusion)
    assert out["ngrams"] == kept
    assert json.loads((model_dir / "config.json").read_text())["correction_fusion"] == chosen
    assert NGRAM_FILE in verify_manifest(model_dir)
    loaded = ErnieZooForSpellingCorrection.from_pretrained(model_dir)
    assert loaded.ngram_lm.order == 2 and loaded.fusion == FusionWeights(**chosen)
    # other training text than the weights were chosen with, or a size over the limit: refused, nothing written
    (data / "train.jsonl").write_text(
        json.dumps({"source": "别的", "target": "别的"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match="not the same training text"):
        attach_ngram_lm(model_dir, data, fusion)
    (data / "train.jsonl").write_text(
        "".join(json.dumps({"source": t, "target": t}, ensure_ascii=False) + "\n" for t in TEXTS),
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="bytes >"):
        attach_ngram_lm(model_dir, data, fusion, max_bytes=1000)
    assert not list(model_dir.glob(".*.tmp"))
    assert NGRAM_FILE in verify_manifest(model_dir)


# ----------------------------------------------------------------------------- the LM's text and variants


def _write_pairs(path, texts):
    path.write_text(
        "".join(json.dumps({"source": t, "target": t}, ensure_ascii=False) + "\n" for t in texts),
        encoding="utf-8",
    )


@pytest.fixture
def lm_data(tmp_path, monkeypatch):
    """A synthetic split (train: two TEXTS sentences, dev: one held-out sentence), a running-text file that holds
    the train sentences again, the dev sentence, a test sentence and new text, and a stand-in SIGHAN-2015."""
    import ernie_zoo.evaluation.correction as correction

    data = tmp_path / "csc"
    data.mkdir()
    _write_pairs(data / "train.jsonl", ["我们明天再见面吧。", "他在家里看书。"])
    _write_pairs(data / "dev.jsonl", ["今天下午开会讨论工作。"])
    corpus = tmp_path / "news.txt"
    corpus.write_text(
        "我们明天再见面吧。今天下午开会讨论工作。\n"  # a train sentence again, the dev sentence
        "学生们在教室里认真学习。老师在黑板上写字。\n"  # the first: a test sentence
        "他在家里看书。短句。\n",  # a train sentence again; too short a sentence
        encoding="utf-8",
    )
    test = [("学生们在教是里认真学习。", "学生们在教室里认真学习。")]
    monkeypatch.setattr(correction, "read_sighan2015", lambda raw_dir=None: test)
    return data, corpus


def test_lm_texts_dedupe_sources_and_drop_dev_and_test_sentences(lm_data):
    from ernie_zoo.evaluation.correction import correction_lm_texts

    data, corpus = lm_data
    texts, dropped = correction_lm_texts(["train", str(corpus)], data)
    assert texts == ["我们明天再见面吧。", "他在家里看书。", "老师在黑板上写字。"]
    assert dropped == {"dev": 1, "sighan2015_test": 1}
    assert correction_lm_texts(["train"], data) == (texts[:2], {"dev": 0, "sighan2015_test": 0})
    with pytest.raises(FileNotFoundError, match="neither 'train' nor a text file"):
        correction_lm_texts(["nowhere.txt"], data)


def test_lm_variants_share_one_fit_and_prune_as_a_fresh_fit(lm_data):
    from ernie_zoo.evaluation.correction import build_correction_lm, correction_lms

    data, corpus = lm_data
    sources = ["train", str(corpus)]
    seen = [(lm.num_ngrams, spec) for lm, spec in correction_lms(data, 3, [2, 1], sources, [3, 2, 4])]
    # ascending min counts, whatever the order asked; orders above the LM's skipped
    assert [(s["prune_from_order"], s["min_count"]) for _, s in seen] == [(3, 1), (3, 2), (2, 1), (2, 2)]
    for kept, spec in seen:
        lm, again = build_correction_lm(data, 3, spec["min_count"], sources, spec["prune_from_order"])
        assert lm.num_ngrams == kept == spec["ngrams_kept"] and again == spec
        assert spec["text"] == sources and spec["sentences"] == 3 and spec["order"] == 3
    fitted = seen[0][1]["ngrams_fitted"]
    assert seen[3][0] < seen[1][0] < seen[0][0] == seen[2][0] == fitted


def test_attach_ngram_lm_rebuilds_the_lm_from_the_text_it_names(fused_dir, lm_data, tmp_path):
    import shutil

    from ernie_zoo.evaluation.correction import attach_ngram_lm, build_correction_lm

    data, corpus = lm_data
    model_dir = tmp_path / "model"
    shutil.copytree(fused_dir, model_dir)
    lm, spec = build_correction_lm(data, 4, 1, ["train", str(corpus)])
    chosen = {"lm": 1.0, "word": 0.0, "model": 1.0, "threshold": 5.0, "min_distance": 4}
    fusion = tmp_path / "fusion.json"
    fusion.write_text(json.dumps({"ngram_lm": spec, "chosen": chosen}, ensure_ascii=False))
    assert attach_ngram_lm(model_dir, data, fusion)["ngrams"] == spec["ngrams_kept"]
    loaded = ErnieZooForSpellingCorrection.from_pretrained(model_dir)
    assert loaded.ngram_lm.order == 4
    assert np.array_equal(loaded.ngram_lm.log_probs("老师在黑板上写字。"), lm.log_probs("老师在黑板上写字。"))


def test_an_int8_stored_correction_model_decodes_as_the_float_one(fused_dir, tmp_path):
    """Int8 weight storage of a correction model, whose head is tied to the word embeddings: stored once, tied
    again on load, and fused decoding with the model's gains makes the same changes."""
    import shutil

    from safetensors import safe_open

    from ernie_zoo.models.int8 import int8_weights_file, save_int8_weights
    from ernie_zoo.taskflow import Taskflow

    float_dir, int8_dir = tmp_path / "fp32", tmp_path / "int8"
    shutil.copytree(fused_dir, float_dir)
    model = ErnieZooForSpellingCorrection.from_pretrained(float_dir).eval()
    # the model's gains count as much as the LM's, so its weights take part in every choice
    model.config.correction_fusion = FusionWeights(lm=1.0, word=0.0, model=1.0, threshold=0.5).to_dict()
    model.save_pretrained(float_dir)
    shutil.copytree(float_dir, int8_dir)
    save_int8_weights(model, int8_dir)
    assert int8_weights_file(int8_dir) is not None
    with safe_open(str(int8_dir / "model.safetensors"), "pt") as f:
        assert not any(k.startswith("cls.predictions.decoder.weight") for k in f.keys())
    loaded = ErnieZooForSpellingCorrection.from_pretrained(int8_dir).eval()
    assert loaded.cls.predictions.decoder.weight is loaded.ernie.embeddings.word_embeddings.weight
    assert loaded.ngram_lm is not None and loaded.fusion == model.fusion
    enc = {"input_ids": torch.tensor([[2, 40, 41, 42, 43, 3]])}
    with torch.no_grad():
        torch.testing.assert_close(loaded(**enc).logits, model(**enc).logits, atol=0.05, rtol=0)
    texts = ["我们明天在见面吧。他非长高兴。", "他在家里看书。", "在家里很好。"]
    expected = Taskflow("text_correction", task_path=str(float_dir))(texts)
    got = Taskflow("text_correction", task_path=str(int8_dir))(texts)
    assert [r["target"] for r in got] == [r["target"] for r in expected]
    assert expected[0]["target"] != texts[0]
    for a, b in zip(got, expected):
        assert [e["position"] for e in a["errors"]] == [e["position"] for e in b["errors"]]
        for ea, eb in zip(a["errors"], b["errors"]):
            assert ea["score"] == pytest.approx(eb["score"], abs=0.05)


def _line_events(fn, *args) -> int:
    """Python line events executed inside correction.py while fn runs: a count of work, not a time."""
    import sys

    from ernie_zoo.models import correction

    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename != correction.__file__:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count


def test_choosing_corrections_is_linear_in_the_text_length():
    """A 100k-character text did not finish in 120 s: each change was checked against every change made so far.
    Every position a candidate scoring above the threshold (the worst case): 4x the text, ~4x the work, not 16x."""
    weights = FusionWeights(lm=1.0, threshold=0.5, min_distance=4)

    def gains(n):
        return [(i, "再", 1.0 + (i * 7919 % 1000) / 1000, 0.0, 0.0) for i in range(n)]

    small, large = (_line_events(choose_corrections, gains(n), weights) for n in (2_000, 8_000))
    assert 3.5 < large / small < 4.5
    chosen = choose_corrections(gains(2_000), weights)
    positions = [i for i, _, _ in chosen]
    assert all(b - a >= 4 for a, b in zip(positions, positions[1:])) and len(chosen) >= 2_000 // 7


def test_fused_decoding_runs_the_correction_head_on_candidate_positions_only(fused_dir):
    """The head's (B, T, V) output was 1 GB for a batch of 32 long chunks (and its log_softmax another): now it
    sees only the characters that have candidates, as (N, H) rows."""
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction", task_path=str(fused_dir))
    seen = []
    hook = flow._task.model.cls.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    try:
        out = flow(["我们明天在见面吧。", "iPhone 15，OK"])
    finally:
        hook.remove()
    assert out[0]["target"] == "我们明天再见面吧。" and out[1]["errors"] == []
    candidates = flow._task.candidates
    ids = flow._task.tokenizer.convert_tokens_to_ids(list("我们明天在见面吧。"))
    assert seen == [(sum(i in candidates for i in ids), flow._task.model.config.hidden_size)]

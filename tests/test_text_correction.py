"""Text correction (#22): confusion sets, the synthetic-error generator, the scores, the correction head, its
decoding, save/load, the finetune task and Taskflow("text_correction")."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import sentences, tiny_config
from torch.nn import functional as F

from ernie_zoo.data.spelling import ErrorGenerator, build_confusion_sets, iter_sentences, near_syllables
from ernie_zoo.models.correction import ErnieZooForSpellingCorrection, candidate_table, decode_corrections
from ernie_zoo.text.confusion import CONFUSION_FILE, ConfusionSets
from ernie_zoo.text.correction import correction_scores

EXTRA = [
    "我们明天再见面吧。",
    "他在家里看书，再也不出去了。",
    "对不起，我来晚了。",
    "我的朋友打算去法国玩。",
    "我们高兴地唱歌，唱得很好。",
    "iPhone 15 很好用。",
]


@pytest.fixture(scope="module")
def tokenizer():
    from ernie_zoo import ErnieZooTokenizerFast

    return ErnieZooTokenizerFast.train_vocab(
        sentences() + EXTRA * 3, vocab_size=700, min_frequency=1, show_progress=False
    )


# ----------------------------------------------------------------------------- confusion sets


def test_near_syllables_follow_fuzzy_pinyin():
    assert near_syllables("zhi") == {"zi"}
    assert near_syllables("lan") == {"nan", "lang"}
    assert near_syllables("xing") == {"xin"}
    assert near_syllables("a") == set()


def test_confusion_sets_by_sound_and_shape():
    sets = build_confusion_sets("在再载知资支低底的地得材村")
    assert "再" in sets.sets["在"]["same_tone"] and "载" in sets.sets["在"]["same_tone"]
    assert "资" in sets.sets["知"].get("near_sound", "")  # zhi ~ zi
    assert "支" in sets.sets["知"]["same_tone"]
    assert "村" in sets.sets["材"].get("shape", "")  # 木 radical, 7 strokes each
    for ch, entry in sets.sets.items():  # every candidate is in the vocabulary, never the char itself
        assert ch not in sets.candidates(ch)
        assert set(sets.candidates(ch)) <= set("在再载知资支低底的地得材村")
        assert sum(map(len, entry.values())) == len(set(sets.candidates(ch)))  # kinds are disjoint


def test_confusion_sets_round_trip_and_bad_file(tmp_path):
    sets = ConfusionSets({"在": {"same_tone": "再载"}, "己": {"shape": "已巳"}})
    sets.save(tmp_path / CONFUSION_FILE)
    again = ConfusionSets.load(tmp_path / CONFUSION_FILE)
    assert again.sets == sets.sets and again.all_candidates("己") == {"已", "巳"}
    (tmp_path / "bad.json").write_text('{"sets": {"在": {"rhyme": "再"}}}', encoding="utf-8")
    with pytest.raises(ValueError, match="kinds"):
        ConfusionSets.load(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match="junk.json"):
        ConfusionSets.load(tmp_path / "junk.json")


# ----------------------------------------------------------------------------- the error generator

CONFUSION = ConfusionSets(
    {
        "在": {"same_tone": "再"},
        "再": {"same_tone": "在"},
        "的": {"same_tone": "地得"},
        "他": {"same_tone": "她它"},
        "已": {"shape": "己"},
        "天": {"shape": "夫"},
    }
)
FREQ = Counter(
    {"在": 100, "再": 20, "的": 500, "地": 50, "得": 40, "他": 80, "她": 30, "它": 10, "天": 60, "夫": 5}
)
TEXTS = [
    "我在家里的时候他已经走了，今天天气很好。",
    "他们在ABC公司的2024年会上再次见面。",
    "的的的的的的的的的的的的",
]


def test_generator_only_replaces_confusable_chinese_characters_and_keeps_length():
    gen = ErrorGenerator(CONFUSION, FREQ)
    for seed in range(200):
        for text in TEXTS:
            noisy = gen.corrupt(text, random.Random(seed))
            assert len(noisy) == len(text)
            for a, b in zip(text, noisy):
                if a != b:
                    assert b in CONFUSION.candidates(a)  # Latin, digits, punctuation never change


def test_generator_rates_follow_error_counts_and_are_reproducible():
    gen = ErrorGenerator(CONFUSION, FREQ, error_counts=(0.5, 0.3, 0.2))
    text = "我在家里的时候他已经走了，今天天气很好，他在的。"
    counts = Counter(
        sum(a != b for a, b in zip(text, gen.corrupt(text, random.Random(i)))) for i in range(3000)
    )
    for k, p in enumerate((0.5, 0.3, 0.2)):
        assert abs(counts[k] / 3000 - p) < 0.04, counts
    assert max(counts) <= 2
    assert [gen.corrupt(text, random.Random(7)) for _ in range(3)] == [
        gen.corrupt(text, random.Random(7))
    ] * 3
    short = "在家"  # fewer characters than min_chars_per_error allows: no error
    assert {gen.corrupt(short, random.Random(i)) for i in range(50)} == {short}


def test_generator_rejects_bad_settings():
    with pytest.raises(ValueError, match="error_counts"):
        ErrorGenerator(CONFUSION, FREQ, error_counts=(0.0, 0.0))
    with pytest.raises(ValueError, match="unknown kinds"):
        ErrorGenerator(CONFUSION, FREQ, kind_weights={"rhyme": 1.0})


def test_iter_sentences_keeps_modern_chinese_sentences():
    lines = [
        "今天的天气真的很好。我们去公园散步吧！",
        "短。",
        "abc def ghi jkl mno pqr",
        "子曰：学而时习之，不亦说乎。",
    ]
    assert list(iter_sentences(lines)) == ["今天的天气真的很好。", "我们去公园散步吧！"]


# ----------------------------------------------------------------------------- scores


def test_sentence_scores_follow_pycorrector():
    sources = ["我在家", "他去", "好的", "天汽"]
    targets = ["我再家", "他去", "好的", "天气"]  # positives: 0 and 3; negatives: 1 and 2
    # positive 0 fixed (TP), negative 1 kept (TN), negative 2 changed (FP), positive 3 mis-corrected (FN, not FP)
    preds = ["我再家", "他去", "好地", "天器"]
    s = correction_scores(sources, targets, preds)
    assert (s["sentence_precision"], s["sentence_recall"]) == (0.5, 0.5)
    assert s["sentence_accuracy"] == 0.5
    # characters: 2 wrong (在, 汽), 3 changed (在, 的, 汽): detected 2, corrected 1
    assert s["char_detection_precision"] == pytest.approx(2 / 3) and s["char_detection_recall"] == 1.0
    assert s["char_correction_precision"] == pytest.approx(1 / 3) and s["char_correction_recall"] == 0.5
    with pytest.raises(ValueError, match="predictions"):
        correction_scores(sources, targets, preds[:2])


# ----------------------------------------------------------------------------- the model


def _model(tokenizer, **overrides):
    torch.manual_seed(0)
    model = ErnieZooForSpellingCorrection(tiny_config(tokenizer, **overrides))
    model.load_char_tables(tokenizer)
    return model


def test_loss_equals_hand_computation(tokenizer):
    model = _model(tokenizer, detection_loss_weight=0.25).eval()
    enc = tokenizer(["他在家里看书"], return_tensors="pt")
    ids = enc["input_ids"]
    labels = ids.clone()
    labels[0, 0] = labels[0, -1] = -100
    labels[0, 2] = tokenizer.convert_tokens_to_ids("再")  # 在 is wrong here
    out = model(**enc, labels=labels)
    keep = labels != -100
    ce = F.cross_entropy(out.logits[keep], labels[keep])
    wrong = (labels[keep] != ids[keep]).float()
    bce = F.binary_cross_entropy_with_logits(out.detection_logits[keep], wrong)
    assert torch.allclose(out.loss, 0.75 * ce + 0.25 * bce)
    assert out.logits.shape == (1, ids.shape[1], len(tokenizer))
    # training computes the correction logits only where labels are set: the same loss without dropout
    model.train()
    out_train = model(**enc, labels=labels)
    assert out_train.logits.shape == (int(keep.sum()), len(tokenizer))
    assert torch.allclose(out_train.loss, out.loss, atol=1e-6)
    # with copy rate 0, only the wrong character is in the correction loss
    model.config.correction_copy_rate = 0.0
    only_wrong = model(**enc, labels=labels)
    assert only_wrong.logits.shape[0] == 1
    with pytest.raises(ValueError, match="shape"):
        model(**enc, labels=labels[:, :-1])


def test_decode_only_into_candidates_with_a_margin():
    vocab = {"在": 0, "再": 1, "载": 2, "家": 3, "天": 4}
    table = candidate_table(ConfusionSets({"在": {"same_tone": "再载"}}), vocab)
    assert table[0].tolist() == [1, 2] and 3 not in table
    logits = torch.full((1, 3, 5), -10.0)
    logits[0, 0, 4] = 5.0  # 在 -> 天: the best token but not a candidate; 再 the best candidate
    logits[0, 0, 1] = 3.0
    logits[0, 0, 0] = 1.0
    logits[0, 1, 0] = 5.0  # 家 -> 在 would be best, but 家 has no candidates
    logits[0, 2, 1] = 5.0  # 在 -> 再, not eligible
    ids = torch.tensor([[0, 3, 0]])
    eligible = torch.tensor([[True, True, False]])
    out = decode_corrections(logits, ids, eligible, table, min_prob=0.0)
    assert [(t, tok) for t, tok, _ in out[0]] == [(0, 1)]
    margin = out[0][0][2]
    assert decode_corrections(logits, ids, eligible, table, min_prob=margin + 1e-3) == [[]]
    free = decode_corrections(logits, ids, eligible, None, min_prob=0.0)  # no candidate sets: any token
    assert [(t, tok) for t, tok, _ in free[0]] == [(0, 4), (1, 0)]


def test_save_load_round_trip_keeps_confusion_sets(tokenizer, tmp_path):
    model = _model(tokenizer).eval()
    model.confusion_sets = CONFUSION
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / CONFUSION_FILE).is_file()
    again = ErnieZooForSpellingCorrection.from_pretrained(tmp_path).eval()
    assert again.confusion_sets.sets == CONFUSION.sets
    enc = tokenizer(["他在家里看书"], return_tensors="pt")
    assert torch.equal(model(**enc).logits, again(**enc).logits)
    # the masked-LM part opens in plain transformers (the detector is simply not used)
    from transformers import AutoModelForMaskedLM

    import ernie_zoo.auto  # noqa: F401

    mlm = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert torch.allclose(mlm(**enc).logits, again(**enc).logits, atol=1e-6)


# ----------------------------------------------------------------------------- Taskflow


@pytest.fixture(scope="module")
def forced_dir(tokenizer, tmp_path_factory):
    """A tiny model whose correction head always prefers 再: it corrects exactly the 在 characters (在 -> 再 is a
    confusion), so offsets and options can be checked exactly."""
    model = _model(tokenizer).eval()
    with torch.no_grad():
        bias = model.cls.predictions.bias
        bias.zero_()
        bias[tokenizer.convert_tokens_to_ids("再")] = 50.0
        bias[tokenizer.convert_tokens_to_ids("地")] = 40.0
        model.cls.predictions.decoder.weight.mul_(0.0)  # (tied: zeroes the word embeddings too)
        model.ernie.embeddings.word_embeddings.weight.normal_(0, 0.02)
        model.cls.predictions.decoder.weight = model.ernie.embeddings.word_embeddings.weight
    model.config.correction_min_prob = 0.5
    model.confusion_sets = ConfusionSets({"在": {"same_tone": "再"}, "的": {"same_tone": "地"}})
    directory = tmp_path_factory.mktemp("csc")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_taskflow_output_offsets_and_length(forced_dir):
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction", task_path=str(forced_dir))
    out = flow("Ｈｉ！iPhone 15 在家里的书")
    assert out["source"] == "Ｈｉ！iPhone 15 在家里的书"
    assert len(out["target"]) == len(out["source"])
    # 的 -> 地 is a candidate, but the model prefers 再 (not a candidate of 的) there: 的 stays
    assert out["target"] == "Ｈｉ！iPhone 15 再家里的书"
    assert [(e["position"], e["correction"]) for e in out["errors"]] == [(13, ["在", "再"])]
    for e in out["errors"]:
        assert out["source"][e["position"]] == e["correction"][0]
        assert out["target"][e["position"]] == e["correction"][1]
        assert 0.5 <= e["score"] <= 1.0
    assert flow("") == {"source": "", "target": "", "errors": []}
    assert flow("ABC 123，。") == {"source": "ABC 123，。", "target": "ABC 123，。", "errors": []}


def test_taskflow_traditional_user_dict_and_options(forced_dir):
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction", task_path=str(forced_dir))
    trad = flow("們在這裡")  # untouched characters stay Traditional; the correction is Simplified
    assert trad["target"] == "們再這裡" and trad["errors"][0]["position"] == 1
    kept = Taskflow("text_correction", task_path=str(forced_dir), user_dict=["在家"])("我在家，他在外面")
    assert kept["target"] == "我在家，他再外面"
    strict = Taskflow("text_correction", task_path=str(forced_dir), min_prob=1.0)("他在家")
    assert strict["errors"] == []
    with pytest.raises(ValueError, match="min_prob"):
        Taskflow("text_correction", task_path=str(forced_dir), min_prob=1.5)
    with pytest.raises(TypeError):
        flow(123)


def test_taskflow_is_batch_size_invariant(forced_dir):
    from ernie_zoo.taskflow import Taskflow

    texts = ["他在家里的书", "今天在下雨", "在" * 300, "好"] * 3
    one = Taskflow("text_correction", task_path=str(forced_dir), batch_size=1, max_seq_len=64)(texts)
    many = Taskflow("text_correction", task_path=str(forced_dir), batch_size=7, max_seq_len=64)(texts)
    assert one == many
    assert one[2]["target"] == "再" * 300  # long text split into chunks, positions into the whole text
    assert [e["position"] for e in one[2]["errors"]] == list(range(300))


def test_taskflow_refuses_a_model_of_another_head(tokenizer, tmp_path):
    from ernie_zoo.models import ErnieZooForSequenceClassification
    from ernie_zoo.taskflow import Taskflow

    model = ErnieZooForSequenceClassification(tiny_config(tokenizer, num_labels=2))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError):
        Taskflow("text_correction", task_path=str(tmp_path))


# ----------------------------------------------------------------------------- fine-tuning


def _write_pairs(path, pairs):
    path.write_text(
        "".join(json.dumps({"source": s, "target": t}, ensure_ascii=False) + "\n" for s, t in pairs)
    )


def _finetune(tmp_path, base, **args):
    """Fine-tune text_correction from `base` on a few pairs (confusion sets given as data) into tmp_path/out."""
    from ernie_zoo.finetune import run_finetune
    from ernie_zoo.finetune.args import build_args

    pairs = [
        ("他再家里看书", "他在家里看书"),
        ("我们明天在见面吧。", "我们明天再见面吧。"),
        ("对不起，我来晚了。", "对不起，我来晚了。"),
    ]
    _write_pairs(tmp_path / "train.jsonl", pairs * 8)
    _write_pairs(tmp_path / "dev.jsonl", pairs)
    CONFUSION.save(tmp_path / CONFUSION_FILE)
    defaults = {
        "task": "text_correction",
        "data.train_file": str(tmp_path / "train.jsonl"),
        "data.dev_file": str(tmp_path / "dev.jsonl"),
        "data.text_column": "source",
        "data.confusion_sets": str(tmp_path / CONFUSION_FILE),
        "model.model_name_or_path": str(base),
        "train.output_dir": str(tmp_path / "out"),
        "train.batch_size": 8,
        "train.progress": False,
        "train.tensorboard": False,
    }
    return run_finetune(build_args(None, {**defaults, **args}))


def test_finetune_text_correction_end_to_end(tokenizer, tmp_path):
    base = tmp_path / "base"
    _model(tokenizer).save_pretrained(base)
    tokenizer.save_pretrained(base)
    result = _finetune(
        tmp_path, base, **{"method.method": "full", "train.max_steps": 6, "train.learning_rate": 1e-3}
    )
    dev = result["dev"]
    assert 0.0 <= dev["sentence_f1"] <= 1.0 and set(dev["sweep_sentence_f1"]) >= {"0.0", "0.5"}
    out = tmp_path / "out"
    assert (out / CONFUSION_FILE).is_file()
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ErnieZooForSpellingCorrection"]
    loaded = ErnieZooForSpellingCorrection.from_pretrained(out)
    assert loaded.confusion_sets.sets == CONFUSION.sets


@pytest.mark.parametrize("method", ["lora", "houlsby"])
def test_adapter_carries_the_confusion_sets_and_ngram_lm(method, tokenizer, tmp_path):
    """An adapter directory (LoRA, the default method, or a bottleneck adapter) holds what a full save holds next to the weights (`save_saved_files`): the
    confusion sets given as data (its base, an encoder, has none) and the base's n-gram LM, and `load_finetuned`
    reads them back from it."""
    from ernie_zoo.finetune import load_finetuned
    from ernie_zoo.finetune.export import unwrap
    from ernie_zoo.models.correction import NGRAM_FILE
    from ernie_zoo.models.ngram import CharNgramLM

    base = tmp_path / "base"
    model = _model(tokenizer)
    model.ngram_lm = CharNgramLM(order=2).fit(EXTRA * 2)
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    assert not (base / CONFUSION_FILE).exists()
    _finetune(tmp_path, base, **{"method.method": method, "method.lora_r": 4, "train.max_steps": 2})
    # LoRA is merged into out/ (a full save) and its adapter kept in out/adapter; a bottleneck adapter is out/
    adapter = tmp_path / "out" / "adapter" if method == "lora" else tmp_path / "out"
    assert (adapter / CONFUSION_FILE).is_file() and (adapter / NGRAM_FILE).is_file()
    assert (tmp_path / "out" / CONFUSION_FILE).is_file()
    (base / NGRAM_FILE).unlink()  # the adapter's own copy is what loads
    loaded, _ = load_finetuned(adapter)
    assert unwrap(loaded).confusion_sets.sets == CONFUSION.sets
    assert np.array_equal(unwrap(loaded).ngram_lm.log_probs("他再家里"), model.ngram_lm.log_probs("他再家里"))


def test_finetune_refuses_pairs_of_different_length(tmp_path):
    from ernie_zoo.finetune.args import build_args
    from ernie_zoo.finetune.data import load_split

    _write_pairs(tmp_path / "train.jsonl", [("他在家", "他在家里")])
    args = build_args(
        None,
        {
            "task": "text_correction",
            "data.train_file": str(tmp_path / "train.jsonl"),
            "data.text_column": "source",
        },
    )
    with pytest.raises(ValueError, match="row 1.*same length"):
        load_split(args.data, "text_correction", "train")


def test_taskflow_corrects_traditional_text_in_traditional():
    """The model reads Simplified; its corrections used to come back Simplified inside Traditional text
    (少先隊員因該… -> …应該…). The shipped model, whose n-gram LM finds 因该 -> 应该."""
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction")
    trad = flow("少先隊員因該為老人讓坐")
    assert trad["target"] == "少先隊員應該為老人讓坐"
    assert [(e["position"], e["correction"]) for e in trad["errors"]] == [(4, ["因", "應"])]
    simp = flow("少先队员因该为老人让坐")  # the same correction, in Simplified, for Simplified text
    assert (
        simp["target"] == "少先队员应该为老人让坐"
        and simp["errors"][0]["score"] == trad["errors"][0]["score"]
    )
    # OpenCC reads the corrected phrase: 头发 -> 頭髮 (not 頭發)
    assert flow("我們的頭法很長")["target"] == "我們的頭髮很長"


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"threshold": float("nan")},
            "option 'threshold' of task 'text_correction' must be a finite number, got nan",
        ),
        (
            {"threshold": float("inf")},
            "option 'threshold' of task 'text_correction' must be a finite number, got inf",
        ),
        ({"threshold": -1.0}, r"threshold must be >= 0 \(nats\), got -1.0"),
        (
            {"min_prob": float("nan")},
            "option 'min_prob' of task 'text_correction' must be a finite number, got nan",
        ),
        ({"min_prob": -0.5}, "min_prob must be between 0 and 1, got -0.5"),
    ],
)
def test_taskflow_rejects_bad_float_options(forced_dir, options, message):
    """threshold=nan was accepted and silently corrected nothing (every `score > nan` is false)."""
    from ernie_zoo.taskflow import Taskflow

    with pytest.raises(ValueError, match=message):
        Taskflow("text_correction", task_path=str(forced_dir), **options)

"""Sentiment-lexicon input bits (issue #19): which characters get which bit, the lexicon file saved with a model,
the sequence classifier's lexicon input, fine-tuning that learns from the bits alone, and Taskflow using them."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from test_finetune_loop import QUIET, SMALL

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.finetune import build_args, load_finetuned, run_finetune
from ernie_zoo.finetune.export import unwrap
from ernie_zoo.models import ErnieZooForSequenceClassification
from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE, token_texts
from ernie_zoo.text.sentiment import (
    FEATURES,
    SentimentLexicon,
    char_features,
    describe,
    lexicon_contributions,
    load_sentiment_lexicon,
)

SEGMENT = list  # one character per word: the tests do not depend on jieba's dictionary


@pytest.fixture
def lexicon():
    return SentimentLexicon(
        words={"好": (1, 0.8), "差": (-1, 0.6), "干净": (1, 0.5), "失望": (-1, 0.9), "满意": (1, 0.7)},
        negators={"不": -1.0, "没": -1.0},
        degrees={"很": 1.75, "太": 1.5},
        sources={"好": ("hownet", "ntusd"), "不": ("jassa",)},
    )


def _bits(text, lexicon):
    return [describe(m) for m in char_features(text, lexicon, SEGMENT)]


def test_bits_mark_words_negators_degrees_and_flipped_words(lexicon):
    assert FEATURES == ("POS", "NEG", "NOT", "DEG", "FLIP")
    assert _bits("很好", lexicon) == ["DEG", "POS"]
    assert _bits("不好，差", lexicon) == ["NOT", "POS,FLIP", "", "NEG"]  # negation stops at the comma
    assert _bits("不很好", lexicon) == ["NOT", "DEG", "POS,FLIP"]
    assert _bits("没不好", lexicon) == [
        "NOT",
        "NOT",
        "POS",
    ]  # two negators: not flipped (lexicon_score agrees)
    assert [c.value > 0 for c in lexicon_contributions("没不好", lexicon, SEGMENT)] == [True]
    assert _bits("好不好", lexicon) == ["POS", "NOT", "POS,FLIP"]
    assert _bits("", lexicon) == []
    # Traditional text is read as Simplified, one character to one, so the offsets stay those of the text.
    assert [describe(m) for m in char_features("很滿意！", lexicon)] == [
        "DEG",
        "POS",
        "POS",
        "",
    ]  # jieba's words
    words = ["干净", "失望"]
    assert [describe(m) for m in char_features("干净失望", lexicon, lambda t: words)] == ["POS"] * 2 + [
        "NEG"
    ] * 2


def test_token_texts_drop_wordpiece_marks_and_special_tokens():
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "好": 4, "##好": 5, "ok": 6}
    texts = token_texts(vocab, ["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "[UNK]")
    assert texts == ["", "\u25a1", "", "", "好", "好", "ok"]


def test_save_load_roundtrip_fingerprint_and_same_as(lexicon, tmp_path):
    lexicon.save(tmp_path / "lex.tsv")
    back = load_sentiment_lexicon(tmp_path / "lex.tsv")
    assert (back.words, back.negators, back.degrees) == (lexicon.words, lexicon.negators, lexicon.degrees)
    assert back.sources["好"] == ("hownet", "ntusd")
    assert back.same_as(lexicon) and back.fingerprint() == lexicon.fingerprint()
    other = SentimentLexicon(words={**lexicon.words, "好": (1, 0.7)}, negators=lexicon.negators)
    assert not other.same_as(lexicon) and not lexicon.same_as(None)


def test_a_saved_copy_keeps_the_files_header(lexicon, tmp_path):
    """The builder writes each source's licence into the file's header: a copy saved beside a model keeps it."""
    lexicon.save(tmp_path / "plain.tsv")
    text = (tmp_path / "plain.tsv").read_text(encoding="utf-8")
    header = ["# built from: hownet (research lexicon), jassa (GPL-3.0-or-later)", "# merge rules: majority"]
    (tmp_path / "built.tsv").write_text("\n".join(header) + "\n" + text, encoding="utf-8")
    built = load_sentiment_lexicon(tmp_path / "built.tsv")
    assert built.header[:2] == header
    built.save(tmp_path / "copy.tsv")
    assert (tmp_path / "copy.tsv").read_text(encoding="utf-8") == (tmp_path / "built.tsv").read_text(
        encoding="utf-8"
    )


def test_the_shipped_lexicon_names_its_sources_and_licences():
    from ernie_zoo.zoo import ZOO_DIR

    shipped = load_sentiment_lexicon(ZOO_DIR / "ernie-zoo-mini-sentiment" / SENTIMENT_LEXICON_FILE)
    header = "\n".join(shipped.header)
    for source in sorted({s for sources in shipped.sources.values() for s in sources}):
        assert f"#   {source}: " in header and "licence" in header, source
    assert "LICENSES.md" in header
    # #36: the package ships the default (permissive) build only: no research-only or GPL-declared rows.
    from ernie_zoo.data.sentiment_lexicon import SOURCE_TERMS

    used = {s for sources in shipped.sources.values() for s in sources}
    assert used and all(SOURCE_TERMS[s] == "permissive" for s in used), used
    assert "GPL" not in header and "terms: research" not in header and "terms: gpl" not in header


def test_classifier_computes_its_lexicon_bits_starts_at_zero_and_roundtrips(
    tiny_tokenizer, make_config, lexicon, tmp_path
):
    torch.manual_seed(0)
    plain = ErnieZooForSequenceClassification(make_config(num_labels=2)).eval()
    model = ErnieZooForSequenceClassification(
        make_config(num_labels=2, sentiment_features=list(FEATURES))
    ).eval()
    model.load_state_dict(plain.state_dict(), strict=False)  # everything but lexicon_proj
    for m in (plain, model):
        m.load_char_tables(tiny_tokenizer)
    assert model.lexicon_proj.weight.shape[1] == len(FEATURES) and not model.lexicon_proj.weight.any()
    texts = ["这家店很好", "不好，很失望"]
    enc = tiny_tokenizer(texts, padding=True, return_tensors="pt")
    model.set_sentiment_lexicon(
        lexicon,
        token_texts(tiny_tokenizer.get_vocab(), tiny_tokenizer.all_special_tokens, tiny_tokenizer.unk_token),
    )
    # The bits the model computes from the ids: those of the text the tokens spell, none on [CLS]/[SEP]/[PAD].
    ids = model._lexicon_ids_for(enc["input_ids"])
    bit = {name: 1 << k for k, name in enumerate(FEATURES)}
    tokens = tiny_tokenizer.convert_ids_to_tokens(enc["input_ids"][1])
    assert tokens[:3] == ["[CLS]", "不", "好"] and ids[1, :3].tolist() == [
        0,
        bit["NOT"],
        bit["POS"] | bit["FLIP"],
    ]
    assert ids[0, -1] == 0 and ids[1, 4:7].tolist() == [bit["DEG"], bit["NEG"], bit["NEG"]]  # 很 失 望
    with torch.no_grad():
        base = plain(**enc).logits
        torch.testing.assert_close(model(**enc).logits, base)  # zero projection: no change
        model.lexicon_proj.weight.normal_()
        moved = model(**enc).logits
        assert not torch.allclose(moved, base)
        torch.testing.assert_close(model(**enc, lexicon_ids=ids).logits, moved)  # given or computed: the same
        assert not torch.allclose(model(**enc, lexicon_ids=torch.zeros_like(ids)).logits, moved)
        torch.testing.assert_close(
            plain(**enc, lexicon_ids=ids).logits, base
        )  # a plain classifier ignores them
        with pytest.raises(ValueError, match="lexicon_ids shape"):
            model(**enc, lexicon_ids=ids[:, :2])
    with pytest.raises(ValueError, match="config.sentiment_features"):
        plain.set_sentiment_lexicon(lexicon)

    model.save_pretrained(tmp_path / "m")
    tiny_tokenizer.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / SENTIMENT_LEXICON_FILE).is_file()
    reloaded = ErnieZooForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    assert reloaded.sentiment_lexicon.same_as(lexicon)

    # Plain transformers loads the directory with its lexicon and computes the same bits: the same logits.
    from transformers import AutoModelForSequenceClassification

    import ernie_zoo  # noqa: F401  (registers the architecture with the Auto classes)

    auto = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**enc).logits, moved)
        torch.testing.assert_close(auto(**enc).logits, moved)
    # Without its tokenizer beside it the model cannot spell its tokens: it runs without the bits, warned.
    (tmp_path / "m" / "tokenizer.json").unlink()
    blind = ErnieZooForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        assert not torch.allclose(blind(**enc).logits, moved)


# ------------------------------------------------------------------------------------- fine-tuning + Taskflow

TRAIN_WORDS = {"漂亮": 1, "满意": 1, "喜欢": 1, "开心": 1, "失望": -1, "难过": -1, "糟糕": -1, "讨厌": -1}
DEV_WORDS = {"美丽": 1, "高兴": 1, "幸福": 1, "悲伤": -1, "痛苦": -1, "可怕": -1}  # characters never trained


def _lexicon_only_task(tmp_path):
    """Texts "我觉得<word>。" whose polarity shows nowhere but in the lexicon: the dev words' characters never occur
    in train (the vocabulary has them, their embeddings never train), so only the lexicon tells them."""
    lexicon = SentimentLexicon(words={w: (p, 0.8) for w, p in {**TRAIN_WORDS, **DEV_WORDS}.items()})
    lexicon.save(tmp_path / "lexicon.tsv")
    rng = random.Random(0)
    label = {1: "positive", -1: "negative"}
    for split, words, n in (("train", TRAIN_WORDS, 128), ("dev", DEV_WORDS, 36)):
        rows = [
            {"text": f"我觉得{w}。", "label": label[words[w]]}
            for w in (rng.choice(list(words)) for _ in range(n))
        ]
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    # A vocabulary of every word's characters: the model spells its tokens to find the lexicon's words ([UNK] never
    # matches one).
    ErnieZooTokenizerFast.train_vocab(
        [f"我觉得{w}。" for w in {**TRAIN_WORDS, **DEV_WORDS}],
        vocab_size=200,
        min_frequency=1,
        show_progress=False,
    ).save_pretrained(tmp_path / "tokenizer")


def _run(tmp_path, out, lexicon, method="full"):
    return run_finetune(
        build_args(
            {
                "task": "sequence_classification",
                "data": {
                    "train_file": str(tmp_path / "train.jsonl"),
                    "dev_file": str(tmp_path / "dev.jsonl"),
                    "lexicon": str(tmp_path / "lexicon.tsv") if lexicon else None,
                },
                "model": {
                    "tokenizer": str(tmp_path / "tokenizer"),
                    "config_overrides": {**SMALL, "initializer_range": 0.02},
                },
                "method": {"method": method},
                "train": {
                    "output_dir": str(tmp_path / out),
                    "max_steps": 60,
                    "eval_every": 20,
                    "batch_size": 16,
                    "learning_rate": 5e-3 if method == "full" else 1e-2,
                    "seed": 0,
                    # the training words' characters hide half the time: the bits (computed before the
                    # dropout) must carry the polarity
                    "token_dropout": 0.5,
                    "tensorboard": False,
                    **QUIET,
                },
            }
        )
    )


def test_fine_tuning_learns_polarity_from_the_lexicon_and_taskflow_uses_it(tmp_path):
    _lexicon_only_task(tmp_path)
    without = _run(tmp_path, "plain", lexicon=False)
    with_lexicon = _run(tmp_path, "lex", lexicon=True)
    print(
        "dev accuracy without / with the lexicon:",
        without["dev"]["accuracy"],
        with_lexicon["dev"]["accuracy"],
    )
    assert with_lexicon["dev"]["accuracy"] >= 0.9
    assert (
        without["dev"]["accuracy"] <= 0.75
    )  # the dev words' embeddings are untrained: a guess without the lexicon

    out = tmp_path / "lex"
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["sentiment_features"] == list(FEATURES)
    assert load_sentiment_lexicon(out / SENTIMENT_LEXICON_FILE).same_as(
        load_sentiment_lexicon(tmp_path / "lexicon.tsv")
    )

    from ernie_zoo.taskflow import Taskflow

    senta = Taskflow("sentiment_analysis", task_path=str(out))
    texts = ["我觉得幸福。", "我觉得可怕。", "我不觉得可怕。"]
    ours = senta(texts)
    assert [r["label"] for r in ours[:2]] == ["positive", "negative"]
    # transformers' pipeline on the same directory: the model computes its bits itself, so the same scores
    from transformers import pipeline

    theirs = pipeline("text-classification", model=str(out))(texts)
    assert [r["label"] for r in theirs] == [r["label"] for r in ours]
    assert [r["score"] for r in theirs] == pytest.approx([r["score"] for r in ours], abs=1e-5)

    # A saved lexicon classifier without its lexicon file is refused, not run blind.
    blind = tmp_path / "blind"
    shutil.copytree(out, blind, ignore=shutil.ignore_patterns(SENTIMENT_LEXICON_FILE, "checkpoints"))
    with pytest.raises(ValueError, match=f"no {SENTIMENT_LEXICON_FILE}"):
        Taskflow("sentiment_analysis", task_path=str(blind))


def test_a_lora_adapter_carries_the_lexicon(tmp_path):
    _lexicon_only_task(tmp_path)
    result = _run(tmp_path, "lora", lexicon=True, method="lora")
    adapter, _ = load_finetuned(tmp_path / "lora" / "adapter")
    assert unwrap(adapter).sentiment_lexicon.same_as(result["model"].sentiment_lexicon)
    assert (tmp_path / "lora" / "adapter" / SENTIMENT_LEXICON_FILE).is_file()


def test_a_sentiment_lexicon_reads_single_texts_only():
    with pytest.raises(ValueError, match="data.lexicon"):
        build_args(
            {
                "task": "sequence_classification",
                "data": {"train_file": "x.jsonl", "text_pair_column": "b", "lexicon": "lexicon.tsv"},
            }
        )

"""Real ERNIE 3.0 / BERT-zh checkpoints load into ErnieZoo classes and compute exactly what they computed before."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    ErnieConfig,
    ErnieForMaskedLM,
    ErnieForSequenceClassification,
)

from ernie_zoo import ErnieZooForMaskedLM, ErnieZooForSequenceClassification
from ernie_zoo.models.convert import load_pretrained_checkpoint

ARCH = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)


def _save_reference(model_cls, config_cls, tokenizer, path, **extra):
    torch.manual_seed(0)
    config = config_cls(vocab_size=len(tokenizer), **ARCH, **extra)
    model = model_cls(config).eval()
    model.save_pretrained(path)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    (path / "vocab.txt").write_text("".join(token + "\n" for token, _ in vocab), encoding="utf-8")
    return model


@pytest.mark.parametrize("fusion", ["add", "concat"])
@pytest.mark.parametrize("source", ["ernie", "bert"])
def test_checkpoint_with_zero_features_is_identical(source, fusion, tiny_tokenizer, zh_sentences, tmp_path):
    if source == "ernie":
        ref = _save_reference(ErnieForMaskedLM, ErnieConfig, tiny_tokenizer, tmp_path, use_task_id=True)
    else:
        ref = _save_reference(BertForMaskedLM, BertConfig, tiny_tokenizer, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == source
    model, tokenizer = load_pretrained_checkpoint(tmp_path, feature_fusion=fusion, use_stroke_sequence=True)
    model.eval()
    assert isinstance(model, ErnieZooForMaskedLM)
    assert model.config.use_task_id == (source == "ernie")
    batch = tokenizer(zh_sentences[:6], padding=True, return_tensors="pt")
    assert (batch["pinyin_ids"] > 0).any()  # the features are really fed
    assert int(model.ernie.embeddings.char_features.radical_ids.max()) > 0
    plain = {k: v for k, v in batch.items() if k != "pinyin_ids"}
    with torch.no_grad():
        expected = ref(**plain).logits
        got = model(**batch).logits
    assert torch.equal(expected, got)


def test_head_weights_carry_over(tiny_tokenizer, zh_sentences, tmp_path):
    ref = _save_reference(ErnieForSequenceClassification, ErnieConfig, tiny_tokenizer, tmp_path, num_labels=3)
    model, tokenizer = load_pretrained_checkpoint(tmp_path, model_class=ErnieZooForSequenceClassification)
    batch = tokenizer(zh_sentences[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(
            ref(**{k: v for k, v in batch.items() if k != "pinyin_ids"}).logits, model.eval()(**batch).logits
        )


def test_vocab_txt_is_read_not_all_unk(tiny_tokenizer, tmp_path):
    _save_reference(ErnieForMaskedLM, ErnieConfig, tiny_tokenizer, tmp_path)
    _, tokenizer = load_pretrained_checkpoint(tmp_path)
    ids = tokenizer("银行行长")["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert ids == tiny_tokenizer("银行行长")["input_ids"]


def test_bad_sources_give_clear_errors(tmp_path, tiny_tokenizer):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type='gpt2'"):
        load_pretrained_checkpoint(tmp_path)
    other = tmp_path / "wrong-size"
    other.mkdir()
    _save_reference(ErnieForMaskedLM, ErnieConfig, tiny_tokenizer, other)
    config = json.loads((other / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="lacks encoder weights"):
        load_pretrained_checkpoint(other)


def test_convert_cli_writes_a_loadable_directory(tiny_tokenizer, zh_sentences, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ernie_zoo.cli import main

    src, dst = tmp_path / "ernie", tmp_path / "zoo"
    ref = _save_reference(ErnieForMaskedLM, ErnieConfig, tiny_tokenizer, src.mkdir() or src, use_task_id=True)
    assert main(["convert", str(src), str(dst), "--fusion", "concat"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    model = AutoModelForMaskedLM.from_pretrained(dst).eval()
    tokenizer = AutoTokenizer.from_pretrained(dst)
    assert isinstance(model, ErnieZooForMaskedLM) and model.config.feature_fusion == "concat"
    batch = tokenizer(zh_sentences[:3], padding=True, return_tensors="pt")
    with torch.no_grad():
        plain = {k: v for k, v in batch.items() if k != "pinyin_ids"}
        assert torch.equal(ref(**plain).logits, model(**batch).logits)


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    from ernie_zoo.utils import atomic_directory

    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("first")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("crash mid-save")
    assert (target / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_atomic_write_json_publishes_a_whole_readable_file(tmp_path):
    import json as _json
    import stat

    from ernie_zoo.utils import atomic_write_json

    target = tmp_path / "sub" / "m.json"
    atomic_write_json(target, {"名": "银行", "n": 1})
    assert _json.loads(target.read_text(encoding="utf-8")) == {"名": "银行", "n": 1}
    assert "银行" in target.read_text(encoding="utf-8")  # UTF-8, not \\u escapes
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's 0600
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    assert _json.loads(target.read_text(encoding="utf-8"))["n"] == 1  # old content survives a failed write
    assert [p.name for p in target.parent.iterdir()] == ["m.json"]

"""ErnieZoo models: every head x feature combination, save/load, Auto classes, generation, meta-device presets."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

import ernie_zoo  # noqa: F401  (registers the Auto classes)
from ernie_zoo import (
    ErnieZooConfig,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
)
from ernie_zoo.models.presets import PRESETS, count_parameters, preset_config

FEATURES = {
    "none": dict(use_pinyin=False, use_radical=False, use_strokes=False),
    "pinyin": dict(use_pinyin=True, use_radical=False, use_strokes=False),
    "radical+strokes": dict(use_pinyin=False, use_radical=True, use_strokes=True),
    "all-add": dict(use_stroke_sequence=True),
    "all-concat": dict(use_stroke_sequence=True, feature_fusion="concat", char_feature_dim=8),
}
HEADS = {
    "base": (ErnieZooModel, AutoModel),
    "mlm": (ErnieZooForMaskedLM, AutoModelForMaskedLM),
    "seq-cls": (ErnieZooForSequenceClassification, AutoModelForSequenceClassification),
    "tok-cls": (ErnieZooForTokenClassification, AutoModelForTokenClassification),
    "causal": (ErnieZooForCausalLM, AutoModelForCausalLM),
}


def _build(cls, config, tokenizer, seed=0):
    torch.manual_seed(seed)
    model = cls(config)
    model.load_char_tables(tokenizer)
    # Zero-initialised additive features would make every feature combination look alike: randomise them so the
    # tests see the features act.
    features = model.base_model.embeddings.char_features
    if features is not None:
        for module in features.modules():
            if isinstance(module, torch.nn.Embedding):
                torch.nn.init.normal_(module.weight, std=0.02)
    return model.eval()


def _batch(tokenizer, sentences, n=3):
    return tokenizer(sentences[:n], padding=True, return_tensors="pt")


@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("head", HEADS)
def test_forward_shapes(head, features, tiny_tokenizer, make_config, zh_sentences):
    config = make_config(num_labels=5, **FEATURES[features])
    model = _build(HEADS[head][0], config, tiny_tokenizer)
    batch = _batch(tiny_tokenizer, zh_sentences)
    b, t = batch["input_ids"].shape
    with torch.no_grad():
        out = model(**batch)
    expected = {
        "base": ("last_hidden_state", (b, t, 32)),
        "mlm": ("logits", (b, t, len(tiny_tokenizer))),
        "seq-cls": ("logits", (b, 5)),
        "tok-cls": ("logits", (b, t, 5)),
        "causal": ("logits", (b, t, len(tiny_tokenizer))),
    }[head]
    assert tuple(getattr(out, expected[0]).shape) == expected[1]
    assert torch.isfinite(getattr(out, expected[0])).all()


def test_features_change_the_output(tiny_tokenizer, make_config, zh_sentences):
    batch = _batch(tiny_tokenizer, zh_sentences)
    config = make_config(**FEATURES["all-add"])
    model = _build(ErnieZooModel, config, tiny_tokenizer)
    with torch.no_grad():
        with_context = model(**batch).last_hidden_state
        without_pinyin = model(**{k: v for k, v in batch.items() if k != "pinyin_ids"}).last_hidden_state
        zero_pinyin = model(
            **{**batch, "pinyin_ids": torch.zeros_like(batch["pinyin_ids"])}
        ).last_hidden_state
    # 银行行长: context pinyin (hang2) differs from the default reading of 行 (xing2), so the outputs differ.
    assert not torch.allclose(with_context, without_pinyin)
    assert not torch.allclose(with_context, zero_pinyin)


def test_pinyin_shape_mismatch_is_a_clear_error(tiny_tokenizer, make_config, zh_sentences):
    model = _build(ErnieZooModel, make_config(), tiny_tokenizer)
    batch = _batch(tiny_tokenizer, zh_sentences)
    batch["pinyin_ids"] = batch["pinyin_ids"][:, :-1]
    with pytest.raises(ValueError, match="pinyin_ids shape"):
        model(**batch)


@pytest.mark.parametrize("features", ["none", "all-add", "all-concat"])
@pytest.mark.parametrize("head", HEADS)
def test_save_load_round_trip_is_exact(head, features, tiny_tokenizer, make_config, zh_sentences, tmp_path):
    cls, auto_cls = HEADS[head]
    model = _build(cls, make_config(num_labels=3, **FEATURES[features]), tiny_tokenizer, seed=1)
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = auto_cls.from_pretrained(tmp_path).eval()
    assert type(loaded) is cls
    original, reloaded = model.state_dict(), loaded.state_dict()
    assert original.keys() == reloaded.keys()
    for key in original:
        assert torch.equal(original[key], reloaded[key]), key
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    batch = _batch(tokenizer, zh_sentences)
    with torch.no_grad():
        a, b = model(**batch), loaded(**batch)
    assert torch.equal(a[0], b[0])


def test_char_tables_are_saved_with_the_model(tiny_tokenizer, make_config, tmp_path):
    model = _build(ErnieZooForMaskedLM, make_config(), tiny_tokenizer)
    model.save_pretrained(tmp_path)
    loaded = ErnieZooForMaskedLM.from_pretrained(tmp_path)
    he = tiny_tokenizer.convert_tokens_to_ids("河")
    tables = loaded.ernie.embeddings.char_features
    assert he != tiny_tokenizer.unk_token_id
    assert int(tables.radical_ids[he]) == 85  # 河: radical 85 水/氵
    assert int(tables.stroke_counts[he]) == 8
    # 行's default reading is xing2; the table must hold it even though context can change it.
    from ernie_zoo.tokenization.pinyin import decode_pinyin_id

    xing = tiny_tokenizer.convert_tokens_to_ids("行")
    assert decode_pinyin_id(int(tables.default_pinyin_ids[xing])) == "xing2"


def test_auto_config_lookup(make_config, tmp_path):
    make_config().save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is ErnieZooConfig


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(feature_fusion="mul"), "feature_fusion"),
        (dict(hidden_size=30, num_attention_heads=4), "multiple of num_attention_heads"),
        (dict(num_radicals=0), "num_radicals"),
    ],
)
def test_bad_config_is_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        ErnieZooConfig(**bad)


@pytest.mark.parametrize("features", ["none", "all-add"])
def test_generate_greedy_sample_beam_with_kv_cache(features, tiny_tokenizer, make_config):
    model = _build(ErnieZooForCausalLM, make_config(**FEATURES[features]), tiny_tokenizer)
    assert model.config.is_decoder
    prompt = tiny_tokenizer(["床前明月光"], return_tensors="pt", add_special_tokens=False)
    kwargs = dict(max_new_tokens=6, pad_token_id=tiny_tokenizer.pad_token_id)
    cached = model.generate(**prompt, do_sample=False, use_cache=True, **kwargs)
    uncached = model.generate(**prompt, do_sample=False, use_cache=False, **kwargs)
    assert cached.shape == (1, prompt["input_ids"].shape[1] + 6)
    assert torch.equal(cached, uncached)  # the KV cache changes speed, not results
    torch.manual_seed(0)
    sampled = model.generate(**prompt, do_sample=True, top_p=0.9, temperature=0.8, **kwargs)
    torch.manual_seed(0)
    assert torch.equal(
        sampled, model.generate(**prompt, do_sample=True, top_p=0.9, temperature=0.8, **kwargs)
    )
    beams = model.generate(**prompt, num_beams=3, num_return_sequences=2, do_sample=False, **kwargs)
    assert beams.shape[0] == 2


def test_causal_is_causal(tiny_tokenizer, make_config, zh_sentences):
    """Changing a later token never changes earlier logits (the decoder attends left only)."""
    model = _build(ErnieZooForCausalLM, make_config(), tiny_tokenizer)
    ids = tiny_tokenizer(zh_sentences[0], return_tensors="pt")["input_ids"]
    changed = ids.clone()
    changed[0, -2] = tiny_tokenizer.convert_tokens_to_ids("河")
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=changed).logits
    assert torch.equal(a[0, :-2], b[0, :-2])
    assert not torch.equal(a[0, -2:], b[0, -2:])


def _analytic_mlm_count(c) -> int:
    """Parameters of ErnieZooForMaskedLM written out by hand (decoder weight tied to the word embeddings)."""
    h, f, v, n = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_hidden_layers
    embeddings = (v + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h
    if c.use_task_id:
        embeddings += c.task_type_vocab_size * h
    features = 0
    d = h if c.feature_fusion == "add" else c.char_feature_dim
    if c.use_pinyin:
        features += (c.pinyin_vocab_size // 6 + 6) * d
    if c.use_radical:
        features += (c.num_radicals + 1) * d
    if c.use_strokes:
        features += (c.max_strokes + 1) * d
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * (2 * h)
    head = (h * h + h) + 2 * h + v  # transform dense + LayerNorm + output bias
    return embeddings + features + n * layer + head


@pytest.mark.parametrize("name", ["tiny", "mini", "base", "100b"])
def test_presets_have_exact_meta_device_counts(name):
    config = preset_config(name)
    assert count_parameters(config) == _analytic_mlm_count(config)


def test_100b_preset_is_about_100b():
    n = count_parameters(preset_config("100b"))
    assert 95e9 < n < 105e9
    assert n == 101_216_818_240  # the number README and the 100B recipe quote


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        preset_config("huge")
    assert "mini" in PRESETS

"""Bottleneck adapters (Houlsby / Pfeiffer): placement, identity at init, what trains, save/load by path."""

from __future__ import annotations

import json

import pytest
import torch

from ernie_zoo import ErnieZooForSequenceClassification
from ernie_zoo.finetune import BottleneckConfig, BottleneckModel, load_adapter
from ernie_zoo.finetune.bottleneck import BottleneckLayer


def _base(tokenizer, make_config, seed=0):
    torch.manual_seed(seed)
    model = ErnieZooForSequenceClassification(make_config(num_labels=2))
    model.load_char_tables(tokenizer)
    return model.eval()


@pytest.fixture
def batch(tiny_tokenizer, zh_sentences):
    return tiny_tokenizer(zh_sentences[:4], padding=True, return_tensors="pt")


@pytest.mark.parametrize(("mode", "per_layer"), [("houlsby", 2), ("pfeiffer", 1)])
def test_placement_and_identity_at_init(mode, per_layer, tiny_tokenizer, make_config, batch):
    base = _base(tiny_tokenizer, make_config)
    with torch.no_grad():
        expected = base(**batch).logits
    model = BottleneckModel(
        base, BottleneckConfig(mode=mode, reduction_factor=4, modules_to_save=["classifier"])
    )
    layers = base.config.num_hidden_layers
    assert len(model.targets) == per_layer * layers
    assert all(t.endswith("output.dense") for t in model.targets)
    attention = [t for t in model.targets if "attention" in t]
    assert len(attention) == (layers if mode == "houlsby" else 0)
    wrapped = base.ernie.encoder.layer[0].output.dense
    assert isinstance(wrapped, BottleneckLayer) and wrapped.adapter.down.out_features == 32 // 4
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, expected)  # up-projection starts at zero


def test_only_adapters_and_head_train(tiny_tokenizer, make_config, batch):
    model = BottleneckModel(
        _base(tiny_tokenizer, make_config),
        BottleneckConfig(mode="houlsby", reduction_factor=4, modules_to_save=["classifier"]),
    )
    trainable = {n for n, p in model.base_model.named_parameters() if p.requires_grad}
    assert trainable and all(".adapter." in n or n.startswith("classifier.") for n in trainable)
    assert "classifier.weight" in trainable
    n_train, n_total = model.get_nb_trainable_parameters()
    assert 0 < n_train < 0.2 * n_total


def test_save_load_by_path_gives_identical_predictions(tiny_tokenizer, make_config, batch, tmp_path):
    model = BottleneckModel(
        _base(tiny_tokenizer, make_config),
        BottleneckConfig(mode="pfeiffer", reduction_factor=4, modules_to_save=["classifier"]),
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(3):
        model(**batch, labels=torch.tensor([0, 1, 0, 1])).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path / "ad")
    config = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert config["peft_type"] == "BOTTLENECK" and config["mode"] == "pfeiffer"
    assert (tmp_path / "ad" / "adapter_model.safetensors").is_file()

    fresh = _base(tiny_tokenizer, make_config)  # same seed: same frozen base, untrained head
    with torch.no_grad():
        assert not torch.allclose(fresh(**batch).logits, expected)
    loaded = load_adapter(fresh, tmp_path / "ad")
    assert isinstance(loaded, BottleneckModel)
    assert not any(p.requires_grad for p in loaded.parameters())
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, expected)

    # unload() restores plain Linear layers
    plain = loaded.unload()
    assert not any(isinstance(m, BottleneckLayer) for m in plain.modules())


def test_loading_onto_a_different_model_fails_clearly(tiny_tokenizer, make_config, tmp_path):
    BottleneckModel(
        _base(tiny_tokenizer, make_config), BottleneckConfig(mode="houlsby", reduction_factor=4)
    ).save_pretrained(tmp_path / "ad")
    torch.manual_seed(0)
    other = ErnieZooForSequenceClassification(make_config(num_labels=2, num_hidden_layers=1))
    with pytest.raises(ValueError, match="does not fit"):
        load_adapter(other, tmp_path / "ad")
    with pytest.raises(ValueError, match="no adapter_config.json"):
        load_adapter(other, tmp_path)


def test_config_validation():
    with pytest.raises(ValueError, match="mode"):
        BottleneckConfig(mode="parallel")
    with pytest.raises(ValueError, match="non_linearity"):
        BottleneckConfig(non_linearity="softmax")
    assert BottleneckConfig(bottleneck_size=5).width(64) == 5
    assert BottleneckConfig(reduction_factor=16).width(64) == 4

"""The training pieces pretraining and fine-tuning share (`ernie_zoo.training.core`): one weight-decay rule, one
warm-up + decay schedule, seeding, the device; and fine-tuning really uses them (its behaviour change stated)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from ernie_zoo.training.core import (
    adamw,
    decays,
    lr_lambda,
    param_groups,
    seed_everything,
    warmup_decay,
)
from ernie_zoo.utils import resolve_device


def _names(model, groups):
    names = {id(p): n for n, p in model.named_parameters()}
    return [{names[id(p)] for p in g["params"]} for g in groups]


def test_one_decay_rule_for_pretraining_and_fine_tuning(make_config):
    from ernie_zoo.models import ErnieZooForMaskedLM, ErnieZooForSequenceClassification

    config = make_config(feature_fusion="concat", use_stroke_sequence=True)
    for model in (ErnieZooForMaskedLM(config), ErnieZooForSequenceClassification(config)):
        decayed, kept = _names(model, param_groups(model, 0.01))
        assert decayed and kept and not decayed & kept
        # no decay: biases (every 1-D parameter), LayerNorm weights, the whole embedding block
        assert all(
            "embeddings." not in n and "LayerNorm" not in n and not n.endswith("bias") for n in decayed
        )
        assert {
            "ernie.embeddings.word_embeddings.weight",
            "ernie.embeddings.position_embeddings.weight",
            "ernie.embeddings.char_features.pinyin_syllable.weight",
            "ernie.embeddings.char_features.fusion.weight",  # the char-feature projection, inside the block
            "ernie.encoder.layer.0.output.LayerNorm.weight",
            "ernie.encoder.layer.1.attention.self.query.bias",
        } <= kept
        assert "ernie.encoder.layer.0.attention.self.query.weight" in decayed
        assert "ernie.encoder.layer.1.output.dense.weight" in decayed
    assert "classifier.weight" in decayed  # the task head decays
    opt = torch.optim.AdamW(param_groups(model, 0.01))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]


def test_fine_tunings_behaviour_change_is_the_embedding_block(make_config):
    """Before the shared rule, fine-tuning decayed every matrix except LayerNorm's: the embedding tables and the
    char-feature fusion were decayed. Exactly those are the parameters that changed group."""
    from ernie_zoo.models import ErnieZooForSequenceClassification

    model = ErnieZooForSequenceClassification(make_config(feature_fusion="concat"))

    def old_rule(name, p):  # finetune's run before the shared rule
        return not (p.dim() < 2 or "LayerNorm" in name or "layer_norm" in name)

    changed = {n for n, p in model.named_parameters() if old_rule(n, p) != decays(n, p)}
    assert changed == {
        n for n, p in model.named_parameters() if p.dim() >= 2 and n.startswith("ernie.embeddings.")
    }
    assert "ernie.embeddings.word_embeddings.weight" in changed
    assert all(old_rule(n, p) and not decays(n, p) for n, p in model.named_parameters() if n in changed)


def test_lora_factors_decay_outside_the_embedding_block(make_config):
    import peft

    from ernie_zoo.models import ErnieZooForSequenceClassification

    model = ErnieZooForSequenceClassification(make_config(feature_fusion="concat"))
    lora = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=2, target_modules=["query", "fusion"], task_type="SEQ_CLS", modules_to_save=["classifier"]
        ),
    )
    decayed, kept = _names(lora, param_groups(lora, 0.01))
    assert any("query.lora_A" in n for n in decayed)
    assert any("fusion.lora_A" in n for n in kept)  # LoRA on the char-feature fusion: the embedding block
    assert all("lora" in n or "classifier" in n for n in decayed | kept)  # only what trains
    frozen = lora.base_model.model.ernie.encoder.layer[0].attention.self.query.base_layer.weight
    assert not frozen.requires_grad and all(
        frozen is not p for g in param_groups(lora, 0.01) for p in g["params"]
    )


def test_head_learning_rate_is_a_group_of_its_own(make_config):
    import peft

    from ernie_zoo.models import ErnieZooForTokenClassificationCRF

    model = ErnieZooForTokenClassificationCRF(make_config(num_labels=5))
    assert [g.get("lr") for g in param_groups(model, 0.01, ("classifier", "crf"))] == [
        None,
        None,
    ]  # no head_lr
    groups = param_groups(model, 0.01, ("classifier", "crf"), head_lr=2e-3)
    named = _names(model, groups)
    heads = [names for g, names in zip(groups, named) if g.get("lr") == 2e-3]
    assert set().union(*heads) == {
        n for n, _ in model.named_parameters() if n.startswith(("classifier.", "crf."))
    }
    assert {"classifier.bias", "crf.transitions"} <= set().union(*heads)
    assert sum(len(n) for n in named) == len(list(model.parameters()))  # every parameter once
    decays_by_group = {g["weight_decay"] for g in groups if g.get("lr") == 2e-3}
    assert decays_by_group == {0.0, 0.01}  # the head's weights decay, its biases do not
    lora = peft.get_peft_model(
        model, peft.LoraConfig(r=2, target_modules=["query"], modules_to_save=["classifier", "crf"])
    )
    lora_named = _names(lora, groups := param_groups(lora, 0.01, ("classifier", "crf"), head_lr=2e-3))
    head_names = set().union(*(n for g, n in zip(groups, lora_named) if g.get("lr") == 2e-3))
    assert head_names and all(
        "modules_to_save" in n for n in head_names
    )  # the trained copies, not the originals
    assert not any("lora_" in n for n in head_names)
    optimizer = torch.optim.AdamW(groups, lr=5e-5)
    scheduler = warmup_decay(optimizer, warmup_steps=0, total_steps=10)
    optimizer.step()
    scheduler.step()
    assert sorted({g["lr"] for g in optimizer.param_groups}) == pytest.approx([4.5e-5, 1.8e-3])


def test_nothing_trainable_is_an_error(make_config):
    from ernie_zoo.models import ErnieZooForSequenceClassification

    model = ErnieZooForSequenceClassification(make_config())
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        adamw(model, 1e-3, 0.01)


def test_the_schedule_is_fine_tunings_old_one_to_rounding():
    """Fine-tuning's own linear schedule, (total - s) / (total - warmup), and the shared 1 - progress agree to the
    last bit or two (the shared form is pretraining's, kept bit for bit)."""

    def old(warmup, total):
        def factor(step):
            if step < warmup:
                return (step + 1) / max(1, warmup)
            return max(0.0, (total - step) / max(1, total - warmup))

        return factor

    for warmup, total in [(0, 1), (0, 7), (3, 50), (6, 100), (11, 187), (60, 1000)]:
        new, before = lr_lambda(warmup, total, "linear"), old(warmup, total)
        for s in range(total + 1):
            assert new(s) == pytest.approx(before(s), rel=0, abs=2e-16), (warmup, total, s)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)
    sched = warmup_decay(opt, warmup_steps=2, total_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [0.5, 1.0, 1.0, 0.5]


def test_seed_everything_seeds_python_numpy_and_torch():
    seed_everything(7)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(7)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_device_resolution_checks_cuda():
    """One `ernie_zoo.utils.resolve_device` for training (errors name the recipe key) and Taskflow (device=)."""
    assert resolve_device("cpu") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert (
        resolve_device("auto").type
        == resolve_device(None).type
        == ("cuda" if torch.cuda.is_available() else "cpu")
    )
    with pytest.raises(ValueError, match="device='meta': must be cpu or cuda"):
        resolve_device("meta")
    with pytest.raises(TypeError, match="device must be a str, int or torch.device, got bool"):
        resolve_device(True)
    with pytest.raises(ValueError, match="recipe key 'train.device' = 'gpu7': not a device"):
        resolve_device("gpu7", key="train.device")
    if not torch.cuda.is_available():
        with pytest.raises(
            ValueError, match="recipe key 'train.device' = 'cuda:1', but CUDA is not available"
        ):
            resolve_device("cuda:1", key="train.device")
        with pytest.raises(ValueError, match=r"device=1, but CUDA is not available"):
            resolve_device(1)
    else:
        assert resolve_device(0) == torch.device("cuda:0")


def test_fine_tuning_trains_with_the_shared_groups_and_schedule(tmp_path, monkeypatch):
    """`run_finetune` (full fine-tuning) hands AdamW the shared groups: the embedding block is not decayed."""
    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.training.supervised import SupervisedTraining

    data = Path(__file__).parent / "data/finetune/sentiment.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["label"] == "positive"][:8] + [r for r in rows if r["label"] != "positive"][
        :8
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    seen = {}

    def capture(self):
        seen["groups"] = _names(self.model, self.optimizer.param_groups)
        seen["decay"] = [g["weight_decay"] for g in self.optimizer.param_groups]
        seen["lambda"] = [self.scheduler.lr_lambdas[0](s) for s in range(self.total_steps + 1)]
        raise KeyboardInterrupt

    monkeypatch.setattr(SupervisedTraining, "train", capture)
    args = build_args(
        {
            "data": {"train_file": str(train)},
            "model": {"vocab_size": 300, "config_overrides": {"hidden_size": 32, "num_hidden_layers": 1}},
            "method": {"method": "full"},
            "train": {
                "output_dir": str(tmp_path / "out"),
                "max_steps": 10,
                "warmup_ratio": 0.2,
                "progress": False,
            },
        }
    )
    with pytest.raises(KeyboardInterrupt):
        run_finetune(args)
    decayed, kept = seen["groups"]
    assert seen["decay"] == [0.01, 0.0]
    assert "ernie.embeddings.word_embeddings.weight" in kept and "classifier.weight" in decayed
    assert seen["lambda"] == [lr_lambda(2, 10)(s) for s in range(11)]

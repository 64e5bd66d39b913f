"""Every adaptation method on a tiny model: it trains (the loss falls), only what should train trains, a saved
adapter loaded onto a fresh base predicts identically, merged LoRA-style adapters equal the unmerged ones, and
methods that cannot work fail with a clear error."""

from __future__ import annotations

import pytest
import torch

from ernie_zoo import ErnieZooForCausalLM, ErnieZooForSequenceClassification, ErnieZooForTokenClassification
from ernie_zoo.finetune import MethodArgs, apply_method, check_supported, load_adapter
from ernie_zoo.finetune.export import unwrap
from ernie_zoo.finetune.methods import default_target_modules
from ernie_zoo.training.supervised import collate

LR = {"full": 3e-3, "prompt_tuning": 3e-2, "p_tuning": 3e-2}


def _model(cls, tokenizer, make_config, seed=0, **overrides):
    torch.manual_seed(seed)
    # A wider init than the default 0.02: a random tiny base whose features already depend on the input, as a
    # pretrained one's do (with std 0.02 every sentence looks alike and frozen-base methods barely move).
    model = cls(make_config(num_labels=3, initializer_range=0.2, **overrides))
    model.load_char_tables(tokenizer)
    return model


def _batch(tokenizer, texts, task):
    enc = tokenizer(texts, truncation=True, max_length=32)
    feats = []
    for i in range(len(texts)):
        f = {k: enc[k][i] for k in enc.keys()}
        if task == "sequence_classification":
            f["labels"] = i % 3
        elif task == "token_classification":
            f["labels"] = [(t + i) % 3 for t in range(len(f["input_ids"]))]
        else:
            f.pop("pinyin_ids")
            f["labels"] = list(f["input_ids"])
        feats.append(f)
    return collate(feats, tokenizer.pad_token_id)


def _train(model, batch, lr, steps=12):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        if type(getattr(model, "base_model", None)).__name__ == "AdaLoraModel":
            model.base_model.update_and_allocate(step)  # needs the gradients: before zero_grad
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def _logits(model, batch):
    model.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return model(**inputs).logits


SEQ_METHODS = [
    "full",
    "lora",
    "adalora",
    "ia3",
    "loha",
    "lokr",
    "prompt_tuning",
    "p_tuning",
    "houlsby",
    "pfeiffer",
]


@pytest.mark.parametrize("method", SEQ_METHODS)
def test_sequence_classification_methods_train_save_load(
    method, tiny_tokenizer, make_config, zh_sentences, tmp_path
):
    batch = _batch(tiny_tokenizer, zh_sentences[:9], "sequence_classification")
    model = _model(ErnieZooForSequenceClassification, tiny_tokenizer, make_config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    margs = MethodArgs(method=method, lora_r=4, reduction_factor=4, num_virtual_tokens=4)
    model, info = apply_method(model, margs, "sequence_classification", total_steps=12)
    assert 0 < info.trainable <= info.total
    if method != "full":
        assert info.fraction < 0.5
    losses = _train(model, batch, LR.get(method, 1e-2))
    assert losses[-1] < losses[0] - 0.05, losses

    base = unwrap(model)
    changed = {n for n, p in base.named_parameters() if n in before and not torch.equal(before[n], p)}
    if method == "full":
        assert "ernie.embeddings.word_embeddings.weight" in changed
    else:  # the frozen base weights must be untouched
        assert not any(n.startswith("ernie.") for n in changed), sorted(changed)[:5]

    expected = _logits(model, batch)
    if method == "full":
        base.save_pretrained(tmp_path / "m")
        reloaded = ErnieZooForSequenceClassification.from_pretrained(tmp_path / "m")
    else:
        model.save_pretrained(str(tmp_path / "adapter"))
        assert (tmp_path / "adapter" / "adapter_config.json").is_file()
        assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
        fresh = _model(ErnieZooForSequenceClassification, tiny_tokenizer, make_config)
        reloaded = load_adapter(fresh, tmp_path / "adapter")
    torch.testing.assert_close(_logits(reloaded, batch), expected)

    if info.mergeable:
        merged = reloaded.merge_and_unload()
        assert type(merged) is ErnieZooForSequenceClassification
        torch.testing.assert_close(_logits(merged, batch), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("method", ["lora", "ia3", "houlsby"])
def test_token_classification_methods(method, tiny_tokenizer, make_config, zh_sentences, tmp_path):
    batch = _batch(tiny_tokenizer, zh_sentences[:6], "token_classification")
    model = _model(ErnieZooForTokenClassification, tiny_tokenizer, make_config)
    model, info = apply_method(
        model, MethodArgs(method=method, lora_r=4, reduction_factor=4), "token_classification"
    )
    losses = _train(model, batch, 1e-2)
    assert losses[-1] < losses[0] - 0.05, losses
    model.save_pretrained(str(tmp_path / "a"))
    fresh = _model(ErnieZooForTokenClassification, tiny_tokenizer, make_config)
    torch.testing.assert_close(_logits(load_adapter(fresh, tmp_path / "a"), batch), _logits(model, batch))


@pytest.mark.parametrize("method", ["lora", "prefix_tuning", "prompt_tuning", "pfeiffer"])
def test_generation_methods(method, tiny_tokenizer, make_config, zh_sentences, tmp_path):
    batch = _batch(tiny_tokenizer, zh_sentences[:6], "generation")
    model = _model(ErnieZooForCausalLM, tiny_tokenizer, make_config)
    margs = MethodArgs(method=method, lora_r=4, reduction_factor=4, num_virtual_tokens=4)
    model, info = apply_method(model, margs, "generation")
    losses = _train(model, batch, LR.get(method, 1e-2))
    assert losses[-1] < losses[0] - 0.05, losses
    model.eval()
    prompt = batch["input_ids"][:1, :4]
    out = model.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False
    )
    assert out.shape[1] > prompt.shape[1]


def test_default_targets_include_fusion_for_concat(tiny_tokenizer, make_config):
    add = _model(ErnieZooForSequenceClassification, tiny_tokenizer, make_config)
    concat = _model(ErnieZooForSequenceClassification, tiny_tokenizer, make_config, feature_fusion="concat")
    assert "fusion" not in default_target_modules(add)
    assert "fusion" in default_target_modules(concat)
    model, _ = apply_method(concat, MethodArgs(method="lora", lora_r=2), "sequence_classification")
    names = [n for n, _ in model.named_modules()]
    assert any(n.endswith("char_features.fusion.lora_A") for n in names)
    assert any(n.endswith("attention.self.query.lora_A") for n in names)


@pytest.mark.parametrize(
    ("method", "task", "match"),
    [
        ("prefix_tuning", "sequence_classification", "past key values"),
        ("prefix_tuning", "token_classification", "past key values"),
        ("prompt_tuning", "token_classification", "labels"),
        ("p_tuning", "token_classification", "labels"),
        ("prompt_tuning", "text_correction", "labels"),
        ("bitfit", "sequence_classification", "unknown method"),
    ],
)
def test_methods_that_cannot_work_say_why(method, task, match):
    with pytest.raises(ValueError, match=match):
        check_supported(method, task)


@pytest.fixture
def lora_qv():
    """A toy method registered in one place, the test: LoRA on the attention's query and value only, for
    sequence classification, at its own default learning rate."""
    from ernie_zoo.finetune import METHODS, Method, register_method

    def config(a, c):
        import peft

        return peft.LoraConfig(
            r=a.lora_r, lora_alpha=a.lora_alpha, target_modules=["query", "value"], **c.peft_kwargs()
        )

    method = register_method(
        Method("lora_qv", config, learning_rate=2e-3, tasks=("sequence_classification",), mergeable=True)
    )
    yield method
    del METHODS[method.name]
    with pytest.raises(ValueError, match="unknown method 'lora_qv'"):
        check_supported("lora_qv", "sequence_classification")


def test_a_registered_method_is_usable_from_a_recipe(lora_qv, tmp_path, capsys):
    from pathlib import Path

    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.finetune.cli import main
    from ernie_zoo.finetune.methods import default_learning_rate

    data = str(Path(__file__).parent / "data" / "finetune" / "sentiment.jsonl")
    recipe = {
        "task": "sequence_classification",
        "data": {"train_file": data, "dev_file": data, "max_length": 24, "max_eval_samples": 8},
        "model": {
            "vocab_size": 300,
            "config_overrides": {
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 64,
            },
        },
        "method": {"method": "lora_qv", "lora_r": 2},
        "train": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "batch_size": 8,
            "progress": False,
            "tensorboard": False,
            "num_threads": 1,
        },
    }
    # validation knows its tasks, --help lists it, its learning rate is the default
    with pytest.raises(ValueError, match="lora_qv supports sequence_classification only"):
        build_args({**recipe, "task": "generation"})
    assert main(["--help"]) == 0
    assert "lora_qv: sequence_classification; learning rate 0.002; merges" in capsys.readouterr().out
    assert default_learning_rate("lora_qv") == 2e-3
    result = run_finetune(build_args(recipe))
    assert result["method"] == "lora_qv" and result["export"]["kind"] == "merged"
    names = [n for n, _ in result["model"].named_modules()]
    assert not any("lora" in n for n in names)  # merged into the base weights
    adapter = (tmp_path / "out" / "adapter" / "adapter_config.json").read_text(encoding="utf-8")
    assert '"query"' in adapter and '"value"' in adapter and '"key"' not in adapter

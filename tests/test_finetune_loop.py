"""`run_finetune` end to end: the three tasks, the output directory (from_pretrained + Taskflow ready), merged ==
unmerged, exact resume after a crash, early stopping, TensorBoard, and the `ernie-finetune` command."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from ernie_zoo.finetune import build_args, load_finetuned, run_finetune
from ernie_zoo.finetune.cli import main as cli_main
from ernie_zoo.finetune.run import FinetuneJob
from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF
from ernie_zoo.training.supervised import SupervisedJob, SupervisedTraining, drop_tokens

DATA = Path(__file__).parent / "data" / "finetune"
# A small random model whose features depend on its input (init std 0.2, see test_finetune_methods).
SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": 0.2,
}
QUIET = {"progress": False, "num_threads": 1}


def _split_sentiment(tmp_path: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (DATA / "sentiment.jsonl").read_text(encoding="utf-8").splitlines()]
    random.Random(0).shuffle(rows)
    parts = {"train": rows[:56], "dev": rows[56:68], "test": rows[68:]}
    paths = {}
    for name, part in parts.items():
        paths[name] = str(tmp_path / f"{name}.jsonl")
        Path(paths[name]).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8"
        )
    return paths


def _sentiment_args(tmp_path, out="out", **train):
    paths = _split_sentiment(tmp_path)
    return build_args(
        {
            "task": "sequence_classification",
            "data": {
                "train_file": paths["train"],
                "dev_file": paths["dev"],
                "test_file": paths["test"],
                "max_length": 32,
            },
            "model": {"vocab_size": 500, "config_overrides": SMALL},
            "method": {"method": "lora", "lora_r": 4},
            "train": {
                "output_dir": str(tmp_path / out),
                "batch_size": 8,
                "learning_rate": 1e-2,
                **QUIET,
                **train,
            },
        }
    )


@torch.no_grad()
def _predict(model, tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    return model(**enc).logits


def test_sequence_classification_lora_output_dir(tmp_path):
    args = _sentiment_args(tmp_path, max_steps=21, eval_every=7)
    result = run_finetune(args)
    out = Path(args.train.output_dir)
    state = json.loads(
        next((out / "checkpoints").glob("checkpoint-*")).joinpath("trainer_state.json").read_text()
    )
    losses = state["state"]["train_losses"]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    assert 0 < result["trainable_fraction"] < 0.5
    assert set(result["dev"]) >= {"accuracy", "macro_f1", "loss"} and "accuracy" in result["test"]
    saved = json.loads((out / "eval_results.json").read_text(encoding="utf-8"))
    assert saved["dev"]["accuracy"] == pytest.approx(result["dev"]["accuracy"])
    assert saved["export"]["kind"] == "merged"

    # output_dir is a plain from_pretrained directory with label names: what Taskflow's task_path= takes
    merged = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert type(merged).__name__ == "ErnieZooForSequenceClassification"
    assert merged.config.id2label == {0: "negative", 1: "positive"}
    assert merged.config.label2id == {"negative": 0, "positive": 1}
    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert {"tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}

    # the unmerged adapter (loaded onto the saved random base by path) predicts what the merged model does
    adapter_model, tokenizer = load_finetuned(out / "adapter")
    texts = ["房间很干净，服务很好", "质量太差，非常失望", "一般般吧"]
    torch.testing.assert_close(
        _predict(merged, tokenizer, texts), _predict(adapter_model, tokenizer, texts), atol=1e-5, rtol=1e-4
    )
    assert (out / "base_model" / "model.safetensors").is_file()
    assert list((out / "runs").glob("events.out.tfevents.*"))
    assert (out / "checkpoints" / "best" / "trainable.safetensors").is_file()
    # `ernie-finetune merge ADAPTER OUT` gives the same plain directory
    assert cli_main(["merge", str(out / "adapter"), str(tmp_path / "merged-again")]) == 0
    again_model, _ = load_finetuned(tmp_path / "merged-again")
    torch.testing.assert_close(_predict(again_model, tokenizer, texts), _predict(merged, tokenizer, texts))
    # the saved recipe repeats the run
    again = build_args(str(out / "finetune_args.yaml"))
    assert again == args

    try:
        from ernie_zoo.taskflow import Taskflow
    except ImportError:  # pragma: no cover - Taskflow is part of the package
        pytest.fail("ernie_zoo.taskflow is not importable")
    senta = Taskflow("sentiment_analysis", task_path=str(out))
    results = senta(texts)
    ours = _predict(merged, tokenizer, texts).argmax(-1).tolist()
    assert [r["label"] for r in results] == [merged.config.id2label[i] for i in ours]


def _stop_after_first_checkpoint(monkeypatch):
    original = SupervisedTraining.save_last

    def crash(self):
        original(self)
        raise KeyboardInterrupt("simulated crash after the first checkpoint")

    monkeypatch.setattr(SupervisedTraining, "save_last", crash)


@pytest.mark.parametrize(("group_by_length", "token_dropout"), [(False, 0.0), (True, 0.0), (False, 0.3)])
def test_resume_after_a_crash_is_exact(tmp_path, monkeypatch, group_by_length, token_dropout):
    common = {
        "max_steps": 6,
        "eval_every": 3,
        "tensorboard": False,
        "learning_rate": 3e-3,
        "group_by_length": group_by_length,
        "token_dropout": token_dropout,
    }

    def args(out, **over):
        a = _sentiment_args(tmp_path, out=out, **{**common, **over})
        a.method.method = "full"
        a.model.config_overrides = {
            **SMALL,
            "hidden_dropout_prob": 0.1,
        }  # dropout: the RNG state must resume too
        return a

    run_finetune(args("straight"))
    with monkeypatch.context() as m:
        _stop_after_first_checkpoint(m)
        with pytest.raises(KeyboardInterrupt):
            run_finetune(args("resumed"))
    assert (tmp_path / "resumed" / "checkpoints" / "checkpoint-3").is_dir()
    with pytest.raises(ValueError, match="not empty"):
        a = args("resumed")
        a.train.resume = "never"
        run_finetune(a)
    state = json.loads((tmp_path / "resumed/checkpoints/checkpoint-3/trainer_state.json").read_text())
    before = state["state"]["train_seconds"]
    assert before > 0  # checkpoints record the training time so far
    with pytest.raises(ValueError, match="group_by_length"):  # a different data order is refused
        a = args("resumed")
        a.train.group_by_length = not group_by_length
        run_finetune(a)
    with pytest.raises(ValueError, match="token_dropout"):  # so are other masks
        run_finetune(args("resumed", token_dropout=0.1 if not token_dropout else 0.0))
    result = run_finetune(args("resumed"))  # resume: auto
    assert result["steps"] == 6
    assert result["train_seconds"] > before  # the resumed run adds to it
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    if token_dropout:  # the masks changed what was learnt
        run_finetune(args("no-dropout", token_dropout=0.0))
        c = load_file(str(tmp_path / "no-dropout" / "model.safetensors"))
        assert any(not torch.equal(a[key], c[key]) for key in a)


def test_token_dropout_masks_only_real_tokens_and_is_seeded():
    special = [0, 1, 2, 3]  # pad, cls, sep, mask
    ids = torch.randint(10, 100, (64, 40))
    ids[:, 0], ids[:, -6] = 1, 2
    ids[:, -5:] = 0
    attention = (ids != 0).long()
    pinyin = torch.randint(1, 50, ids.shape)
    labels = torch.randint(0, 7, ids.shape)
    batch = {"input_ids": ids, "attention_mask": attention, "pinyin_ids": pinyin, "labels": labels}

    def run(seed, p=0.3):
        return drop_tokens(batch, p, 3, special, torch.Generator().manual_seed(seed))

    out = run(0)
    dropped = out["input_ids"] != ids
    real = (ids >= 10) & attention.bool()
    assert not (dropped & ~real).any()  # [CLS], [SEP] and padding are never touched
    assert (out["input_ids"][dropped] == 3).all()
    assert (out["pinyin_ids"][dropped] == 0).all() and torch.equal(
        out["pinyin_ids"][~dropped], pinyin[~dropped]
    )
    assert torch.equal(out["labels"], labels) and torch.equal(out["attention_mask"], attention)
    assert 0.25 < dropped.sum() / real.sum() < 0.35
    assert torch.equal(run(0)["input_ids"], out["input_ids"])  # same generator seed, same masks
    assert not torch.equal(run(1)["input_ids"], out["input_ids"])
    assert torch.equal(run(0, p=0.0)["input_ids"], ids)
    assert torch.equal(batch["input_ids"], ids)  # the input batch is not modified


def test_group_by_length_batches_cover_the_epoch_with_less_padding():
    rng = random.Random(0)
    lengths = [rng.randint(3, 120) for _ in range(1000)]
    features = {"train": [{"input_ids": [0] * n} for n in lengths]}

    def batches(group, seed=42, epoch=0):
        fake = SimpleNamespace(
            features=features, t=SimpleNamespace(batch_size=8, seed=seed, group_by_length=group)
        )
        return SupervisedTraining._epoch_batches(fake, epoch)

    def slots(bs):
        return sum(max(lengths[i] for i in b) * len(b) for b in bs)

    plain, grouped = batches(False), batches(True)
    for bs in (plain, grouped):
        assert sorted(i for b in bs for i in b) == list(range(1000))  # every example once per epoch
        assert len(bs) == 125 and all(len(b) == 8 for b in bs)
    assert slots(grouped) < 0.75 * slots(plain)  # padding: sum(lengths) / slots goes from about 0.5 to 0.95+
    assert sum(lengths) / slots(grouped) > 0.9
    assert grouped == batches(True)  # seeded: a resume sees the same batches
    assert grouped != batches(True, epoch=1)  # a new order each epoch
    # the batch order is shuffled too: not sorted by length across the epoch
    longest = [max(lengths[i] for i in b) for b in grouped]
    assert longest != sorted(longest, reverse=True)


def test_early_stopping_and_best_checkpoint(tmp_path):
    # A learning rate too small to change any prediction: the dev accuracy never improves after the first eval.
    args = _sentiment_args(
        tmp_path, max_steps=30, eval_every=2, patience=2, learning_rate=1e-12, tensorboard=False
    )
    result = run_finetune(args)
    assert result["stopped_early"] and result["steps"] == 6 and result["best_step"] == 2


def _ner_files(tmp_path: Path) -> dict[str, str]:
    people = ["张伟", "李娜", "王芳", "刘洋", "陈明", "赵强", "周杰", "吴磊"]
    places = ["北京", "上海", "广州", "深圳", "杭州", "南京"]
    orgs = ["清华大学", "中国银行", "新华社", "人民医院"]
    templates = ["{PER}在{LOC}工作。", "{PER}是{ORG}的老师。", "{ORG}位于{LOC}。", "昨天{PER}去了{LOC}。"]
    rng = random.Random(0)

    def sentence():
        template = rng.choice(templates)
        text, entities, pos = "", [], 0
        for piece in template.replace("}", "{").split("{"):
            if piece in ("PER", "LOC", "ORG"):
                name = rng.choice({"PER": people, "LOC": places, "ORG": orgs}[piece])
                entities.append({"start": len(text), "end": len(text) + len(name), "type": piece})
                text += name
            else:
                text += piece
            pos += 1
        return {"text": text, "entities": entities}

    paths = {}
    for name, n in (("train", 64), ("dev", 16)):
        paths[name] = str(tmp_path / f"ner_{name}.jsonl")
        Path(paths[name]).write_text(
            "".join(json.dumps(sentence(), ensure_ascii=False) + "\n" for _ in range(n)), encoding="utf-8"
        )
    return paths


def _ner_args(
    tmp_path,
    out,
    train_file,
    dev_file,
    tokenizer=None,
    lexicon=None,
    method="full",
    learning_rate=5e-3,
    **train,
):
    """A CRF tagger (LOC/ORG/PER, BIOES) of the small random model on the given files; `train` overrides the loop."""
    return build_args(
        {
            "task": "token_classification",
            "data": {
                "train_file": train_file,
                "dev_file": dev_file,
                "tag_scheme": "bioes",
                "entity_types": ["LOC", "ORG", "PER"],
                "lexicon": lexicon,
            },
            "model": {"use_crf": True, "vocab_size": 200, "tokenizer": tokenizer, "config_overrides": SMALL},
            "method": {"method": method},
            "train": {
                "output_dir": str(tmp_path / out),
                "max_steps": 60,
                "eval_every": 30,
                "batch_size": 16,
                "learning_rate": learning_rate,
                "seed": 0,
                "tensorboard": False,
                **QUIET,
                **train,
            },
        }
    )


def test_token_classification_crf_lora(tmp_path):
    paths = _ner_files(tmp_path)
    args = build_args(
        {
            "task": "token_classification",
            "data": {
                "train_file": paths["train"],
                "dev_file": paths["dev"],
                "test_file": str(DATA / "ner_bmes.txt"),
                "tag_scheme": "bioes",
            },
            "model": {"use_crf": True, "vocab_size": 200, "config_overrides": SMALL},
            "method": {"method": "lora", "lora_r": 4},
            "train": {
                "output_dir": str(tmp_path / "ner"),
                "max_steps": 40,
                "eval_every": 20,
                "batch_size": 8,
                "learning_rate": 2e-2,
                "tensorboard": False,
                **QUIET,
            },
        }
    )
    result = run_finetune(args)
    print("NER dev", {k: v for k, v in result["dev"].items() if k != "per_type"})
    assert result["dev"]["f1"] > 0.3, result["dev"]
    assert set(result["test"]["per_type"]) <= {"PER", "LOC", "ORG"}
    out = tmp_path / "ner"
    merged, tokenizer = load_finetuned(out)
    assert isinstance(merged, ErnieZooForTokenClassificationCRF)
    assert merged.config.id2label[0] == "O" and "S-PER" in merged.config.label2id
    unmerged, _ = load_finetuned(out / "adapter")
    enc = tokenizer(["王芳在上海工作。", "新华社位于北京。"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = merged(**enc), unmerged(**enc)
    assert torch.equal(a.predictions, b.predictions)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-4)

    from ernie_zoo.taskflow import Taskflow

    ner = Taskflow("ner", task_path=str(out))
    found = ner("王芳在上海工作。")["entities"]
    assert all(e["type"] in {"PER", "LOC", "ORG"} for e in found)


def test_generation_lora(tmp_path):
    args = build_args(
        {
            "task": "generation",
            "data": {
                "train_file": str(DATA / "poems.jsonl"),
                "dev_file": str(DATA / "poems.jsonl"),
                "prompt_column": "title",
                "target_column": "text",
                "max_length": 40,
            },
            "model": {"vocab_size": 200, "config_overrides": SMALL},
            "method": {"method": "lora", "lora_r": 8},
            "train": {
                "output_dir": str(tmp_path / "gen"),
                "max_steps": 30,
                "eval_every": 15,
                "batch_size": 6,
                "learning_rate": 2e-2,
                "tensorboard": False,
                **QUIET,
            },
        }
    )
    result = run_finetune(args)
    history = json.loads(
        next((tmp_path / "gen" / "checkpoints").glob("checkpoint-*"))
        .joinpath("trainer_state.json")
        .read_text()
    )["state"]["history"]
    assert history[-1]["loss"] < history[0]["loss"]
    print("generation", history, result["dev"]["samples"][:2])
    assert result["dev"]["perplexity"] > 1 and len(result["dev"]["samples"]) == 4
    model, tokenizer = load_finetuned(tmp_path / "gen")
    assert type(model).__name__ == "ErnieZooForCausalLM"

    from ernie_zoo.taskflow import Taskflow

    poet = Taskflow("text_generation", task_path=str(tmp_path / "gen"), max_new_tokens=6)
    assert isinstance(poet("静夜思")["generated"][0], str)


def test_cli_help_errors_and_non_mergeable_adapter(tmp_path, capsys):
    assert cli_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--method.method" in text and "--train.patience" in text
    assert cli_main(["--train.no_such_key", "1"]) == 2
    assert "unknown recipe key 'train.no_such_key'" in capsys.readouterr().err
    assert cli_main(["--epochs", "many"]) == 2
    assert "key \"train.epochs\": Expected a <class 'float'>" in capsys.readouterr().err
    assert cli_main(["--method", "prefix_tuning"]) == 2
    assert "past key values" in capsys.readouterr().err

    paths = _split_sentiment(tmp_path)
    out = tmp_path / "pf"
    argv = [
        "--train_file",
        paths["train"],
        "--dev_file",
        paths["dev"],
        "--method",
        "pfeiffer",
        "--reduction_factor",
        "4",
        "--vocab_size",
        "300",
        "--max_steps",
        "4",
        "--progress",
        "false",
        "--tensorboard",
        "false",
        "--output_dir",
        str(out),
        "--num_threads",
        "1",
        "--config_overrides",
        json.dumps(SMALL),
    ]
    assert cli_main(argv) == 0
    assert '"method": "pfeiffer"' in capsys.readouterr().out
    # a bottleneck adapter cannot be merged: output_dir is the adapter (loadable by path) and merge refuses
    assert (out / "adapter_config.json").is_file() and not (out / "config.json").exists()
    model, tokenizer = load_finetuned(out)
    assert _predict(model, tokenizer, ["很好"]).shape == (1, 2)
    assert cli_main(["merge", str(out), str(tmp_path / "merged")]) == 2
    assert "cannot be merged" in capsys.readouterr().err
    # a second run into the same directory resumes (and finds the run complete) instead of starting over
    assert cli_main([*argv, "--print_config"]) == 0
    assert "pfeiffer" in capsys.readouterr().out


def test_a_missing_local_model_or_tokenizer_is_named(tmp_path, capsys):
    """A local path that does not exist is reported by its recipe key, not as transformers' hub-id complaint."""
    paths = _split_sentiment(tmp_path)
    out = tmp_path / "never"
    cases = [
        ("model_name_or_path", str(tmp_path / "no" / "such-model")),
        ("model_name_or_path", "runs/zoo/no-such-stage"),
        ("tokenizer", "./no-such-tokenizer"),
    ]
    for key, value in cases:
        argv = ["--train_file", paths["train"], "--dev_file", paths["dev"], f"--{key}", value]
        argv += ["--output_dir", str(out), "--progress", "false", "--tensorboard", "false"]
        assert cli_main(argv) == 2
        assert f"'model.{key}' = {value!r}: no such directory" in capsys.readouterr().err
        assert not out.exists()


def test_pretrained_base_new_modules_train_and_are_saved(tmp_path, tiny_tokenizer, make_config):
    """From an MLM checkpoint the pooler and the classifier are new: they train fully under LoRA and are saved
    with the adapter, so the adapter loaded by path predicts exactly what the merged model does."""
    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.finetune.run import fresh_modules

    torch.manual_seed(0)
    mlm = ErnieZooForMaskedLM(make_config(initializer_range=0.2))
    mlm.load_char_tables(tiny_tokenizer)
    mlm.save_pretrained(tmp_path / "mlm")
    tiny_tokenizer.save_pretrained(tmp_path / "mlm")
    args = _sentiment_args(tmp_path, max_steps=4, tensorboard=False)
    args.model.model_name_or_path = str(tmp_path / "mlm")
    args.model.config_overrides = {}
    run_finetune(args)
    out = Path(args.train.output_dir)
    saved = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert any(".pooler." in k for k in saved) and any("classifier" in k for k in saved)
    meta = json.loads((out / "adapter" / "ernie_zoo_finetune.json").read_text())
    assert meta["base_model"] == str((tmp_path / "mlm").resolve())
    merged, tokenizer = load_finetuned(out)
    unmerged, _ = load_finetuned(out / "adapter")
    texts = ["房间很干净", "太差了"]
    torch.testing.assert_close(
        _predict(merged, tokenizer, texts), _predict(unmerged, tokenizer, texts), atol=1e-5, rtol=1e-4
    )

    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert fresh_modules(
        model,
        ["ernie.pooler.dense.weight", "ernie.pooler.dense.bias", "classifier.weight", "classifier.bias"],
    ) == ["classifier", "ernie.pooler"]
    assert fresh_modules(model, ["ernie.pooler.dense.weight"]) == []  # half a module: not new


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_base_saved_in_fp16_is_fine_tuned_in_fp32(tmp_path, tiny_tokenizer, make_config, method):
    """The shipped zoo models are fp16 on disk; transformers would load them as fp16, and fp16 training on CPU
    overflowed to NaN at the first step. Fine-tuning and loading the result happen in fp32."""
    from ernie_zoo import ErnieZooForMaskedLM

    torch.manual_seed(0)
    mlm = ErnieZooForMaskedLM(make_config(initializer_range=0.2))
    mlm.load_char_tables(tiny_tokenizer)
    mlm.half().save_pretrained(tmp_path / "fp16")
    tiny_tokenizer.save_pretrained(tmp_path / "fp16")
    saved = load_file(str(tmp_path / "fp16" / "model.safetensors"))
    assert {t.dtype for t in saved.values() if t.is_floating_point()} == {torch.float16}
    args = _sentiment_args(tmp_path, max_steps=3, tensorboard=False, learning_rate=1e-3)
    args.model.model_name_or_path = str(tmp_path / "fp16")
    args.model.config_overrides = {}
    args.method.method = method
    result = run_finetune(args)  # raised FloatingPointError (loss is nan at step 1) when trained in fp16
    assert torch.isfinite(torch.tensor(result["dev"]["loss"]))
    for path in (
        args.train.output_dir,
        *([Path(args.train.output_dir) / "adapter"] if method == "lora" else []),
    ):
        model, _ = load_finetuned(path)
        assert {p.dtype for p in model.parameters()} == {torch.float32}, path


def test_multi_label_and_text_pairs(tmp_path):
    aspects = [
        ("屏幕很清晰", "screen"),
        ("电池很耐用", "battery"),
        ("物流很快", "shipping"),
        ("屏幕太暗", "screen"),
        ("电池不行", "battery"),
        ("快递太慢", "shipping"),
    ]
    rng = random.Random(1)
    rows = []
    for _ in range(48):
        picked = rng.sample(aspects, rng.choice([1, 2]))
        rows.append({"text": "，".join(t for t, _ in picked), "label": sorted({a for _, a in picked})})
    train = tmp_path / "ml.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    args = build_args(
        {
            "data": {"train_file": str(train), "dev_file": str(train), "multi_label": True},
            "model": {"vocab_size": 100, "config_overrides": SMALL},
            "method": {"method": "full"},
            "train": {
                "output_dir": str(tmp_path / "ml"),
                "max_steps": 30,
                "eval_every": 15,
                "batch_size": 8,
                "learning_rate": 3e-3,
                "tensorboard": False,
                **QUIET,
            },
        }
    )
    result = run_finetune(args)
    assert result["metric"] == "micro_f1" and result["dev"]["micro_f1"] > 0.5, result["dev"]
    model, tokenizer = load_finetuned(tmp_path / "ml")
    assert model.config.problem_type == "multi_label_classification"
    assert set(model.config.label2id) == {"battery", "screen", "shipping"}

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "q\tp\tlabel\n"
        + "".join(f"{a}\t{b}\t{int(a[:2] == b[:2])}\n" for a, _ in aspects for b, _ in aspects),
        encoding="utf-8",
    )
    args = build_args(
        {
            "data": {"train_file": str(pairs), "text_column": "q", "text_pair_column": "p"},
            "model": {"vocab_size": 100, "config_overrides": SMALL},
            "method": {"method": "adalora", "lora_r": 4},  # AdaLoRA: update_and_allocate runs in the loop
            "train": {"output_dir": str(tmp_path / "pairs"), "max_steps": 3, "tensorboard": False, **QUIET},
        }
    )
    result = run_finetune(args)
    assert result["steps"] == 3 and "dev" not in result
    assert (tmp_path / "pairs" / "config.json").is_file()


def test_fine_tuning_is_a_supervised_job():
    """training/ runs fine-tuning only through `SupervisedJob`: the job provides every member the protocol names
    (a member added there and forgotten here would fail at run time, deep in a run)."""
    members = {n for n in vars(SupervisedJob) if not n.startswith("_")} | set(SupervisedJob.__annotations__)
    assert {"prepare", "build_model", "adapt", "evaluate", "export", "recipe", "metric"} <= members
    args = build_args({"data": {"train_file": str(DATA / "sentiment.jsonl")}})
    job = FinetuneJob(args, args.resolved())
    tokenizer, features = job.prepare(None)  # the objective exists from here on (metric, scores)
    assert features["train"] and len(tokenizer) > 0
    missing = [n for n in sorted(members) if not hasattr(job, n)]
    assert not missing, f"FinetuneJob lacks {missing} of training.supervised.SupervisedJob"
    assert job.metric == "accuracy" and job.greater_is_better() is True
    assert job.keeps_base_weights() is True  # LoRA by default: a fresh base is saved with its weights

"""Fine-tuning starts from the zoo: every recipe in recipes/finetune/ names the shipped encoder, which resolves by
name exactly as Taskflow's model= does; the weights a run starts from are the shipped ones; names that resolve to
nothing are reported with the shipped names; a preset build from scratch stays possible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.cli import main as cli_main
from ernie_zoo.finetune.export import META_NAME
from ernie_zoo.finetune.objectives import make_objective
from ernie_zoo.finetune.run import build_model, build_tokenizer
from ernie_zoo.taskflow.models import resolve_model
from ernie_zoo.zoo import BASE_ENCODER, SHIPPED_MODELS, ZOO_DIR, resolve_model_source

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes" / "finetune").glob("*.yaml"))
DATA = Path(__file__).parent / "data" / "finetune"
ENCODER_DIR = ZOO_DIR / BASE_ENCODER
# Learning rates for a pretrained encoder, by method family.
LR_RANGES = {"full": (5e-5, 1e-4), "lora": (5e-4, 2e-3), "houlsby": (5e-4, 2e-3), "pfeiffer": (5e-4, 2e-3)}


def test_the_base_encoder_is_shipped():
    assert BASE_ENCODER in SHIPPED_MODELS and (ENCODER_DIR / "model.safetensors").is_file()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_starts_from_the_shipped_encoder(path):
    args = build_args(path)  # no overrides
    assert args.model.model_name_or_path == BASE_ENCODER and args.model.tokenizer is None
    resolved = args.resolved()
    assert Path(resolved.model.model_name_or_path) == ENCODER_DIR
    # the same location Taskflow's model= gives the name
    assert resolve_model("fill_mask", BASE_ENCODER, None, None).location == resolved.model.model_name_or_path
    low, high = LR_RANGES[args.method.method]
    assert args.train.learning_rate is not None and low <= args.train.learning_rate <= high, path.name
    # the recipe as written is unchanged by resolution (it is what finetune_args.yaml keeps)
    assert args.model.model_name_or_path == BASE_ENCODER


def test_a_recipe_documents_the_build_from_scratch():
    assert any("--model.preset tiny" in p.read_text(encoding="utf-8") for p in RECIPES)
    args = build_args(REPO / "recipes/finetune/sentiment_lora.yaml", {"model.model_name_or_path": "null"})
    assert args.model.model_name_or_path is None and args.model.preset == "tiny"
    assert args.resolved().model.model_name_or_path is None


def test_names_directories_and_hub_ids_resolve_like_taskflow(tmp_path):
    local = tmp_path / "my-model"
    local.mkdir()
    for name in (*SHIPPED_MODELS, str(local), "some-org/some-model"):
        args = build_args({}, {"model_name_or_path": name, "tokenizer": name})
        source = resolve_model_source(name)
        assert args.resolved().model.model_name_or_path == source.location
        assert args.resolved().model.tokenizer == source.location
        assert resolve_model("fill_mask", name, None, None) == source
    assert resolve_model_source(str(local)).kind == "local"
    assert resolve_model_source("some-org/some-model").kind == "hub"
    # shipped teachers are found by name too; directories are left as they are
    args = build_args({}, {"distill_from": f"[ernie-zoo-mini-sentiment, {local}]"})
    assert args.resolved().train.distill_from == [str(ZOO_DIR / "ernie-zoo-mini-sentiment"), str(local)]


@pytest.mark.parametrize("key", ["model_name_or_path", "tokenizer"])
def test_an_unknown_shipped_name_is_refused_when_the_recipe_loads(key):
    with pytest.raises(
        ValueError, match=rf"'model.{key}' = 'ernie-zoo-mini-zh2'.*not a shipped model"
    ) as err:
        build_args(REPO / "recipes/finetune/sentiment_lora.yaml", {key: "ernie-zoo-mini-zh2"})
    assert all(name in str(err.value) for name in SHIPPED_MODELS)


def test_a_name_that_is_nothing_is_reported_with_the_shipped_names(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "never"
    argv = [
        str(REPO / "recipes/finetune/sentiment_lora.yaml"),
        *("--train_file", str(DATA / "sentiment.jsonl"), "--dev_file", "null", "--test_file", "null"),
        *("--model_name_or_path", "ernie_zoo_mini_zh", "--output_dir", str(out), "--progress", "false"),
    ]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "'model.model_name_or_path' = 'ernie_zoo_mini_zh': not a shipped model" in err
    assert BASE_ENCODER in err and "not a local directory" in err
    assert not out.exists()


def _small_args(tmp_path, **train):
    return build_args(
        REPO / "recipes/finetune/sentiment_lora.yaml",
        {
            "train_file": str(DATA / "sentiment.jsonl"),
            "dev_file": str(DATA / "sentiment.jsonl"),
            "test_file": "null",
            "max_length": 32,
            "max_eval_samples": 16,
            "batch_size": 8,
            "output_dir": str(tmp_path / "out"),
            "progress": "false",
            "tensorboard": "false",
            "num_threads": 1,
            **train,
        },
    )


def test_the_run_starts_from_the_shipped_weights(tmp_path):
    args = _small_args(tmp_path).resolved()
    task = make_objective(args)
    task.read()
    tokenizer = build_tokenizer(args, task, None)
    assert len(tokenizer) == json.loads((ENCODER_DIR / "config.json").read_text())["vocab_size"]
    model, base_path, fresh = build_model(args, task, tokenizer, None)
    assert Path(base_path) == ENCODER_DIR
    assert set(fresh) == {"ernie.pooler", "classifier"}  # the MLM checkpoint has neither
    shipped = load_file(str(ENCODER_DIR / "model.safetensors"))
    compared = 0
    for name, param in model.state_dict().items():
        if name in shipped and param.is_floating_point():
            assert param.dtype == torch.float32  # fp16 on disk, trained in fp32
            assert torch.equal(param, shipped[name].float()), name
            compared += 1
        elif name in shipped:  # integer buffers (character tables)
            assert torch.equal(param, shipped[name]), name
    assert compared > 50


def test_a_short_run_from_the_recipe_records_its_base(tmp_path):
    result = run_finetune(_small_args(tmp_path, max_steps=2, eval_every=2))
    out = tmp_path / "out"
    assert result["base_model"] == {
        "name_or_path": BASE_ENCODER,
        "location": str(ENCODER_DIR),
        "preset": None,
    }
    assert json.loads((out / "eval_results.json").read_text())["base_model"]["location"] == str(ENCODER_DIR)
    # the saved recipe keeps the name (portable), and runs again as it is
    assert build_args(out / "finetune_args.yaml").model.model_name_or_path == BASE_ENCODER
    adapter_meta = json.loads((out / "adapter" / META_NAME).read_text())
    assert Path(adapter_meta["base_model"]) == ENCODER_DIR

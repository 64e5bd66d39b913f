"""`ernie-finetune` on the DeepSpeed engine: real gloo ranks on CPU against the single-process run.

The same recipe (tiny model, dropout off so that every row's forward is the same wherever it runs) is run by
`run_finetune` once with `distributed.backend: single` and once under torchrun with `backend: deepspeed`, ZeRO-3,
every batch of 8 reviews split over the ranks: LoRA and full fine-tuning on 2 ranks, LoRA on 4, a CRF tagger
(LoRA) on 2, and the documented `torchrun -m ernie_zoo.finetune.cli` command on ZeRO-2 with 2-batch
accumulation (an epoch's last step has 1 batch). Compared: the per-step training losses (the mean over the ranks'
rows), the per-step pre-clip gradient norms (clipping at 0.5 active), the final LoRA adapter / full weights, the
dev scores; checked: each rank held only its ZeRO-3 partition of every parameter (frozen base weights included),
and the output directory is the same plain `from_pretrained` / peft adapter directory as a one-process run's.
Under ZeRO-3 the ranks build the model already partitioned (test_zero3_builds_the_model_partitioned: no rank
holds a base parameter whole, and the initial weights are the one-process build's bit for bit).

Tolerances (fp32): a rank computes its rows in a smaller matmul and the collectives sum in another order than one
process does, so nothing agrees bit for bit. Measured on 2 ranks: losses 1.3e-7 relative, grad norms 1.1e-6
relative, LoRA adapter weights 5.7e-7 absolute, full fine-tuning weights 1.9e-7 absolute; asserted: 1e-5
relative, 1e-5 relative, 1e-5 absolute. Left out of the weight comparison: the attention key biases under full
fine-tuning, whose true gradient is zero (softmax ignores a shift shared by every key), so AdamW turns rounding
noise into steps of about the learning rate, differently in every run (measured 2.9e-4).
At `distributed.tp_size: 2` (AutoTP over rank pairs; full on 2 and 4 ranks, LoRA on 2 under ZeRO-3 and
ZeRO-2) the same tolerances hold: measured losses 2.8e-7 relative, grad norms 1.2e-6, full weights 5.3e-7, LoRA
adapters 4.9e-6 (lora_B of the FFN's first Linear, its rows computed in two halves); each rank held half of
every planned Linear weight and of the LoRA factor on its split side, and the output directory is the
one-process run's; stopped and resumed, the LoRA run ends bit for bit where the run never stopped does.
The worker is this file run under torchrun (`--worker`).
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch

from ernie_zoo.parallel.distributed import finish_distributed

DATA = Path(__file__).parent / "data" / "finetune"
LOSS_RTOL = 1e-5
NORM_RTOL = 1e-5
WEIGHT_ATOL = 1e-5
#: zero true gradient (see the module docstring): rounding noise that AdamW normalises
NOISE_ONLY = (".attention.self.key.bias",)
SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": 0.2,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


def _ner_rows(n: int, rng: random.Random) -> list[dict]:
    """`n` sentences with PER / LOC / ORG spans (sentences of different lengths: ranks hold different numbers
    of tagged tokens)."""
    names = {
        "PER": ["张伟", "李娜", "王芳", "欧阳明"],
        "LOC": ["北京", "上海", "呼和浩特"],
        "ORG": ["新华社", "中国银行"],
    }
    templates = [
        "{PER}在{LOC}工作。",
        "{PER}是{ORG}的老师。",
        "{ORG}位于{LOC}。",
        "昨天{PER}去了{LOC}，很开心。",
    ]
    rows = []
    for _ in range(n):
        text, entities = "", []
        for piece in rng.choice(templates).replace("}", "{").split("{"):
            if piece in names:
                name = rng.choice(names[piece])
                entities.append({"start": len(text), "end": len(text) + len(name), "type": piece})
                piece = name
            text += piece
        rows.append({"text": text, "entities": entities})
    return rows


def _data(root: Path) -> dict[str, str]:
    """56 / 12 / 12 reviews (7 batches of 8 per epoch), 48 / 16 NER sentences, and a tokenizer trained on their
    texts, written once."""
    splits = ("train", "dev", "test", "ner_train", "ner_dev")
    paths = {"tokenizer": str(root / "tokenizer"), **{n: str(root / f"{n}.jsonl") for n in splits}}
    if (root / "tokenizer").is_dir():
        return paths
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    rows = [json.loads(line) for line in (DATA / "sentiment.jsonl").read_text(encoding="utf-8").splitlines()]
    random.Random(0).shuffle(rows)
    ner = _ner_rows(64, random.Random(0))
    parts = {
        "train": rows[:56],
        "dev": rows[56:68],
        "test": rows[68:80],
        "ner_train": ner[:48],
        "ner_dev": ner[48:],
    }
    for name, part in parts.items():
        Path(paths[name]).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8"
        )
    tokenizer = ErnieZooTokenizerFast.train_vocab(
        [r["text"] for r in rows[:56] + ner], vocab_size=500, min_frequency=1, show_progress=False
    )
    tokenizer.save_pretrained(paths["tokenizer"])
    return paths


def _args(root: Path, out: str, method: str, backend: str, zero_stage: int | None = None, tp_size: int = 1):
    from ernie_zoo.finetune import build_args

    paths = _data(root)
    crf = method == "lora-crf"  # NER: a CRF tagger (its transitions are read outside any module's forward)
    data = {
        "train_file": paths["train"],
        "dev_file": paths["dev"],
        "test_file": paths["test"],
        "max_length": 32,
    }
    if crf:
        data = {"train_file": paths["ner_train"], "dev_file": paths["ner_dev"], "tag_scheme": "bioes"}
    return build_args(
        {
            "task": "token_classification" if crf else "sequence_classification",
            "data": data,
            "model": {"tokenizer": paths["tokenizer"], "config_overrides": SMALL, "use_crf": crf},
            "method": {"method": "lora" if crf else method, "lora_r": 4, "lora_dropout": 0.0},
            "train": {
                "output_dir": str(root / out),
                "batch_size": 8,
                "max_steps": 6,
                "eval_every": 3,
                "learning_rate": 2e-3 if method == "full" else 1e-2,
                "max_grad_norm": 0.5,
                "warmup_ratio": 0.2,
                "progress": False,
                "tensorboard": False,
                "num_threads": 1,
            },
            "distributed": {
                "backend": backend,
                "zero_stage": zero_stage,
                "tp_size": tp_size if tp_size > 1 else None,
            },
        }
    )


def _state(out: Path) -> dict:
    ckpt = next((out / "checkpoints").glob("checkpoint-*"))
    return json.loads((ckpt / "trainer_state.json").read_text())


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The single-process runs, LoRA and full, computed once."""
    from ernie_zoo.finetune import run_finetune

    root = tmp_path_factory.mktemp("ref")
    results = {}
    for method in ("lora", "full", "lora-crf"):
        result = run_finetune(_args(root, f"single-{method}", method, "single"))
        results[method] = (root / f"single-{method}", result)
    return root, results


def _compare(
    out: Path,
    ref_out: Path,
    ref: dict,
    method: str,
    world: int,
    stage: int = 3,
    tp: int = 1,
    norm_rtol: float = NORM_RTOL,
) -> dict:
    state, ref_state = _state(out)["state"], _state(ref_out)["state"]
    assert len(state["train_losses"]) == 6
    assert state["train_losses"] == pytest.approx(ref_state["train_losses"], rel=LOSS_RTOL)
    assert state["grad_norms"] == pytest.approx(ref_state["grad_norms"], rel=norm_rtol)
    assert max(ref_state["grad_norms"]) > 0.5  # clipping at max_grad_norm was active, and the same
    assert state["best_step"] == ref_state["best_step"]
    results = json.loads((out / "eval_results.json").read_text())
    assert results["distributed"] == {
        "backend": "deepspeed",
        "zero_stage": stage,
        "world_size": world,
        "tp_size": tp,
    }
    assert results["dev"]["loss"] == pytest.approx(ref["dev"]["loss"], rel=1e-4)
    for split in ("dev", "test"):  # the same predictions: accuracy / F1 agree exactly
        for key in ("accuracy", "f1"):
            if key in ref.get(split, {}):
                assert results[split][key] == ref[split][key], (split, key)
    # the exported weights: the adapter (LoRA) or the whole model (full), as a one-process run writes them
    name = "model.safetensors" if method == "full" else "adapter/adapter_model.safetensors"
    got, want = _weights(out / name), _weights(ref_out / name)
    assert got.keys() == want.keys()
    diffs = {k: (got[k] - want[k]).abs().max().item() for k in want if not k.endswith(NOISE_ONLY)}
    if method != "full":  # lora_B starts at zero: how far training moved the adapter
        assert max(want[k].abs().max().item() for k in want if "lora_B" in k) > 1000 * WEIGHT_ATOL
    assert max(diffs.values()) < WEIGHT_ATOL, sorted(diffs.items(), key=lambda kv: -kv[1])[:3]
    return {**state, "max_weight_diff": max(diffs.values())}


def _check_shards(out: Path, world: int, method: str) -> None:
    for rank in range(world):
        shards = json.loads((out / f"rank{rank}.json").read_text())["shards"]
        # ZeRO-3: every parameter, frozen or trained, lives as a 1/world partition on each rank
        for name, (full, local) in shards.items():
            assert local == -(-full // world) < full or full < world, (rank, name, full, local)
        query = [n for n in shards if n.endswith("layer.0.attention.self.query.weight")] or [
            n for n in shards if n.endswith("layer.0.attention.self.query.base_layer.weight")
        ]
        assert shards[query[0]] == [32 * 32, 32 * 32 // world]
        if method == "lora":
            lora = [n for n in shards if "lora_A" in n]
            assert lora and all(shards[n][1] < shards[n][0] for n in lora)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("method", ["lora", "full"])
def test_zero3_two_ranks_match_one_process(tmp_path, references, method):
    from ernie_zoo.finetune import load_finetuned
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs[method]
    run_local_ranks([__file__, "--worker", str(root), "ds2-" + method, method, "3"], nproc=2, timeout=900)
    out = root / ("ds2-" + method)
    measured = _compare(out, ref_out, ref, method, world=2)
    print(f"{method} on 2 ranks: max weight diff {measured['max_weight_diff']:.2e}")
    _check_shards(out, 2, method)
    # a plain output directory: merged from_pretrained model (+ peft adapter for LoRA), no ZeRO files
    model, tokenizer = load_finetuned(out)
    assert not any(hasattr(p, "ds_id") for p in model.parameters())
    assert not list(out.rglob("*.pt"))  # no pickles; ZeRO partitions only in the (resumable) checkpoints
    assert [p.relative_to(out).parts[0] for p in out.rglob("zero")] == ["checkpoints"]
    if method == "lora":
        assert (out / "adapter" / "adapter_config.json").is_file()
    texts = ["房间很干净，服务很好", "质量太差，非常失望"]
    ref_model, _ = load_finetuned(ref_out)
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**enc).logits, ref_model(**enc).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_four_ranks_lora_match_one_process(tmp_path, references):
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["lora"]
    run_local_ranks([__file__, "--worker", str(root), "ds4-lora", "lora", "3"], nproc=4, timeout=900)
    out = root / "ds4-lora"
    measured = _compare(out, ref_out, ref, "lora", world=4)
    print(f"lora on 4 ranks: max weight diff {measured['max_weight_diff']:.2e}")
    _check_shards(out, 4, "lora")


@pytest.mark.distributed
@pytest.mark.slow
def test_the_documented_command_runs_zero2(tmp_path, references):
    """`torchrun -m ernie_zoo.finetune.cli RECIPE --distributed.backend deepspeed` (docs/finetuning.md), ZeRO-2,
    accumulating 2 batches per step (7 per epoch: steps of 2, 2, 2 and 1, the loop owning DeepSpeed's
    accumulation boundary): the numbers of one process with the same recipe; only rank 0 prints the summary."""
    import yaml

    from ernie_zoo.finetune import run_finetune
    from ernie_zoo.finetune.args import dump_recipe
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, _ = references
    args = _args(root, "cli-zero2", "lora", "single")
    args.train.grad_accum = 2
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(dump_recipe(args), encoding="utf-8")
    assert yaml.safe_load(recipe.read_text())["distributed"]["backend"] == "single"
    args.train.output_dir = str(root / "single-accum2")
    ref = run_finetune(args)
    cli = [
        "-m",
        "ernie_zoo.finetune.cli",
        str(recipe),
        "--distributed.backend",
        "deepspeed",
        "--zero_stage",
        "2",
    ]
    proc = run_local_ranks(cli, nproc=2, timeout=900)
    assert proc.stdout.count('"trainable_fraction"') == 1
    state = _compare(root / "cli-zero2", root / "single-accum2", ref, "lora", world=2, stage=2)
    assert state["epoch"] == 1 and state["batch_in_epoch"] == 4  # epoch 0: 4 steps of 2 + 2 + 2 + 1 batches


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_lora_with_the_optimizer_offloaded_to_the_cpu(tmp_path, references):
    """`--distributed.offload_optimizer cpu` (ZeRO-Offload) on 2 ranks, ZeRO-3: the run steps its optimizer
    partitions with DeepSpeed's CPU Adam (its parameter groups, saved in the ZeRO checkpoint, are CPU Adam's)
    and ends where one process with torch's AdamW does: the tolerances above, but grad norms to 5e-5 relative
    (CPU Adam's vectorised update rounds differently from torch's: measured 1.6e-5 at the 6th step)."""
    from ernie_zoo.finetune.args import dump_recipe
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["lora"]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(dump_recipe(_args(root, "ds2-offload", "lora", "single")), encoding="utf-8")
    flags = ["--distributed.backend", "deepspeed", "--distributed.zero_stage", "3"]
    flags += ["--distributed.offload_optimizer", "cpu"]
    run_local_ranks(["-m", "ernie_zoo.finetune.cli", str(recipe), *flags], nproc=2, timeout=900)
    out = root / "ds2-offload"
    measured = _compare(out, ref_out, ref, "lora", world=2, norm_rtol=5e-5)
    print(f"lora, optimizer offloaded, on 2 ranks: max weight diff {measured['max_weight_diff']:.2e}")
    for rank in range(2):
        meta = json.loads(
            next((out / "checkpoints").glob(f"checkpoint-*/zero/rank{rank:05d}.json")).read_text()
        )
        groups = meta["param_groups"]
        assert all("bias_correction" in g and "fused" not in g for g in groups), groups  # DeepSpeedCPUAdam


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_crf_tagger_matches_one_process(tmp_path, references):
    """Token classification with a CRF layer under LoRA: ranks hold different numbers of tagged tokens (the
    loss is a mean over each rank's sentences), the CRF's transition matrix is read outside any module's
    forward when decoding, and both agree with one process."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["lora-crf"]
    run_local_ranks([__file__, "--worker", str(root), "ds2-crf", "lora-crf", "3"], nproc=2, timeout=900)
    measured = _compare(root / "ds2-crf", ref_out, ref, "lora-crf", world=2)
    print(f"CRF tagger on 2 ranks: max weight diff {measured['max_weight_diff']:.2e}")
    adapter = _weights(root / "ds2-crf" / "adapter" / "adapter_model.safetensors")
    assert any("crf" in k and "transitions" in k for k in adapter)  # the CRF trains fully: compared above


def _check_tp_shards(out: Path, world: int, method: str, stage: int) -> None:
    """TP 2: every rank holds its half of each planned Linear weight (colwise: output rows, rowwise: input
    columns) and of the LoRA factor split with it, the rest whole. ZeRO-3 partitions that over the world / 2
    data-parallel ranks; what zero.Init built and AutoTP left alone (the LayerNorms) stays partitioned over
    every rank, as it was built."""
    base = ".base_layer" if method == "lora" else ""
    shapes = {  # this rank's TP shard
        f"layer.0.attention.self.query{base}.weight": [16, 32],  # colwise: 32 x 32 by output rows
        f"layer.0.attention.self.query{base}.bias": [16],
        f"layer.0.attention.output.dense{base}.weight": [32, 16],  # rowwise: by input columns
        f"layer.0.attention.output.dense{base}.bias": [32],  # added after the all-reduce: whole
        f"layer.1.intermediate.dense{base}.weight": [32, 32],  # 64 x 32
        f"layer.1.output.dense{base}.weight": [32, 32],  # 32 x 64
        "layer.0.output.LayerNorm.weight": [32],
    }
    if method == "lora":  # r = 4
        shapes |= {
            "layer.0.attention.self.query.lora_A.default.weight": [4, 32],
            "layer.0.attention.self.query.lora_B.default.weight": [16, 4],  # with the layer's output rows
            "layer.0.attention.output.dense.lora_A.default.weight": [4, 16],  # with its input columns
            "layer.0.attention.output.dense.lora_B.default.weight": [32, 4],
        }
    for rank in range(world):
        report = json.loads((out / f"rank{rank}.json").read_text())
        for suffix, shape in shapes.items():
            (name,) = [n for n in report["tp_shapes"] if n.endswith("encoder." + suffix)]
            numel, over = math.prod(shape), world if "LayerNorm" in name else world // 2
            assert report["tp_shapes"][name] == shape, (rank, name)
            held = -(-numel // over) if stage == 3 else numel
            assert report["shards"][name] == [numel, held], (rank, name, report["shards"][name])


def _check_plain_export(out: Path, ref_out: Path) -> None:
    """`out` holds the files of the one-process run's output directory, and its model loads with transformers'
    own from_pretrained (whole weights, the reference's shapes) and gives the reference's logits."""
    from transformers import AutoModelForSequenceClassification

    import ernie_zoo  # noqa: F401  (registers its architectures with transformers' Auto classes)

    def files(d: Path) -> set:
        return {
            str(p.relative_to(d))
            for p in d.rglob("*")
            if p.is_file() and "checkpoints" not in p.relative_to(d).parts and not p.name.startswith("rank")
        }

    assert files(out) == files(ref_out)
    got, want = _weights(out / "model.safetensors"), _weights(ref_out / "model.safetensors")
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in want.items()}
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    reference = AutoModelForSequenceClassification.from_pretrained(ref_out).eval()
    ids = torch.randint(5, 400, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-4, rtol=0
        )


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "world", "stage"), [("full", 2, 3), ("lora", 2, 3), ("full", 4, 3), ("lora", 2, 2)]
)
def test_autotp_matches_one_process(tmp_path, references, method, world, stage):
    """distributed.tp_size 2: AutoTP splits the TP plan's Linear layers (and, under LoRA, the factor on their
    split side) over rank pairs that read the same rows, ZeRO over the pairs; the numbers of one process, and
    after training the same plain output directory (the TP shards gathered)."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs[method]
    name = f"tp2-{method}-w{world}-z{stage}"
    run_local_ranks(
        [__file__, "--worker", str(root), name, method, str(stage), "run", "2"], nproc=world, timeout=900
    )
    out = root / name
    measured = _compare(out, ref_out, ref, method, world=world, stage=stage, tp=2)
    print(f"{method}, TP 2 on {world} ranks, ZeRO-{stage}: max weight diff {measured['max_weight_diff']:.2e}")
    _check_tp_shards(out, world, method, stage)
    _check_plain_export(out, ref_out)


class _Built(Exception):
    """Raised where the run would start its engine: the model is built (see `_capture_build`)."""


#: the names that apply_method adds as whole tensors (the engine partitions them): LoRA factors, trained copies
ADDED = ("lora_", "modules_to_save")


def _build_cases(root: Path, backend: str) -> dict:
    """What test_zero3_builds_the_model_partitioned builds: a preset under LoRA, a pretrained masked-LM base whose
    pooler and classifier are new under full fine-tuning, and a CRF tagger reading an entity lexicon (its input
    projection new) under LoRA. The base and the lexicon are written once."""
    from ernie_zoo.models import ErnieZooForMaskedLM
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.text.lexicon import EntityLexicon
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    paths = _data(root)
    base, lexicon = root / "mlm-base", root / "lexicon.txt"
    stage = 3 if backend == "deepspeed" else None
    cases = {
        "preset-lora": _args(root, f"build-{backend}-preset", "lora", backend, stage),
        "pretrained-full": _args(root, f"build-{backend}-pretrained", "full", backend, stage),
        "lexicon-crf": _args(root, f"build-{backend}-crf", "lora-crf", backend, stage),
    }
    model_args = cases["pretrained-full"].model
    model_args.model_name_or_path = str(base)
    model_args.config_overrides = {k: v for k, v in SMALL.items() if k.endswith("dropout_prob")}
    cases["lexicon-crf"].data.lexicon = str(lexicon)
    if not base.is_dir():
        tokenizer = ErnieZooTokenizerFast.from_pretrained(paths["tokenizer"])
        torch.manual_seed(1)
        mlm = ErnieZooForMaskedLM(preset_config(model_args.preset, vocab_size=len(tokenizer), **SMALL))
        mlm.load_char_tables(tokenizer)
        mlm.save_pretrained(str(base))
        tokenizer.save_pretrained(str(base))
        EntityLexicon({"北京": {"LOC"}, "新华社": {"ORG"}, "张伟": {"PER"}}, ["PER", "LOC", "ORG"]).save(
            lexicon
        )
    return cases


def _capture_build(out: Path, case: str) -> None:
    """Make `run_finetune` stop (`_Built`) where it would start its engine, after writing what it built: per
    rank, every parameter's [whole numel, local numel, ZeRO-3 partition numel or -1] (`build-<case>-rank<r>.json`),
    and on rank 0 the whole initial weights, gathered one parameter at a time (`build-<case>.safetensors`)."""
    import deepspeed
    import torch.distributed as dist
    from safetensors.torch import save_file

    from ernie_zoo.training import supervised

    def capture(backend, model, *rest, **settings):
        rank = dist.get_rank() if dist.is_initialized() else 0
        params, weights = {}, {}
        for name, p in model.named_parameters():
            partitioned = hasattr(p, "ds_numel")
            partition = int(p.ds_tensor.numel()) if partitioned else -1
            params[name] = [int(getattr(p, "ds_numel", p.numel())), p.numel(), partition]
            with deepspeed.zero.GatheredParameters([p], enabled=partitioned):
                weights[name] = p.detach().clone()
        (out / f"build-{case}-rank{rank}.json").write_text(json.dumps(params))
        if rank == 0:
            save_file(weights, str(out / f"build-{case}.safetensors"))
        raise _Built

    supervised.make_engine = capture


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_builds_the_model_partitioned(tmp_path):
    """Under ZeRO-3 no rank holds the whole model while building it: where the run hands the model to its
    engine, every parameter of the base (frozen or trained, loaded by from_pretrained or newly initialised) is
    already a ZeRO-3 partition, its local data empty and its partition 1/2 of it; only what apply_method adds
    (LoRA factors, the trained copies of the head) is whole until the engine partitions it. Gathered, the initial
    weights are bit for bit the one-process build's (new heads, LoRA factors, the lexicon's input projection
    included), which is why the runs above agree with one process."""
    from safetensors.torch import load_file

    from ernie_zoo.finetune import run_finetune
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.training import supervised

    root, ref = tmp_path, tmp_path / "single"
    ref.mkdir()
    single = _build_cases(root, "single")
    run_local_ranks([__file__, "--build-worker", str(root)], nproc=2, timeout=900)
    make_engine = supervised.make_engine
    try:
        for case, args in single.items():
            _capture_build(ref, case)
            with pytest.raises(_Built):
                run_finetune(args)
    finally:
        supervised.make_engine = make_engine
    for case in single:
        report = {r: json.loads((root / f"build-{case}-rank{r}.json").read_text()) for r in (0, 1)}
        whole = local = added = 0
        for name, (n, here, partition) in report[0].items():
            if any(a in name for a in ADDED):
                assert case != "pretrained-full" and partition == -1 and here == n, (case, name)
                added += n
                continue
            for r in (0, 1):  # a partition on each rank, nothing whole
                n_r, here_r, partition_r = report[r][name]
                assert (n_r, here_r, partition_r) == (n, 0, -(-n // 2)), (case, r, name, report[r][name])
            whole += n
            local += partition
        print(
            f"{case}: whole base {4 * whole} bytes, held per rank {4 * local}, adapters + copies {4 * added}"
        )
        assert local < 0.51 * whole
        assert (added > 0) == (case != "pretrained-full")  # full fine-tuning adds nothing
        got = load_file(str(root / f"build-{case}.safetensors"))
        want = load_file(str(ref / f"build-{case}.safetensors"))
        assert got.keys() == want.keys()
        differ = [k for k in want if not torch.equal(got[k], want[k])]
        assert not differ, (case, differ[:5])
    fresh = load_file(str(root / "build-pretrained-full.safetensors"))
    base = load_file(str(root / "mlm-base" / "model.safetensors"))
    key = "ernie.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(fresh[key], base[key])  # loaded into the partitions
    assert torch.equal(fresh["ernie.pooler.dense.weight"], torch.eye(32))  # new: our pooler init
    assert fresh["classifier.weight"].std() > 0.1  # new: normal(0, initializer_range 0.2)
    crf = load_file(str(root / "build-lexicon-crf.safetensors"))
    assert not crf["base_model.model.lexicon_proj.modules_to_save.default.weight"].any()  # new: zero init


# ----------------------------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("distributed", "method", "message"),
    [
        ({"backend": "deepspeed"}, "prompt_tuning", "runs full and lora only"),
        ({"backend": "deepspeed"}, "adalora", "runs full and lora only"),
        ({"tp_size": 2}, "lora", "needs distributed.backend deepspeed"),
        ({"backend": "deepspeed", "zero_stage": 4}, "lora", "must be 0-3"),
        ({"backend": "deepspeed", "deepspeed_config": "no/such.json"}, "lora", "no such file"),
        ({"backend": "fsdp"}, "lora", "must be single, deepspeed or pipeline"),
        ({"backend": "pipeline", "pp_size": 2}, "lora", "pipeline is ernie-pretrain's only"),
        ({"zero_stage": 3}, "lora", "needs distributed.backend deepspeed"),
        ({"backend": "deepspeed", "recompute": "full"}, "lora", "fine-tuning supports none only"),
    ],
)
def test_bad_distributed_settings_are_named(distributed, method, message):
    from ernie_zoo.finetune import build_args

    recipe = {"method": {"method": method}, "distributed": distributed}
    with pytest.raises(ValueError, match=message):
        build_args(recipe)


def test_flat_keys_reach_the_distributed_section():
    from ernie_zoo.finetune import build_args

    args = build_args({"method": {"method": "full"}}, {"backend": "deepspeed", "zero_stage": "2"})
    assert args.distributed.backend == "deepspeed" and args.distributed.zero_stage == 2


def test_a_checkpoint_resumes_only_on_its_own_backend(tmp_path):
    """A one-process checkpoint is refused by a deepspeed run before any process group starts (and the other
    way round, in test_zero3_resume_continues_exactly)."""
    from ernie_zoo.finetune import run_finetune

    args = _args(tmp_path, "out", "lora", "single")
    args.train.max_steps = 1
    run_finetune(args)
    args.distributed.backend = "deepspeed"
    with pytest.raises(
        ValueError, match="laid out as {'backend': 'single'}, this run's distributed.backend is"
    ):
        run_finetune(args)


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_resume_continues_exactly(tmp_path, references):
    """2 ranks stopped right after the step-3 checkpoint (every rank's ZeRO-3 partition: fp32 masters and Adam
    moments, its RNG state), then resumed to step 6: the numbers of one process, and of the run that was never
    stopped; a one-process run refuses the checkpoint."""
    from ernie_zoo.finetune import run_finetune
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["lora"]
    out = root / "ds2-resumed"
    with pytest.raises(RuntimeError, match="stopped after the first checkpoint"):
        run_local_ranks(
            [__file__, "--worker", str(root), out.name, "lora", "3", "stop"], nproc=2, timeout=900
        )
    saved = next((out / "checkpoints").glob("checkpoint-*"))
    assert saved.name == "checkpoint-3" and not (out / "eval_results.json").exists()
    assert {p.name for p in (saved / "zero").iterdir()} == {
        f"rank0000{r}.{e}" for r in (0, 1) for e in ("json", "safetensors")
    }
    assert (saved / "rng.json").is_file() and (saved / "rng-rank00001.json").is_file()
    single = _args(root, out.name, "lora", "single")
    with pytest.raises(
        ValueError, match="laid out as {'backend': 'deepspeed', 'world_size': 2, 'zero_stage': 3}"
    ):
        run_finetune(single)
    run_local_ranks(
        [__file__, "--worker", str(root), out.name, "lora", "3"], nproc=2, timeout=900
    )  # resume: auto
    _compare(out, ref_out, ref, "lora", world=2)
    never_stopped = root / "ds2-lora"  # test_zero3_two_ranks_match_one_process[lora], when it ran first
    if never_stopped.is_dir():
        a = _weights(out / "adapter" / "adapter_model.safetensors")
        b = _weights(never_stopped / "adapter" / "adapter_model.safetensors")
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
        assert _state(out)["state"]["train_losses"] == _state(never_stopped)["state"]["train_losses"]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 2])
def test_zero_0_and_2_resume_continues(tmp_path, references, stage):
    """Full fine-tuning on 2 ranks under ZeRO stage 0 (the plain optimizer, masters whole on every rank) and 2
    (each rank's half of the flat fp32 masters and moments) stopped right after the step-3 checkpoint, then
    resumed to step 6: the numbers of one process. Before #50 these checkpoints held no optimizer state and the
    resume was refused ("needs ZeRO stage 3")."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["full"]
    out = root / f"z{stage}-resumed"
    worker = [__file__, "--worker", str(root), out.name, "full", str(stage)]
    with pytest.raises(RuntimeError, match="stopped after the first checkpoint"):
        run_local_ranks([*worker, "stop"], nproc=2, timeout=900)
    saved = next((out / "checkpoints").glob("checkpoint-*"))
    assert saved.name == "checkpoint-3" and not (out / "eval_results.json").exists()
    metas = [json.loads((saved / "zero" / f"rank0000{r}.json").read_text()) for r in (0, 1)]
    counts = [{g["partition_count"] for g in m["layout"]["groups"]} for m in metas]
    assert [m["zero_stage"] for m in metas] == [stage, stage] and counts == [{1 if stage == 0 else 2}] * 2
    run_local_ranks(worker, nproc=2, timeout=900)  # resume: auto
    _compare(out, ref_out, ref, "full", world=2, stage=stage)


@pytest.mark.distributed
@pytest.mark.slow
def test_autotp_resume_continues_exactly(tmp_path, references):
    """LoRA under TP 2 and ZeRO-3 (2 ranks) stopped right after the step-3 checkpoint (each rank's ZeRO-3
    partition of its own TP shards, as ernie-pretrain writes them), then resumed to step 6: the numbers of one
    process and of the run never stopped; the checkpoint's layout names its TP size, and a run laid out
    otherwise refuses it."""
    from ernie_zoo.finetune import run_finetune
    from ernie_zoo.parallel.distributed import run_local_ranks

    root, refs = references
    ref_out, ref = refs["lora"]
    out = root / "tp2-resumed"
    worker = [__file__, "--worker", str(root), out.name, "lora", "3"]
    with pytest.raises(RuntimeError, match="stopped after the first checkpoint"):
        run_local_ranks([*worker, "stop", "2"], nproc=2, timeout=900)
    saved = next((out / "checkpoints").glob("checkpoint-*"))
    assert saved.name == "checkpoint-3"
    metas = [json.loads((saved / "zero" / f"rank0000{r}.json").read_text()) for r in (0, 1)]
    assert [(m["tp_size"], m["layout"]["tp_rank"]) for m in metas] == [(2, 0), (2, 1)]
    layout = {"backend": "deepspeed", "world_size": 2, "zero_stage": 3, "tp_size": 2}
    assert json.loads((saved / "trainer_state.json").read_text())["layout"] == layout
    with pytest.raises(ValueError, match=r"laid out as \{[^}]*'tp_size': 2"):
        run_finetune(_args(root, out.name, "lora", "single"))
    run_local_ranks([*worker, "run", "2"], nproc=2, timeout=900)  # resume: auto
    _compare(out, ref_out, ref, "lora", world=2, tp=2)
    never_stopped = root / "tp2-lora-w2-z3"  # test_autotp_matches_one_process[lora-2-3], when it ran first
    if never_stopped.is_dir():
        a = _weights(out / "adapter" / "adapter_model.safetensors")
        b = _weights(never_stopped / "adapter" / "adapter_model.safetensors")
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
        assert _state(out)["state"]["train_losses"] == _state(never_stopped)["state"]["train_losses"]


def test_tp_size_must_divide_the_ranks(monkeypatch):
    """Checked when the run reads its DeepSpeed config, before any model is built; TP ranks share a micro batch."""
    import torch.distributed as dist

    from ernie_zoo.finetune import build_args
    from ernie_zoo.training.supervised import deepspeed_config

    args = build_args(
        {"method": {"method": "full"}, "train": {"batch_size": 8}}, {"backend": "deepspeed", "tp_size": 2}
    )
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
    with pytest.raises(ValueError, match="tp_size 2 .* does not divide the 3 launched ranks"):
        deepspeed_config(args)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    config = deepspeed_config(args)
    assert config["tensor_parallel"]["autotp_size"] == 2
    assert config["train_micro_batch_size_per_gpu"] == 4  # 8 rows over 2 data-parallel ranks


def test_tp_size_must_divide_the_heads():
    """Checked by the engine before it starts the process group (every rank stops alike)."""
    from ernie_zoo.models import ErnieZooConfig
    from ernie_zoo.models.modeling import ErnieZooForSequenceClassification
    from ernie_zoo.training.deepspeed_engine import DeepSpeedEngine

    model = ErnieZooForSequenceClassification(ErnieZooConfig(vocab_size=50, **SMALL))
    with pytest.raises(ValueError, match="tensor parallel size 3 must divide .* num_attention_heads=4"):
        DeepSpeedEngine(model, None, None, {"tensor_parallel": {"autotp_size": 3}})


# ----------------------------------------------------------------------------------------------- worker
def _worker(root: str, out: str, method: str, zero_stage: str, mode: str = "run", tp_size: str = "1") -> None:
    import os

    from ernie_zoo.finetune import run_finetune

    if mode == "stop":  # stop every rank right after the first checkpoint, as a crash would
        from ernie_zoo.training.supervised import SupervisedTraining

        save_last = SupervisedTraining.save_last

        def save_then_stop(self):
            save_last(self)
            raise KeyboardInterrupt("stopped after the first checkpoint")

        SupervisedTraining.save_last = save_then_stop

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    result = run_finetune(_args(Path(root), out, method, "deepspeed", int(zero_stage), int(tp_size)))
    (Path(root) / out).mkdir(parents=True, exist_ok=True)
    shards = {"shards": result["shards"], "tp_shapes": result["tp_shapes"]}
    (Path(root) / out / f"rank{rank}.json").write_text(json.dumps(shards))


def _build_worker(root: str) -> None:
    from ernie_zoo.finetune import run_finetune

    torch.set_num_threads(1)
    for case, args in _build_cases(Path(root), "deepspeed").items():
        _capture_build(Path(root), case)
        try:
            run_finetune(args)
        except _Built:
            continue
        raise AssertionError(f"{case}: the run did not reach its engine")


if __name__ == "__main__":
    if len(sys.argv) in (6, 7, 8) and sys.argv[1] == "--worker":
        _worker(*sys.argv[2:])
        finish_distributed()  # every rank, after its last collective (a live group can abort at exit)
    if len(sys.argv) == 3 and sys.argv[1] == "--build-worker":
        _build_worker(sys.argv[2])
        finish_distributed()  # every rank, after its last collective (a live group can abort at exit)

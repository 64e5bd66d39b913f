"""`ernie-finetune --task instruction` (#37 item 4): prompt / response pairs on the ERNIE 4.5 decoders
(transformers' `Ernie4_5ForCausalLM` / `Ernie4_5_MoeForCausalLM`, as they are), LoRA and full fine-tuning.

Bases: (a) a checkpoint directory written by `ernie-pretrain` on the `ernie4.5-tiny-cpu` recipe (the zoo's character
tokenizer, trained by the pretraining on a corpus holding the data's characters; the tokenizer in the run's
tokenizer/ directory), and (b) a random-weight replica of baidu/ERNIE-4.5-0.3B-PT's config (the `ernie4.5-0.3b`
preset, shrunk to 2 layers of hidden 64, everything else -- RoPE theta, RMSNorm eps, tied embeddings, no biases --
as published) with a SentencePiece-style BPE tokenizer whose begin / end tokens are `<s>` / `</s>`.

Checked: the loss is on the response and the end token only; the chat template is saved with the tokenizer and
plain transformers' `apply_chat_template` gives the training prompts; the run learns; the merged model reloads in
plain transformers (and the adapter through peft onto the base) with the fine-tuned model's logits; Taskflow's
text_generation on the output directory answers as `model.generate` does on the templated prompt; DeepSpeed
ZeRO-3 LoRA on 2 gloo ranks matches one process with every parameter partitioned -- asserted: losses 1e-5 relative,
grad norms 1e-5 relative (see NORM_RTOL), lora_B and the update B @ A 2e-5 absolute, lora_A 1e-3 (see WEIGHT_ATOL),
merged logits 1e-4;
measured: 9.2e-8, 4.6e-5, 1.1e-5 on an earlier initialisation; 8.8e-8, 2.2e-6, lora_B 7.1e-6 and lora_A 1.9e-4 since
weights are seeded by name --; wrong pairings are clear errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import write_jsonl
from safetensors.torch import load_file

from ernie_zoo.finetune import build_args, load_finetuned, run_finetune
from ernie_zoo.finetune.objectives import make_objective
from ernie_zoo.models.decoder import chat_prompt_ids
from ernie_zoo.models.presets import preset_config
from ernie_zoo.parallel.distributed import finish_distributed
from ernie_zoo.training.supervised import IGNORE, collate

REPO = Path(__file__).resolve().parents[1]
ANTONYMS = ["大小", "多少", "上下", "左右", "前后", "高低", "长短", "冷热", "快慢", "早晚", "新旧", "开关", "来去",
            "买卖", "黑白", "正反"]  # fmt: skip
LOSS_RTOL = 1e-5
#: Two ranks' partial sums round differently from one process's: the grad norms agree to 1.8e-6 relative (measured,
#: the largest of the 6 steps); a missing or doubled shard moves the norm by tens of percent. (This was 2e-4 while
#: the pretrained base came in one of two versions -- train_vocab kept different word pieces at its budget from one
#: process to the next -- and one of them differed by 4.6e-5.)
NORM_RTOL = 1e-5
#: lora_A's gradient is exactly zero at the first step (lora_B starts at zero) and tiny while lora_B is small;
#: AdamW normalises it, so rounding differences of the ranks' partial sums show in lora_A at the learning rate's
#: scale (lr 2e-2): measured 9.1e-6 / 1.1e-5 on the two bases of an earlier initialisation, 1.9e-4 on
#: layers.1.self_attn.k_proj.lora_A since weights are seeded by name. What the adapter computes, lora_B and the
#: update B @ A it adds to a weight, agrees to WEIGHT_ATOL (measured 7.1e-6); lora_A to LORA_A_ATOL (lr / 20).
WEIGHT_ATOL = 2e-5
LORA_A_ATOL = 1e-3


def _rows() -> list[dict[str, str]]:
    """32 pairs, every one the same number of characters (so of tokens with a character tokenizer)."""
    rows = []
    for a, b in ANTONYMS:
        rows.append({"prompt": f"{a}的反义词是什么？", "response": b})
        rows.append({"prompt": f"{b}的反义词是什么？", "response": a})
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("instruction")
    rows = _rows()
    return {"train": write_jsonl(root / "train.jsonl", rows[:24]), "dev": write_jsonl(root / "dev.jsonl", rows[24:]),
            "root": str(root)}  # fmt: skip


@pytest.fixture(scope="module")
def pretrained(data) -> dict[str, str]:
    """(a) `ernie-pretrain` on the ernie4.5-tiny-cpu recipe, 4 steps on a corpus with the data's characters."""
    root = Path(data["root"])
    corpus = root / "corpus.txt"
    lines = [f"{r['prompt']}{r['response']}" for r in _rows()] + ["User: Assistant:"]
    corpus.write_text(
        "\n".join(lines + (REPO / "tests/data/zh_sentences.txt").read_text().splitlines()) + "\n"
    )
    cmd = [sys.executable, "-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml"),
           "--output_dir", str(root / "pre"), "--max_steps", "4", "--checkpoint.interval", "4", "--eval.interval",
           "4", "--logging.progress_bar", "false", "--logging.tensorboard", "false", "--data.files",
           f"[{corpus}]"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"model": str(root / "pre/checkpoint-4"), "tokenizer": str(root / "pre/tokenizer")}


@pytest.fixture(scope="module")
def replica(data) -> dict[str, str]:
    """(b) the ERNIE-4.5-0.3B config shrunk, random weights, a BPE tokenizer with <s> / </s> (no chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(data["root"]) / "replica"
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    bpe.decoder = decoders.Metaspace()
    texts = [f"User: {r['prompt']}\nAssistant: {r['response']}" for r in _rows()]
    bpe.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>",
                                               eos_token="</s>", pad_token="<unk>")  # fmt: skip
    config = preset_config("ernie4.5-0.3b", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=len(tok),
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Ernie4_5ForCausalLM(config)
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return {"model": str(root), "tokenizer": None}


def _args(data, base, out: Path, method: str, backend: str = "single", **train):
    return build_args(
        {
            "task": "instruction",
            "data": {"train_file": data["train"], "dev_file": data["dev"], "max_length": 32},
            "model": {"model_name_or_path": base["model"], "tokenizer": base["tokenizer"]},
            "method": {"method": method, "lora_r": 4, "lora_dropout": 0.0},
            "train": {"output_dir": str(out), "batch_size": 8, "max_steps": 6, "eval_every": 3,
                      "learning_rate": 3e-3 if method == "full" else 2e-2, "max_grad_norm": 0.5,
                      "warmup_ratio": 0.2, "progress": False, "tensorboard": False, "num_threads": 1, **train},
            "distributed": {"backend": backend, "zero_stage": 3 if backend == "deepspeed" else None},
        }
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------- encoding


def _chat_ids(tok, prompt: str) -> list[int]:
    """What plain transformers makes of one user turn with the generation prompt."""
    return list(
        tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)[
            "input_ids"
        ]
    )


@pytest.mark.parametrize("base_name", ["pretrained", "replica"])
def test_the_loss_is_on_the_response_and_the_template_gives_the_training_prompt(request, data, base_name):
    base = request.getfixturevalue(base_name)
    args = _args(data, base, Path(data["root"]) / "unused", "lora")
    task = make_objective(args)
    task.read()
    tok = transformers.AutoTokenizer.from_pretrained(base["tokenizer"] or base["model"])
    features = task.encode(task.splits["train"], tok)
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    for f, ex in zip(features, task.splits["train"]):
        prompt = _chat_ids(tok, ex.prompt)
        response = tok(ex.response, add_special_tokens=False)["input_ids"] + [eos]
        assert f["input_ids"] == prompt + response
        assert f["labels"] == [IGNORE] * len(prompt) + response
    # the whole conversation in the template is the training text (a subword tokenizer may split it differently at
    # the prompt / response boundary: the response is tokenized on its own, as it is generated after the prompt)
    ex = task.splits["train"][0]
    chat = [{"role": "user", "content": ex.prompt}, {"role": "assistant", "content": ex.response}]
    text = tok.apply_chat_template(chat, tokenize=False)
    if base_name == "pretrained":  # one token per character: the same ids
        assert tok(text, add_special_tokens=False)["input_ids"] == features[0]["input_ids"]
    else:
        squeeze = str.maketrans("", "", " \n")
        assert tok.decode(features[0]["input_ids"]).translate(squeeze) == text.translate(squeeze)
    # padding is not learnt either
    short, long = sorted(features[:2] + [dict(features[0], input_ids=features[0]["input_ids"][:-2],
                         attention_mask=features[0]["attention_mask"][:-2], labels=features[0]["labels"][:-2])],
                         key=lambda f: len(f["input_ids"]))[::2]  # fmt: skip
    batch = collate([short, long], tok.pad_token_id)
    assert (batch["labels"][0, len(short["input_ids"]) :] == IGNORE).all()
    assert (batch["attention_mask"][0, len(short["input_ids"]) :] == 0).all()


# ----------------------------------------------------------------------------------------------- runs


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


@pytest.mark.parametrize("method", ["lora", "full"])
@pytest.mark.parametrize("base_name", ["pretrained", "replica"])
def test_finetune_reloads_in_plain_transformers_and_runs_in_taskflow(
    request, data, tmp_path, base_name, method
):
    from ernie_zoo.taskflow import Taskflow

    base = request.getfixturevalue(base_name)
    result = run_finetune(_args(data, base, tmp_path / "out", method))
    out = tmp_path / "out"
    state = json.loads(next((out / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())[
        "state"
    ]
    losses = state["train_losses"]
    assert len(losses) == 6 and losses[-1] < losses[0]  # it learns
    assert result["dev"]["loss"] < state["history"][0]["loss"] + 1e-9 or result["best_step"] == 3
    # the output directory: plain transformers, the chat template saved with the tokenizer
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Ernie4_5ForCausalLM"] and config["model_type"] == "ernie4_5"
    tok = transformers.AutoTokenizer.from_pretrained(out)
    # transformers 5 saves a tokenizer's single template as chat_template.jinja (and reads it back from there)
    assert tok.chat_template == (out / "chat_template.jinja").read_text(encoding="utf-8")
    assert "Assistant: " in tok.chat_template
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(model) is transformers.Ernie4_5ForCausalLM
    ids = _chat_ids(tok, "大的反义词是什么？")
    tuned = result["model"].eval()
    torch.testing.assert_close(_logits(model, ids), _logits(tuned, ids), atol=1e-5, rtol=1e-5)
    if method == "lora":  # the adapter through plain peft onto the base, merged: the same logits
        import peft

        adapter = load_file(str(out / "adapter/adapter_model.safetensors"))
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            assert any(f".{name}.lora_A" in k for k in adapter), name

        base_model = transformers.AutoModelForCausalLM.from_pretrained(base["model"], dtype=torch.float32)
        merged = peft.PeftModel.from_pretrained(base_model, str(out / "adapter")).merge_and_unload().eval()
        torch.testing.assert_close(_logits(merged, ids), _logits(tuned, ids), atol=1e-5, rtol=1e-5)
        # and the project's own loader, from the adapter directory (base model + adapter, unmerged)
        reloaded, _ = load_finetuned(out / "adapter")
        torch.testing.assert_close(_logits(reloaded, ids), _logits(tuned, ids), atol=1e-5, rtol=1e-5)
        untouched = transformers.AutoModelForCausalLM.from_pretrained(
            base["model"], dtype=torch.float32
        ).eval()
        assert (_logits(merged, ids) - _logits(untouched, ids)).abs().max() > 1e-3  # the adapter moved it
    # Taskflow answers from the templated prompt, as model.generate does
    eos = tok.eos_token_id if base_name == "replica" else tok.sep_token_id
    prompts = ["大的反义词是什么？", "冷的反义词是什么？"]
    got = Taskflow("text_generation", task_path=out, max_new_tokens=4)(prompts)
    for prompt, answer in zip(prompts, got):
        ids = torch.tensor([chat_prompt_ids(tok, prompt)])
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                             eos_token_id=eos, pad_token_id=tok.pad_token_id)[0, ids.shape[1] :].tolist()  # fmt: skip
        gen = gen[: gen.index(eos)] if eos in gen else gen
        assert answer["generated"] == [tok.decode(gen, skip_special_tokens=True).replace(" ", "")]


def test_an_moe_preset_trains_with_lora(data, tmp_path):
    """A decoder preset (MoE) built from scratch with a vocabulary trained on the data. peft maps the MLP targets
    onto transformers' fused routed-expert weights (`mlp.experts`, a parameter-wrapping LoRA); merged, the exported
    model is transformers' MoE class with the fine-tuned model's logits."""
    args = _args(data, {"model": None, "tokenizer": None}, tmp_path / "moe", "lora")
    args.model.preset, args.model.vocab_size = "ernie4.5-moe-tiny", 200
    result = run_finetune(args)
    adapter = load_file(str(tmp_path / "moe/adapter/adapter_model.safetensors"))
    assert any(".self_attn.q_proj.lora_A" in k for k in adapter) and any(
        ".mlp.experts." in k for k in adapter
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "moe", dtype=torch.float32).eval()
    assert type(model).__name__ == "Ernie4_5_MoeForCausalLM"
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "moe")
    ids = _chat_ids(tok, "大的反义词是什么？")
    torch.testing.assert_close(
        _logits(model, ids), _logits(result["model"].eval(), ids), atol=1e-5, rtol=1e-5
    )


# ----------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"task": "token_classification", "use_crf": True}, r"'task' = 'token_classification'.*ERNIE 4.5 decoder"),
        ({"task": "sequence_classification"}, r"'task' = 'sequence_classification'.*fine-tune a decoder with task instruction"),
        ({"task": "generation"}, r"'task' = 'generation'.*fine-tune a decoder with task instruction"),
    ],
)  # fmt: skip
def test_a_decoder_with_an_encoder_task_is_refused(data, pretrained, tmp_path, overrides, message):
    args = _args(data, pretrained, tmp_path / "x", "lora")
    for key, value in overrides.items():
        setattr(args.model if key == "use_crf" else args, key, value)
    args.data.train_file = args.data.dev_file = write_jsonl(tmp_path / "cls.jsonl", [{"text": "大", "label": "a", "prompt": "大", "target": "小"}, {"text": "小", "label": "b", "prompt": "小", "target": "大"}])  # fmt: skip
    if args.task == "token_classification":
        args.data.train_file = args.data.dev_file = write_jsonl(tmp_path / "ner.jsonl", [{"text": "大小", "entities": [{"start": 0, "end": 1, "type": "X"}]}])  # fmt: skip
    with pytest.raises(ValueError, match=message):
        run_finetune(args)
    assert not (tmp_path / "x").exists()


def test_instruction_on_an_encoder_is_refused(data, tmp_path):
    args = _args(data, {"model": "ernie-zoo-mini-zh", "tokenizer": None}, tmp_path / "x", "lora")
    with pytest.raises(
        ValueError, match=r"'task' = 'instruction' fine-tunes an ERNIE 4.5 decoder.*an ErnieZoo encoder"
    ):
        run_finetune(args)
    args = _args(data, {"model": None, "tokenizer": None}, tmp_path / "x", "lora")
    with pytest.raises(ValueError, match=r"model.preset 'tiny' is an ErnieZoo encoder preset"):
        run_finetune(args)


def test_bad_instruction_data_and_methods_are_named(data, pretrained, tmp_path):
    args = _args(data, pretrained, tmp_path / "x", "lora")
    args.data.train_file = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "大", "target": "小"}])
    with pytest.raises(
        ValueError, match=r"t.jsonl: missing column\(s\) \['response'\].*data.response_column"
    ):
        run_finetune(args)
    args.data.train_file = write_jsonl(tmp_path / "e.jsonl", [{"prompt": "大", "response": " "}])
    with pytest.raises(ValueError, match=r"e.jsonl row 1: empty 'response'"):
        run_finetune(args)
    # a row naming "response" twice was accepted with the last one kept silently
    (tmp_path / "d.jsonl").write_text(
        '{"prompt": "大", "response": "小"}\n{"prompt": "高", "response": "矮", "response": "低"}\n',
        encoding="utf-8",
    )
    args.data.train_file = str(tmp_path / "d.jsonl")
    with pytest.raises(ValueError, match=r"d.jsonl:2: the key 'response' appears twice in one JSON object"):
        run_finetune(args)
    args = _args(data, pretrained, tmp_path / "x", "lora")
    args.data.max_length = 12
    with pytest.raises(
        ValueError, match=r"train.jsonl row 1: the prompt is 1\d tokens .* data.max_length = 12"
    ):
        run_finetune(args)
    with pytest.raises(ValueError, match=r"'method.method' = 'ia3'.*instruction.*full and lora"):
        build_args({"task": "instruction"}, {"method": "ia3"})
    from ernie_zoo.finetune.args import dump_recipe
    from ernie_zoo.finetune.plan import planner_inputs_from_finetune_recipe

    (tmp_path / "r.yaml").write_text(dump_recipe(args), encoding="utf-8")
    with pytest.raises(ValueError, match=r"'task' = 'instruction'.*does not plan yet"):
        planner_inputs_from_finetune_recipe(tmp_path / "r.yaml")
    assert not (tmp_path / "x").exists()


def test_a_long_response_is_cut_at_the_end(data, pretrained, caplog):
    args = _args(data, pretrained, Path(data["root"]) / "unused", "lora")
    args.data.max_length = 15
    task = make_objective(args)
    task.read()
    tok = transformers.AutoTokenizer.from_pretrained(pretrained["tokenizer"])
    features = task.encode(task.splits["train"], tok)
    assert all(len(f["input_ids"]) == 15 and f["labels"][-1] != tok.sep_token_id for f in features)
    assert "24 of 24 responses were cut" in caplog.text


# ----------------------------------------------------------------------------------------------- DeepSpeed


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_lora_on_two_ranks_matches_one_process(data, pretrained, tmp_path):
    """2 gloo ranks, ZeRO-3, LoRA on the pretrained decoder: every batch of 8 split 4 + 4 (all examples the same
    length, so each rank's mean is over as many tokens as the other's), against one process."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    root = Path(data["root"])
    ref = run_finetune(_args(data, pretrained, root / "single", "lora"))
    spec = json.dumps({"data": data, "base": pretrained, "out": str(root / "ds2")})
    run_local_ranks([__file__, "--worker", spec], nproc=2, timeout=900)
    state = json.loads(next((root / "ds2/checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())[
        "state"
    ]
    ref_state = json.loads(
        next((root / "single/checkpoints").glob("checkpoint-*/trainer_state.json")).read_text()
    )
    ref_state = ref_state["state"]
    assert state["train_losses"] == pytest.approx(ref_state["train_losses"], rel=LOSS_RTOL)
    assert state["grad_norms"] == pytest.approx(ref_state["grad_norms"], rel=NORM_RTOL)
    results = json.loads((root / "ds2/eval_results.json").read_text())
    assert results["distributed"]["zero_stage"] == 3 and results["distributed"]["world_size"] == 2
    assert results["dev"]["loss"] == pytest.approx(ref["dev"]["loss"], rel=1e-4)
    got = load_file(str(root / "ds2/adapter/adapter_model.safetensors"))
    want = load_file(str(root / "single/adapter/adapter_model.safetensors"))
    assert got.keys() == want.keys()
    assert max(want[k].abs().max().item() for k in want if "lora_B" in k) > 1000 * WEIGHT_ATOL  # it moved
    diffs = {k: (got[k] - want[k]).abs().max().item() for k in want}
    diff = max(v for k, v in diffs.items() if "lora_A" not in k)  # lora_B (and any fully trained tensor)
    updates = {  # the weight update B @ A of every adapted layer
        k: (got[k.replace("lora_A", "lora_B")] @ got[k] - want[k.replace("lora_A", "lora_B")] @ want[k])
        .abs()
        .max()
        for k in want
        if "lora_A" in k
    }
    assert updates and max(updates.values()).item() < WEIGHT_ATOL
    assert max(v for k, v in diffs.items() if "lora_A" in k) < LORA_A_ATOL
    print(f"instruction LoRA, ZeRO-3 on 2 ranks: max adapter diff {diff:.2e}, max loss rel diff "
          f"{max(abs(a / b - 1) for a, b in zip(state['train_losses'], ref_state['train_losses'])):.2e}, max grad "
          f"norm rel diff {max(abs(a / b - 1) for a, b in zip(state['grad_norms'], ref_state['grad_norms'])):.2e}; "
          f"largest: {sorted(diffs.items(), key=lambda kv: -kv[1])[:3]}")  # fmt: skip
    assert diff < WEIGHT_ATOL
    # the merged output directories in plain transformers: the same logits
    ids = _chat_ids(transformers.AutoTokenizer.from_pretrained(root / "ds2"), "大的反义词是什么？")
    models = [transformers.AutoModelForCausalLM.from_pretrained(root / d, dtype=torch.float32).eval()
              for d in ("ds2", "single")]  # fmt: skip
    torch.testing.assert_close(_logits(models[0], ids), _logits(models[1], ids), atol=1e-4, rtol=1e-4)
    for rank in range(2):  # ZeRO-3: every parameter, frozen or trained, held as a half on each rank
        shards = json.loads((root / f"ds2/rank{rank}.json").read_text())
        assert any("q_proj.base_layer" in n for n in shards) and any("lora_A" in n for n in shards)
        for name, (full, local) in shards.items():
            assert local == -(-full // 2) < full or full < 2, (rank, name, full, local)


def _worker(spec: str) -> None:
    import os

    torch.set_num_threads(1)
    spec = json.loads(spec)
    result = run_finetune(_args(spec["data"], spec["base"], Path(spec["out"]), "lora", backend="deepspeed"))
    Path(spec["out"]).mkdir(parents=True, exist_ok=True)
    (Path(spec["out"]) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result["shards"]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
        finish_distributed()  # every rank, after its last collective (a live group can abort at exit)


@pytest.mark.slow
def test_lora_on_a_full_size_ernie45_03b_replica(data, tmp_path):
    """#37: the real ERNIE-4.5-0.3B configuration, unshrunk (18 layers, hidden 1024, 103,424-row embedding, 360.7M
    random weights), LoRA-fine-tuned by `ernie-finetune`'s instruction task for 2 steps: the adapter holds only the
    LoRA factors of the real shapes, the loss moves, and the adapter through plain peft gives the fine-tuned logits."""
    import peft
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path / "base"
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    bpe.decoder = decoders.Metaspace()
    texts = [f"User: {r['prompt']}\nAssistant: {r['response']}" for r in _rows()]
    bpe.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>",
                                               eos_token="</s>", pad_token="<unk>")  # fmt: skip
    config = preset_config("ernie4.5-0.3b", bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)  # fmt: skip
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (18, 1024, 103424)
    torch.manual_seed(0)
    model = transformers.Ernie4_5ForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == 360_748_032
    model.save_pretrained(root)
    tok.save_pretrained(root)
    del model
    args = _args(data, {"model": str(root), "tokenizer": None}, tmp_path / "out", "lora", max_steps=2,
                 eval_every=2, batch_size=4, num_threads=2)  # fmt: skip
    result = run_finetune(args)
    out = tmp_path / "out"
    losses = json.loads(next((out / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())[
        "state"
    ]["train_losses"]
    assert len(losses) == 2 and losses[0] != losses[1]
    adapter = load_file(str(out / "adapter/adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert adapter[next(k for k in adapter if "layers.17.self_attn.q_proj.lora_A" in k)].shape == (4, 1024)
    ids = _chat_ids(
        transformers.AutoTokenizer.from_pretrained(out), "大的反义词是什么？"
    )  # the saved template
    tuned = result["model"].eval()
    base_model = transformers.AutoModelForCausalLM.from_pretrained(root, dtype=torch.float32)
    merged = peft.PeftModel.from_pretrained(base_model, str(out / "adapter")).merge_and_unload().eval()
    torch.testing.assert_close(_logits(merged, ids), _logits(tuned, ids), atol=1e-4, rtol=1e-4)

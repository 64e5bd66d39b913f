"""`ernie-finetune --task preference` (#49 item 1): DPO, IPO, ORPO and SimPO on the ERNIE 4.5 decoders.

Checked: the four losses equal TRL 1.16's own implementations (DPOTrainer loss_type sigmoid / ipo, ORPOTrainer,
CPOTrainer loss_type simpo) on a fixed batch to 1e-5, DPO both against a frozen base (full) and against the base
with the LoRA adapter disabled; conversational rows encode as TRL tokenizes them; a DPO LoRA run on the ernie4.5-tiny
preset with 64 preference rows raises the chosen-minus-rejected log-probability margin on those rows, measured in
plain transformers on the merged output directory and in peft on base + adapter; full DPO keeps its reference frozen
and logs rewards; ZeRO-3 on 2 gloo ranks equals one process; bad rows and settings are named.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import write_jsonl

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.objectives import make_objective
from ernie_zoo.models.presets import preset_config
from ernie_zoo.parallel.distributed import finish_distributed
from ernie_zoo.training.preference import PreferenceLoss, pair_batch
from ernie_zoo.training.supervised import IGNORE, collate

REPO = Path(__file__).resolve().parents[1]
ANTONYMS = ["大小", "多少", "上下", "左右", "前后", "高低", "长短", "冷热", "快慢", "早晚", "新旧", "开关", "来去",
            "买卖", "黑白", "正反"]  # fmt: skip


def preference_rows() -> list[dict[str, str]]:
    """64 rows: for each antonym pair, both directions in two phrasings; chosen is the antonym, rejected an evasion
    (a preference a 2-layer random model can pick up in a dozen steps)."""
    rows = []
    for a, b in ANTONYMS:
        for x, y in ((a, b), (b, a)):
            rows.append({"prompt": f"{x}的反义词是什么？", "chosen": f"{y}。", "rejected": "不知道。"})
            rows.append({"prompt": f"“{x}”的反义词是？", "chosen": f"是{y}。", "rejected": "我不知道。"})
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("preference")
    rows = preference_rows()
    assert len(rows) == 64
    return {"train": write_jsonl(root / "train.jsonl", rows), "root": str(root)}


def _args(data, out: Path, method: str = "lora", loss: str = "dpo", backend: str = "single", **train):
    return build_args(
        {
            "task": "preference",
            "data": {"train_file": data["train"], "max_length": 24},
            "model": {"preset": "ernie4.5-tiny", "vocab_size": 120},
            "method": {"method": method, "lora_r": 4, "lora_dropout": 0.0},
            "train": {"output_dir": str(out), "batch_size": 16, "max_steps": 12, "learning_rate": 1e-2,
                      "warmup_ratio": 0.0, "progress": False, "tensorboard": False, "num_threads": 1, **train},
            "preference": {"loss": loss, "beta": 0.5},
            "distributed": {"backend": backend, "zero_stage": 3 if backend == "deepspeed" else None},
        }
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------- TRL parity


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer ERNIE 4.5 (ernie4.5-tiny), a BPE tokenizer with <s> / </s>, and a collated batch of 3 rows of
    different lengths encoded by the objective."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("trl")
    rows = [{"prompt": "大的反义词是什么？", "chosen": "小", "rejected": "大大"},
            {"prompt": "冷的反义词？", "chosen": "热热热", "rejected": "冰"},
            {"prompt": "上", "chosen": "下", "rejected": "上上上上"}]  # fmt: skip
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    bpe.decoder = decoders.Metaspace()
    texts = [f"User: {r['prompt']}\nAssistant: {r['chosen']}{r['rejected']}" for r in rows]
    bpe.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=80, special_tokens=["<unk>", "<s>", "</s>"])
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>",
                                               eos_token="</s>", pad_token="<unk>")  # fmt: skip
    config = preset_config("ernie4.5-tiny", vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    base = transformers.Ernie4_5ForCausalLM(config).eval()
    args = build_args({"task": "preference", "data": {"train_file": write_jsonl(root / "t.jsonl", rows)}})
    task = make_objective(args)
    task.read()
    features = task.encode(task.splits["train"], tok)
    assert len({len(f["chosen_input_ids"]) for f in features}) > 1  # padding is exercised
    return {
        "rows": rows,
        "tok": tok,
        "base": base,
        "batch": collate(features, tok.pad_token_id),
        "root": root,
    }


def _trl_common(tiny) -> dict:
    # bf16=False: TRL's configs default to bf16 autocast where the CPU supports it
    return {"output_dir": str(tiny["root"] / "trl"), "report_to": "none", "use_cpu": True, "bf16": False}


def _trl_dpo_inputs(batch) -> dict[str, torch.Tensor]:
    """The same token ids in DPOTrainer's layout: [chosen; rejected], completion_mask on the responses."""
    pair = pair_batch(batch)
    return {"input_ids": pair["input_ids"], "attention_mask": pair["attention_mask"],
            "completion_mask": (pair["labels"] != IGNORE).long()}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["dpo", "ipo"])
def test_dpo_and_ipo_with_the_adapter_disabled_as_reference_equal_trl(tiny, loss):
    import peft
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    trainer = DPOTrainer(
        model=copy.deepcopy(tiny["base"]),
        args=DPOConfig(beta=0.2, loss_type=["sigmoid" if loss == "dpo" else "ipo"], **_trl_common(tiny)),
        train_dataset=Dataset.from_list(tiny["rows"]),
        processing_class=tiny["tok"],
        peft_config=peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    policy = trainer.model  # a fresh adapter: TRL's reference is the base, adapter disabled, as ours
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)  # the adapter moved away from the base
    policy.eval()
    theirs = trainer.compute_loss(policy, _trl_dpo_inputs(tiny["batch"]))
    ours = PreferenceLoss(policy, loss, beta=0.2)(**tiny["batch"])
    torch.testing.assert_close(ours.loss, theirs, atol=1e-5, rtol=1e-5)
    logged = trainer._metrics["eval"]  # the policy is in eval mode: TRL files the batch under eval
    rows = ours.metrics["rows"]
    for key, trl_key in (("rewards/chosen", "rewards/chosen"), ("rewards/rejected", "rewards/rejected"),
                         ("rewards/margins", "rewards/margins"), ("rewards/accuracy", "rewards/accuracies")):  # fmt: skip
        assert ours.metrics[key] / rows == pytest.approx(logged[trl_key][-1], abs=1e-5), key
    # the reference really is the base: against the base itself as a frozen copy, the same loss
    with_copy = PreferenceLoss(policy, loss, beta=0.2, reference=copy.deepcopy(tiny["base"]))(**tiny["batch"])
    torch.testing.assert_close(with_copy.loss, ours.loss, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_dpo_against_a_frozen_base_orpo_and_simpo_equal_trl(tiny):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    policy = copy.deepcopy(tiny["base"])
    torch.manual_seed(2)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    data, batch, common = Dataset.from_list(tiny["rows"]), tiny["batch"], _trl_common(tiny)
    trainer = DPOTrainer(model=policy, ref_model=copy.deepcopy(tiny["base"]), args=DPOConfig(beta=0.2, **common),
                         train_dataset=data, processing_class=tiny["tok"])  # fmt: skip
    theirs = trainer.compute_loss(policy, _trl_dpo_inputs(batch))
    ours = PreferenceLoss(policy, "dpo", beta=0.2, reference=copy.deepcopy(tiny["base"]))(**batch)
    torch.testing.assert_close(ours.loss, theirs, atol=1e-5, rtol=1e-5)
    assert abs(float(ours.loss) - 0.6931) > 1e-3  # the policy is not its reference

    trainer = ORPOTrainer(model=policy, args=ORPOConfig(beta=0.3, **common), train_dataset=data,
                          processing_class=tiny["tok"])  # fmt: skip
    theirs, logged = trainer.get_batch_loss_metrics(policy, dict(batch))
    ours = PreferenceLoss(policy, "orpo", beta=0.3)(**batch)
    torch.testing.assert_close(ours.loss, theirs, atol=1e-5, rtol=1e-5)
    assert ours.metrics["rewards/chosen"] / 3 == pytest.approx(logged["rewards/chosen"], abs=1e-5)

    config = CPOConfig(
        beta=2.0, loss_type="simpo", simpo_gamma=0.7, cpo_alpha=0.4, label_smoothing=0.1, **common
    )
    trainer = CPOTrainer(model=policy, args=config, train_dataset=data, processing_class=tiny["tok"])
    theirs, logged = trainer.get_batch_loss_metrics(policy, dict(batch))
    ours = PreferenceLoss(policy, "simpo", beta=2.0, simpo_gamma=0.7, label_smoothing=0.1, sft_weight=0.4)(
        **batch
    )
    torch.testing.assert_close(ours.loss, theirs, atol=1e-5, rtol=1e-5)
    assert ours.metrics["rewards/margins"] / 3 == pytest.approx(logged["rewards/margins"], abs=1e-5)


def test_conversational_rows_encode_as_their_chat_template(tiny, tmp_path):
    """TRL's conversational format (a prompt of messages, each response one assistant message) and the implicit
    prompt (two whole conversations): the prompt is `apply_chat_template(prompt, add_generation_prompt=True)`, the
    response and the end token follow; a text prompt is one user turn."""
    tok = tiny["tok"]
    system = {"role": "system", "content": "反义词"}
    rows = [
        {"prompt": [system, {"role": "user", "content": "大"}], "chosen": [{"role": "assistant", "content": "小"}],
         "rejected": [{"role": "assistant", "content": "大"}]},
        {"prompt": "冷", "chosen": "热", "rejected": "冰"},
    ]  # fmt: skip
    implicit = [{"chosen": [system, {"role": "user", "content": "大"}, {"role": "assistant", "content": "小"}],
                 "rejected": [system, {"role": "user", "content": "大"}, {"role": "assistant", "content": "大"}]}]  # fmt: skip
    encoded = []
    for name, these in (("c", rows), ("i", implicit)):
        args = build_args(
            {"task": "preference", "data": {"train_file": write_jsonl(tmp_path / f"{name}.jsonl", these)}}
        )
        task = make_objective(args)
        task.read()
        encoded.append(task.encode(task.splits["train"], tok))
    first, second = encoded[0]
    assert encoded[1][0] == first  # the implicit prompt is what the two conversations share
    prompt = list(tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True)["input_ids"])
    assert tok.decode(prompt).replace(" ", "").startswith("<s>反义词\nUser:大")
    for side, text in (("chosen", "小"), ("rejected", "大")):
        response = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert first[f"{side}_input_ids"] == prompt + response
        assert first[f"{side}_labels"] == [IGNORE] * len(prompt) + response
    user = list(
        tok.apply_chat_template([{"role": "user", "content": "冷"}], add_generation_prompt=True)["input_ids"]
    )
    assert second["chosen_input_ids"][: len(user)] == user


# ----------------------------------------------------------------------------------------------- runs


def _margins(model, tok, rows) -> float:
    """Mean over `rows` of log p(chosen | prompt) - log p(rejected | prompt), in plain transformers: the prompt
    through the saved chat template, each response and the end token scored."""
    eos = tok.convert_tokens_to_ids(tok.sep_token or tok.eos_token)
    total = 0.0
    for row in rows:
        prompt = list(tok.apply_chat_template([{"role": "user", "content": row["prompt"]}],
                                              add_generation_prompt=True)["input_ids"])  # fmt: skip
        scores = []
        for text in (row["chosen"], row["rejected"]):
            response = tok(text, add_special_tokens=False)["input_ids"] + [eos]
            ids = torch.tensor([prompt + response])
            with torch.no_grad():
                logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
            targets = ids[0, 1:]
            scores.append(logp[torch.arange(len(targets)), targets][len(prompt) - 1 :].sum().item())
        total += scores[0] - scores[1]
    return total / len(rows)


@pytest.mark.slow
def test_dpo_lora_raises_the_margin_measured_after_merge_in_plain_transformers_and_peft(data, tmp_path):
    import peft

    out = tmp_path / "dpo"
    result = run_finetune(_args(data, out))
    rows = preference_rows()
    tok = transformers.AutoTokenizer.from_pretrained(out)  # the chat template saved with the tokenizer
    base = transformers.AutoModelForCausalLM.from_pretrained(out / "base_model", dtype=torch.float32).eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(merged) is transformers.Ernie4_5ForCausalLM
    before, after = _margins(base, tok, rows), _margins(merged, tok, rows)
    print(f"DPO LoRA, 64 rows, 12 steps: mean chosen - rejected log-prob margin {before:.3f} -> {after:.3f}")
    assert after > before + 1.0
    # the adapter through plain peft onto the base: the same margin
    with_adapter = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(out / "base_model", dtype=torch.float32),
        str(out / "adapter"),
    ).eval()
    assert _margins(with_adapter, tok, rows) == pytest.approx(after, abs=1e-3)
    # rewards logged every step; the first step's policy is its reference (lora_B starts at zero)
    state = json.loads(next((out / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())[
        "state"
    ]
    logged = state["train_metrics"]
    assert [m["step"] for m in logged] == list(range(1, 13))
    assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracy"} <= set(logged[0])
    assert logged[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert logged[-1]["rewards/margins"] > 0.1 and logged[-1]["rewards/accuracy"] > 0.5
    assert result["task"] == "preference" and result["method"] == "lora"


@pytest.mark.slow
@pytest.mark.parametrize(("method", "loss"), [("full", "dpo"), ("lora", "orpo"), ("lora", "simpo")])
def test_full_dpo_keeps_its_reference_frozen_and_reference_free_losses_train(data, tmp_path, method, loss):
    from ernie_zoo.finetune.run import FinetuneJob

    args = _args(data, tmp_path / "o", method=method, loss=loss, max_steps=4,
                 learning_rate=1e-3 if method == "full" else 1e-2)  # fmt: skip
    job = FinetuneJob(args, args.resolved())
    tokenizer, _ = job.prepare(None)
    model, _, fresh = job.build_model(tokenizer, None)
    wrapped, _ = job.adapt(model, 4, fresh)
    if loss == "dpo":  # full fine-tuning: a second, frozen copy of the base
        assert wrapped.reference is not None and wrapped.reference is not wrapped.policy
        assert not any(p.requires_grad for p in wrapped.reference.parameters())
    else:  # reference-free: no copy
        assert wrapped.reference is None
    result = run_finetune(_args(data, tmp_path / "run", method=method, loss=loss, max_steps=4,
                                learning_rate=1e-3 if method == "full" else 1e-2))  # fmt: skip
    state = json.loads(
        next((tmp_path / "run/checkpoints").glob("checkpoint-*/trainer_state.json")).read_text()
    )
    losses = state["state"]["train_losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert len(state["state"]["train_metrics"]) == 4
    assert (
        type(result["model"]) is transformers.Ernie4_5ForCausalLM
    )  # the policy is exported, not the wrapper
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "run", dtype=torch.float32)
    assert not any("reference" in k or "policy" in k for k in merged.state_dict())


# ----------------------------------------------------------------------------------------------- errors


def test_bad_preference_rows_and_settings_are_named(data, tmp_path):
    args = _args(data, tmp_path / "x")
    cases = [
        ([{"prompt": "大", "chosen": "小"}], r"missing column\(s\) \['rejected'\]"),
        ([{"prompt": "大", "chosen": "小", "rejected": " "}], r"row 1: empty 'rejected'"),
        ([{"prompt": "大", "chosen": [{"role": "user", "content": "小"}], "rejected": "大"}],
         r"row 1: 'chosen' message 1 has role 'user'"),
        ([{"chosen": [{"role": "user", "content": "大"}, {"role": "assistant", "content": "小"}],
           "rejected": [{"role": "user", "content": "多"}, {"role": "assistant", "content": "大"}]}],
         r"row 1: without a 'prompt' column, 'chosen' and 'rejected' must be conversations that differ only"),
    ]  # fmt: skip
    for rows, message in cases:
        args.data.train_file = write_jsonl(tmp_path / "bad.jsonl", rows)
        with pytest.raises(ValueError, match=message):
            run_finetune(args)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match=r"'preference.loss' = 'kto': must be one of"):
        build_args({"task": "preference"}, {"loss": "kto"})
    with pytest.raises(ValueError, match=r"'preference.beta' = 0.0: must be > 0"):
        build_args({"task": "preference"}, {"beta": 0.0})
    with pytest.raises(ValueError, match=r"'train.token_dropout' = 0.1: preference tuning"):
        build_args({"task": "preference"}, {"token_dropout": 0.1})
    with pytest.raises(ValueError, match=r"'method.method' = 'ia3'.*preference.*full and lora"):
        build_args({"task": "preference"}, {"method": "ia3"})
    with pytest.raises(ValueError, match=r"needs a reference model"):
        PreferenceLoss(torch.nn.Linear(2, 2), "dpo")


# ----------------------------------------------------------------------------------------------- DeepSpeed


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_dpo_lora_on_two_ranks_matches_one_process(data, tmp_path):
    """2 gloo ranks, ZeRO-3, DPO with LoRA (the reference: the adapter disabled, through the same partitioned
    module), every batch of 16 split 8 + 8, against one process: losses, rewards and the merged model."""
    from ernie_zoo.parallel.distributed import run_local_ranks

    ref = run_finetune(_args(data, tmp_path / "single", max_steps=4))
    spec = json.dumps({"data": data, "out": str(tmp_path / "ds2")})
    run_local_ranks([__file__, "--worker", spec], nproc=2, timeout=900)

    def state(d):
        return json.loads(
            next((tmp_path / d / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text()
        )

    got, want = state("ds2")["state"], state("single")["state"]
    assert got["train_losses"] == pytest.approx(want["train_losses"], rel=1e-5)
    for a, b in zip(got["train_metrics"], want["train_metrics"]):
        for key in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracy"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    assert want["train_metrics"][-1]["rewards/margins"] > 0.01  # it moved
    results = json.loads((tmp_path / "ds2/eval_results.json").read_text())
    assert results["distributed"]["zero_stage"] == 3 and results["distributed"]["world_size"] == 2
    for rank in range(2):  # every parameter held as a half on each rank
        shards = json.loads((tmp_path / f"ds2/rank{rank}.json").read_text())
        assert any("q_proj.base_layer" in n for n in shards) and any("lora_A" in n for n in shards)
        for name, (full, local) in shards.items():
            assert local == -(-full // 2) < full or full < 2, (rank, name, full, local)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "ds2")
    models = [transformers.AutoModelForCausalLM.from_pretrained(tmp_path / d, dtype=torch.float32).eval()
              for d in ("ds2", "single")]  # fmt: skip
    rows = preference_rows()[:8]
    assert _margins(models[0], tok, rows) == pytest.approx(_margins(models[1], tok, rows), abs=1e-3)
    assert ref["task"] == "preference"


def _worker(spec: str) -> None:
    import os

    torch.set_num_threads(1)
    spec = json.loads(spec)
    result = run_finetune(_args(spec["data"], Path(spec["out"]), backend="deepspeed", max_steps=4))
    Path(spec["out"]).mkdir(parents=True, exist_ok=True)
    (Path(spec["out"]) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result["shards"]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
        finish_distributed()


# ----------------------------------------------------------------------------------------------- the CLI


@pytest.mark.slow
def test_the_cli_runs_preference_tuning(data, tmp_path):
    cmd = [sys.executable, "-m", "ernie_zoo.finetune.cli", "--task", "preference", "--train_file", data["train"],
           "--preset", "ernie4.5-tiny", "--vocab_size", "120", "--method", "lora", "--loss", "simpo", "--beta", "2.0",
           "--max_steps", "2", "--batch_size", "16", "--output_dir", str(tmp_path / "cli"), "--progress", "false",
           "--tensorboard", "false"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "cli/eval_results.json").read_text())["task"] == "preference"

"""LoRA on a low-bit base (#49 item 5): `ernie-finetune --quantize_base 8bit|4bit` loads a decoder base's Linear
weights through bitsandbytes (0.50.2 runs int8 and NF4 on this CPU) and trains LoRA on it. Checked: the Linear
layers really are bitsandbytes' during training and the base takes less memory than in fp32; the run learns, with a
loss curve close to full-precision LoRA's; the merged export folds the adapter into the full-precision base (a
logged note says so) and equals plain peft's merge onto that base; `ernie-finetune merge` onto a base directory
that holds quantized weights is refused with the reason; wrong settings are named."""

from __future__ import annotations

import json
from pathlib import Path

import bitsandbytes  # noqa: F401  (the qlora extra, part of dev: not installed is a failure, not a skip)
import pytest
import torch
import transformers

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.export import merge_adapter
from ernie_zoo.finetune.run import FinetuneJob
from ernie_zoo.models.presets import preset_config
from ernie_zoo.tokenization import ErnieZooTokenizerFast

ANTONYMS = ["大小", "多少", "上下", "左右", "前后", "高低", "长短", "冷热"]


def _rows() -> list[dict[str, str]]:
    return [
        {"prompt": f"{x}的反义词是什么？", "response": y} for a, b in ANTONYMS for x, y in ((a, b), (b, a))
    ]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, str]:
    """A random ERNIE 4.5 (hidden 256, 2 layers: Linear weights a multiple of bitsandbytes' 64-value blocks) with the
    zoo's character tokenizer, saved as a pretrained directory, and the instruction data."""
    root = tmp_path_factory.mktemp("qlora")
    rows = _rows()
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    texts = ["User: Assistant: "] + [r["prompt"] + r["response"] for r in rows]
    tok = ErnieZooTokenizerFast.train_vocab(texts, vocab_size=200, min_frequency=1, show_progress=False)
    config = preset_config("ernie4.5-tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=64, vocab_size=len(tok),
                           bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                           pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    transformers.Ernie4_5ForCausalLM(config).save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    return {"model": str(root / "base"), "train": str(data), "root": str(root)}


def _args(base, out: Path, quantize: str | None, steps: int = 8):
    return build_args(
        {
            "task": "instruction",
            "data": {"train_file": base["train"], "max_length": 24},
            "model": {"model_name_or_path": base["model"], "quantize_base": quantize},
            "method": {"method": "lora", "lora_r": 4, "lora_dropout": 0.0},
            "train": {"output_dir": str(out), "batch_size": 8, "max_steps": steps, "learning_rate": 2e-2,
                      "warmup_ratio": 0.0, "progress": False, "tensorboard": False, "num_threads": 1},
        }
    )  # fmt: skip


@pytest.mark.parametrize(("bits", "layer"), [("8bit", "Linear8bitLt"), ("4bit", "Linear4bit")])
def test_the_base_is_quantized_and_smaller(base, tmp_path, bits, layer):
    sizes = {}
    for quantize in (None, bits):
        args = _args(base, tmp_path / "x", quantize)
        job = FinetuneJob(args, args.resolved())
        tokenizer, _ = job.prepare(None)
        model, _, _ = job.build_model(tokenizer, None)
        q_proj = model.model.layers[0].self_attn.q_proj
        assert type(q_proj).__name__ == (layer if quantize else "Linear")
        sizes[quantize] = model.get_memory_footprint()
    # the Linear weights (2 x 0.62M of 0.67M parameters besides the embedding) in 1 byte (8bit) or half (4bit)
    print(f"{bits} base: {sizes[bits] / 2**20:.2f} MiB vs fp32 {sizes[None] / 2**20:.2f} MiB")
    assert sizes[bits] < 0.6 * sizes[None]


@pytest.mark.slow
@pytest.mark.parametrize("bits", ["8bit", "4bit"])
def test_qlora_learns_like_lora_and_merges_onto_the_full_precision_base(base, tmp_path, bits, caplog):
    import peft

    full = run_finetune(_args(base, tmp_path / "fp32", None))
    run_finetune(_args(base, tmp_path / bits, bits))

    def losses(d: str) -> list[float]:
        path = next((tmp_path / d / "checkpoints").glob("checkpoint-*/trainer_state.json"))
        return json.loads(path.read_text())["state"]["train_losses"]

    low, ref = losses(bits), losses("fp32")
    print(f"{bits}: losses {[round(x, 3) for x in low]}; fp32 LoRA {[round(x, 3) for x in ref]}")
    assert low[-1] < 0.7 * low[0]  # it learns
    assert (
        abs(low[0] - ref[0]) < 0.05 * ref[0] and abs(low[-1] - ref[-1]) < 0.25 * ref[-1]
    )  # close to fp32 LoRA
    assert "merged into the full-precision base" in caplog.text
    # `ernie-finetune merge` on the adapter alone: the same merge, with the same note
    caplog.clear()
    merge_adapter(tmp_path / bits / "adapter", tmp_path / "merged-again")
    assert f"was trained on a bitsandbytes {bits[0]}-bit base" in caplog.text
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged-again", dtype=torch.float32)
    results = json.loads((tmp_path / bits / "eval_results.json").read_text())
    assert results["export"]["merged_onto"] == "full-precision base"
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / bits, dtype=torch.float32).eval()
    assert getattr(merged.config, "quantization_config", None) is None
    assert type(merged.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    plain = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(base["model"], dtype=torch.float32),
        str(tmp_path / bits / "adapter"),
    )
    plain = plain.merge_and_unload().eval()
    ids = torch.tensor([[2, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(
            merged(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-5, rtol=1e-5
        )
        torch.testing.assert_close(
            again(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-5, rtol=1e-5
        )
    assert full["task"] == "instruction"


def test_merge_onto_a_quantized_base_directory_is_refused(base, tmp_path):
    run_finetune(_args(base, tmp_path / "run", None, steps=1))
    meta = json.loads((tmp_path / "run/adapter/ernie_zoo_finetune.json").read_text())
    quantized = tmp_path / "quantized-base"
    quantized.mkdir()
    for name in Path(base["model"]).iterdir():
        (quantized / name.name).write_bytes(name.read_bytes())
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (quantized / "config.json").write_text(json.dumps(config))
    meta["base_model"] = str(quantized)
    (tmp_path / "run/adapter/ernie_zoo_finetune.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"holds quantized weights \(bitsandbytes\): merging would round"):
        merge_adapter(tmp_path / "run/adapter", tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_bad_quantize_settings_are_named(base):
    with pytest.raises(ValueError, match=r"'model.quantize_base' = '2bit': must be 8bit, 4bit or null"):
        build_args({"task": "instruction"}, {"quantize_base": "2bit", "model_name_or_path": base["model"]})
    with pytest.raises(ValueError, match=r"'model.quantize_base' = '8bit': a quantized base trains LoRA"):
        build_args({"task": "instruction"}, {"quantize_base": "8bit", "method": "full"})
    with pytest.raises(
        ValueError, match=r"'model.quantize_base' = '4bit': needs a pretrained model_name_or_path"
    ):
        build_args({"task": "preference", "model": {"preset": "ernie4.5-tiny"}}, {"quantize_base": "4bit"})

"""LoRA on a low-bit base against LoRA on the fp32 base (#49 item 5), on this CPU: `ernie-finetune --task instruction
--quantize_base 8bit|4bit` (bitsandbytes 0.50.2: int8 LLM.int8() / NF4 with fp32 compute) on the shipped
ernie-zoo-mini-generator (7.4M parameters, of which 3.1M in the Linear layers bitsandbytes quantizes; the 4.1M
embedding, tied to the LM head, stays fp32), on the walk-through's multi-turn chats (data/preference/chat_zh.jsonl).

Measured per base: the model's memory footprint as built for training (`get_memory_footprint()`: parameters and
buffers), the Linear layers' share, the training loss at every step, the seconds per step; written to
bench/results/qlora_cpu.json. One run each, the same seed and data order.

    python bench/qlora_cpu.py --steps 20
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.run import FinetuneJob

ROOT = Path(__file__).resolve().parents[1]


def _args(out: Path, quantize: str | None, steps: int):
    return build_args(
        {
            "task": "instruction",
            "data": {"train_file": str(ROOT / "data/preference/chat_zh.jsonl"), "max_length": 64},
            "model": {"model_name_or_path": "ernie-zoo-mini-generator", "quantize_base": quantize},
            "method": {"method": "lora", "lora_r": 8, "lora_dropout": 0.0},
            "train": {"output_dir": str(out), "batch_size": 8, "max_steps": steps, "learning_rate": 5e-3,
                      "progress": False, "tensorboard": False, "num_threads": 2},
        }
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "bench/results/qlora_cpu.json"))
    opts = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for quantize in (None, "8bit", "4bit"):
            name = quantize or "fp32"
            args = _args(Path(tmp) / name, quantize, opts.steps)
            job = FinetuneJob(args, args.resolved())
            tokenizer, _ = job.prepare(None)
            model, _, _ = job.build_model(tokenizer, None)
            linear = sum(
                m.weight.numel() * m.weight.element_size()
                for m in model.modules()
                if "Linear" in type(m).__name__ and m is not getattr(model, "lm_head", None)
            )
            footprint = model.get_memory_footprint()
            del model, job
            t0 = time.perf_counter()
            run_finetune(args)
            seconds = time.perf_counter() - t0
            state = json.loads(next((Path(tmp) / name / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())  # fmt: skip
            losses = state["state"]["train_losses"]
            results[name] = {
                "footprint_mib": round(footprint / 2**20, 3),
                "linear_weights_mib": round(linear / 2**20, 3),
                "losses": [round(x, 4) for x in losses],
                "seconds_per_step": round(seconds / len(losses), 3),
            }
            print(name, results[name], flush=True)
    fp32 = results["fp32"]
    for name in ("8bit", "4bit"):
        r = results[name]
        r["footprint_vs_fp32"] = round(r["footprint_mib"] / fp32["footprint_mib"], 3)
        r["max_abs_loss_gap_vs_fp32"] = round(max(abs(a - b) for a, b in zip(r["losses"], fp32["losses"])), 4)
    report = {
        "command": f"python bench/qlora_cpu.py --steps {opts.steps}",
        "torch": torch.__version__,
        "bitsandbytes": __import__("bitsandbytes").__version__,
        "results": results,
    }
    Path(opts.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

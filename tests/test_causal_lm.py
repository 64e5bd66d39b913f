"""Causal-LM pretraining of the ERNIE 4.5 decoders (ernie_zoo/training/causal_lm.py, #37 item 2): packing with
per-document attention, the loss never crossing a document, FLOPs, and `ernie-pretrain` on a decoder preset:
it learns, its checkpoint opens in plain transformers, and a run SIGKILLed mid-way resumes bit for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ernie_zoo.models.decoder import build_decoder, decoder_config
from ernie_zoo.training.causal_lm import (
    CausalCollator,
    causal_lm_loss,
    decoder_training_flops,
    pack_documents,
)

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml"


def _tiny(moe: bool = False, **extra):
    torch.manual_seed(0)
    fields = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, vocab_size=50)  # fmt: skip
    if moe:
        fields.update(moe_num_experts=4, moe_k=2, moe_num_shared_experts=1, moe_intermediate_size=16,
                      moe_layer_start_index=1, moe_layer_end_index=1)  # fmt: skip
    return build_decoder(decoder_config(moe, **fields, **extra)).eval()


def test_pack_documents_fills_rows_and_restarts_positions():
    ids, pos = pack_documents([[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17]], 8, bos=1, eos=2)
    assert ids.tolist() == [
        [1, 5, 6, 7, 8, 2, 1, 9],
        [10, 11, 2, 1, 12, 13, 14, 15],
    ]  # the last partial row dropped
    assert pos.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1], [0, 1, 2, 0, 1, 2, 3, 4]]  # doc starts and row starts
    assert pack_documents([], 8, 1, 2)[0].shape == (0, 8)
    with pytest.raises(ValueError, match="seq_len"):
        pack_documents([[1]], 1, 1, 2)


def test_a_packed_document_attends_only_to_itself():
    model = _tiny()
    ids, pos = pack_documents([[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17]], 8, bos=1, eos=2)
    ids_t, pos_t = torch.tensor(ids, dtype=torch.long), torch.tensor(pos, dtype=torch.long)
    with torch.no_grad():
        packed = model(input_ids=ids_t, position_ids=pos_t, use_cache=False).logits
        alone = model(input_ids=torch.tensor([[1, 12, 13, 14, 15]]), use_cache=False).logits
        unpacked = model(input_ids=ids_t, use_cache=False).logits  # no position ids: one long causal sequence
    assert (packed[1, 3:8] - alone[0]).abs().max() < 1e-5
    assert (unpacked[1, 3:8] - alone[0]).abs().max() > 1e-3  # the check would see cross-document attention


def test_the_loss_never_crosses_a_document():
    model = _tiny()
    ids, pos = pack_documents([[5, 6, 7], [9, 10, 11, 12]], 11, bos=1, eos=2)
    batch = CausalCollator()([{"input_ids": ids[0], "position_ids": pos[0]}])
    assert batch["labels"].tolist() == [[-100, 5, 6, 7, 2, -100, 9, 10, 11, 12, 2]]
    loss, n, correct = causal_lm_loss(model, batch)
    assert n == 9 and 0 <= correct <= n
    with torch.no_grad():  # the same as each document scored on its own
        total = 0.0
        for doc in ([1, 5, 6, 7, 2], [1, 9, 10, 11, 12, 2]):
            logits = model(input_ids=torch.tensor([doc]), use_cache=False).logits[0, :-1]
            total += torch.nn.functional.cross_entropy(logits, torch.tensor(doc[1:]), reduction="sum").item()
    assert loss.item() == pytest.approx(total / 9, rel=1e-5)


def test_moe_training_adds_the_router_load_balancing_loss():
    model = _tiny(moe=True, router_aux_loss_coef=0.5)
    ids, pos = pack_documents([[5, 6, 7, 8, 9, 10, 11]], 9, bos=1, eos=2)
    batch = CausalCollator()([{"input_ids": ids[0], "position_ids": pos[0]}])
    details: dict = {}
    eval_loss, _, _ = causal_lm_loss(model, batch, details)
    assert "aux_loss" not in details  # evaluation: the LM loss alone
    model.train()
    torch.manual_seed(0)
    train_loss, _, _ = causal_lm_loss(model, batch, details)
    assert details["aux_loss"] > 0
    assert train_loss.item() == pytest.approx(details["lm_loss"] + 0.5 * details["aux_loss"], rel=1e-5)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_flops_count_the_matmul_weights_a_token_passes_through(moe):
    """From the parameters: every matrix but the embedding lookup, the LM head (tied to it) once, and of the routed
    experts (fused 3-D tensors) only the top-k a token is sent to."""
    model = _tiny(moe=moe)
    config = model.config
    matmul = config.vocab_size * config.hidden_size  # lm_head
    for name, p in model.named_parameters():
        if p.dim() < 2 or "embed_tokens" in name or "e_score_correction" in name:
            continue
        matmul += p.numel() * config.moe_k // config.moe_num_experts if ".experts." in name else p.numel()
    attention = 12 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * 16
    assert decoder_training_flops(config, 10, 16) == 10 * (6 * matmul + attention)


def _pretrain(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ernie_zoo.training.pretrain", str(RECIPE), "--output_dir", str(out),
           "--logging.progress_bar", "false", *extra]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})  # fmt: skip


@pytest.mark.slow
def test_ernie_pretrain_trains_a_decoder_that_opens_in_transformers(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = _pretrain(tmp_path / "run", "--max_steps", "60")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["final_loss"] < summary["first_loss"] - 1.0  # it learns
    assert summary["mfu"] is None or summary["mfu"] > 0
    assert summary["data"]["packing"].startswith("documents as [BOS]")
    ckpt = tmp_path / "run/checkpoint-60"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    tok = AutoTokenizer.from_pretrained(tmp_path / "run/tokenizer")
    assert type(model).__name__ == "Ernie4_5ForCausalLM"
    ids = torch.tensor([[tok.cls_token_id, *tok("今天", add_special_tokens=False)["input_ids"]]])
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False
    )
    assert out.shape[1] > ids.shape[1]


@pytest.mark.slow
def test_a_decoder_run_resumes_bit_for_bit_after_sigkill(tmp_path):
    common = ("--max_steps", "12", "--checkpoint.interval", "4", "--checkpoint.keep_last", "5",
              "--eval.interval", "5", "--logging.interval", "1", "--logging.tensorboard", "false")  # fmt: skip
    a, b = tmp_path / "a", tmp_path / "b"
    assert _pretrain(a, *common).returncode == 0
    killed = _pretrain(b, *common, env={"ERNIE_ZOO_TEST_KILL_AT_STEP": "9"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _pretrain(b, *common, "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((b / "summary.json").read_text())["resumed_from_step"] == 8

    def history(run):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        return [(r["step"], r.get("train/loss"), r.get("eval/loss"), r.get("train/grad_norm")) for r in rows]

    assert history(a) == history(b)
    for name in ("model.safetensors", "optimizer.safetensors"):
        wa, wb = load_file(str(a / "checkpoint-12" / name)), load_file(str(b / "checkpoint-12" / name))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), name
    train = [h[1] for h in history(a) if h[1] is not None]
    assert len(train) == 12 and all(np.isfinite(train))

"""Selective recompute (`models.recompute`, `distributed.recompute: selective`): the attention core of every layer, and
nothing else, runs again in backward, with the gradients of a run without recompute.

For the ERNIE encoder (attention dropout on: the rerun must draw the same dropout mask) and transformers' ERNIE 4.5
dense and MoE decoders, under sdpa and eager attention:
- gradients with selective recompute == without (fp32; the same kernels on the same inputs, so exactly equal), and
  with full recompute too (the reference for "recompute changes nothing but memory and time");
- in backward the attention core runs once per layer and no projection, MLP or expert Linear runs again (full
  recompute reruns them all);
- the activations kept for backward (torch.autograd.graph.saved_tensors_hooks, each storage counted once,
  parameters left out): none > selective > full; selective keeps no per-head s x s tensor (the scores, softmax,
  dropout mask and output: the 5*a*s/h term the planner's selective formula drops) and no more of the rest than no
  recompute keeps, but for the attention mask, one tensor shared by the layers (q, k and v are kept as the
  checkpoint's inputs where the kernels kept them or copies of them: the planner's s*b*h*34).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ernie_zoo.models.recompute import (
    apply_recompute,
    disable_selective_recompute,
    enable_selective_recompute,
    selective_recompute_enabled,
)

BATCH, SEQ, VOCAB = 2, 24, 300


def _encoder():
    from ernie_zoo import ErnieZooConfig, ErnieZooForMaskedLM
    from ernie_zoo.models.presets import PRESETS

    config = ErnieZooConfig(vocab_size=VOCAB, max_position_embeddings=64, use_pinyin=False, **PRESETS["tiny"])
    assert config.attention_probs_dropout_prob > 0 and config.hidden_dropout_prob > 0  # dropout is replayed
    return ErnieZooForMaskedLM(config)


def _decoder(moe: bool):
    from ernie_zoo.models.decoder import build_decoder, decoder_config
    from ernie_zoo.models.presets import DECODER_PRESETS

    preset = DECODER_PRESETS["ernie4.5-moe-tiny" if moe else "ernie4.5-tiny"]
    return build_decoder(decoder_config(moe=moe, **{**preset, "vocab_size": VOCAB}))


MODELS = {"encoder": _encoder, "dense": lambda: _decoder(False), "moe": lambda: _decoder(True)}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    return {name: build() for name, build in MODELS.items()}


def _copy(model: nn.Module, attention: str, recompute: str) -> nn.Module:
    m = copy.deepcopy(model)
    m.set_attn_implementation(attention)
    apply_recompute(m, recompute)
    return m.train()


def _inputs():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -5:] = 0  # padding in a row: a real mask reaches the attention core
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}


def _loss(model: nn.Module) -> torch.Tensor:
    torch.manual_seed(7)  # the same dropout draws in every run
    return model(**_inputs()).loss


def _saved(model: nn.Module) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The loss and the activations autograd keeps for backward: storage -> the first tensor saved on it."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            kept.setdefault(ptr, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = _loss(model)
    return loss, kept


def _nbytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def _per_head_scores(t: torch.Tensor, heads: int) -> bool:
    """An s x s tensor per head: scores, softmax, dropout mask or output (batch x heads rows, 3-d or 4-d)."""
    return tuple(t.shape[-2:]) == (SEQ, SEQ) and t.numel() == BATCH * heads * SEQ * SEQ


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", list(MODELS))
def test_selective_gradients_equal_no_recompute(models, name, attention):
    grads = {}
    for recompute in ("none", "selective", "full"):
        m = _copy(models[name], attention, recompute)
        _loss(m).backward()
        grads[recompute] = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        if recompute == "selective":
            assert selective_recompute_enabled(m) and m.config._attn_implementation.endswith(attention)
            assert not m.is_activation_checkpointing
    assert grads["none"] and grads["selective"].keys() == grads["none"].keys()
    for recompute in ("selective", "full"):
        for n, g in grads["none"].items():
            torch.testing.assert_close(grads[recompute][n], g, rtol=1e-6, atol=1e-7, msg=f"{recompute} {n}")


@pytest.mark.parametrize("name", list(MODELS))
def test_only_the_attention_core_runs_again(models, name, monkeypatch):
    """Count, in forward and in backward, the calls of sdpa (the attention core's kernel) and of every Linear."""
    layers = models[name].config.num_hidden_layers
    phase, calls = ["forward"], {}
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counted_sdpa(*args, **kwargs):
        calls[(phase[0], "core")] = calls.get((phase[0], "core"), 0) + 1
        return sdpa(*args, **kwargs)

    def count_linear(module, args, output):
        if isinstance(module, nn.Linear):
            calls[(phase[0], "linear")] = calls.get((phase[0], "linear"), 0) + 1

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted_sdpa)
    hook = nn.modules.module.register_module_forward_hook(count_linear)
    try:
        counts = {}
        for recompute in ("none", "selective", "full"):
            m = _copy(models[name], "sdpa", recompute)
            calls.clear()
            phase[0] = "forward"
            loss = _loss(m)
            phase[0] = "backward"
            loss.backward()
            counts[recompute] = dict(calls)
    finally:
        hook.remove()
    linear_forward = counts["none"][("forward", "linear")]
    assert linear_forward >= 4 * layers  # q, k, v, o at least
    for recompute in counts:
        assert counts[recompute][("forward", "core")] == layers, recompute
        assert counts[recompute][("forward", "linear")] == linear_forward, recompute
    assert ("backward", "core") not in counts["none"] and ("backward", "linear") not in counts["none"]
    # selective: each layer's core once more, nothing else
    assert counts["selective"][("backward", "core")] == layers
    assert ("backward", "linear") not in counts["selective"]
    # full: whole layers again (the output head is outside them)
    assert counts["full"][("backward", "core")] == layers
    assert counts["full"][("backward", "linear")] >= 4 * layers


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", list(MODELS))
def test_selective_keeps_less_than_none_and_more_than_full(models, name, attention):
    heads = models[name].config.num_attention_heads
    kept = {r: _saved(_copy(models[name], attention, r))[1].values() for r in ("none", "selective", "full")}
    nbytes = {r: _nbytes(tensors) for r, tensors in kept.items()}
    assert nbytes["none"] > nbytes["selective"] > nbytes["full"], nbytes
    scores = {r: [t for t in tensors if _per_head_scores(t, heads)] for r, tensors in kept.items()}
    rest = {r: [t for t in tensors if not _per_head_scores(t, heads)] for r, tensors in kept.items()}
    # the planner's formula: selective drops the attention core's s^2 terms, and only those
    if attention == "eager" or name == "encoder":  # sdpa's CPU flash kernel keeps no s^2 tensor to drop
        assert _nbytes(scores["none"]) > 0
    assert scores["selective"] == []
    mask = max((_nbytes([t]) for t in rest["selective"] if tuple(t.shape[-2:]) == (SEQ, SEQ)), default=0)
    assert _nbytes(rest["selective"]) <= _nbytes(rest["none"]) + mask


def test_enable_disable_and_conflicts(models):
    m = _copy(models["dense"], "sdpa", "none")
    enable_selective_recompute(m)
    enable_selective_recompute(m)  # idempotent
    assert m.config._attn_implementation == "selective_recompute_sdpa"
    assert "attn_implementation" not in m.config.to_json_string()  # never written to config.json
    with torch.no_grad():  # inference runs the core once, without checkpointing
        logits = m(input_ids=_inputs()["input_ids"]).logits
    disable_selective_recompute(m)
    assert m.config._attn_implementation == "sdpa"
    with torch.no_grad():
        torch.testing.assert_close(m(input_ids=_inputs()["input_ids"]).logits, logits, rtol=0, atol=0)
    full = _copy(models["dense"], "sdpa", "full")
    with pytest.raises(ValueError, match="already recomputes whole layers"):
        enable_selective_recompute(full)
    with pytest.raises(ValueError, match="recompute must be one of none, selective, full"):
        apply_recompute(m, "attention")


def test_recipe_accepts_selective_and_finetuning_refuses_it():
    from ernie_zoo.training.recipe import DistributedArgs

    for backend, extra in (("deepspeed", {}), ("pipeline", {"pp_size": 2})):
        DistributedArgs(backend=backend, recompute="selective", **extra).validate()
    with pytest.raises(ValueError, match="distributed.recompute"):
        DistributedArgs(backend="deepspeed", recompute="attention").validate()
    with pytest.raises(ValueError, match="distributed.recompute"):
        DistributedArgs(backend="single", recompute="selective").validate()

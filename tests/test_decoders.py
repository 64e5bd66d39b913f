"""ERNIE 4.5 decoders: transformers' dense and MoE causal LMs in the registry, presets with exact counts checked
against a closed-form formula, CPU training steps and save/load through plain AutoModelForCausalLM."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    Ernie4_5_MoeConfig,
    Ernie4_5_MoeForCausalLM,
    Ernie4_5Config,
    Ernie4_5ForCausalLM,
)

from ernie_zoo.models.decoder import build_decoder
from ernie_zoo.models.presets import DECODER_PRESETS, count_parameters, parameter_counts, preset_config
from ernie_zoo.models.registry import model_class_for


def formula(c) -> dict[str, int]:
    """Parameters by hand from the config, independent of any module: embeddings (+ untied lm_head), per layer GQA
    attention (q, k, v, o; no biases) + two RMSNorm weights + a SwiGLU MLP (3 matrices), or in an MoE layer a router
    (E x h weight + E correction biases), E routed and S shared experts of width I; the final RMSNorm."""
    h, layers, d = c.hidden_size, c.num_hidden_layers, c.head_dim if hasattr(c, "head_dim") else None
    d = d or h // c.num_attention_heads
    q, kv = c.num_attention_heads * d, c.num_key_value_heads * d
    attention = h * q + 2 * h * kv + q * h + 2 * h
    embeddings = c.vocab_size * h * (1 if c.tie_word_embeddings else 2)
    total = active = embeddings + layers * attention + h
    for i in range(layers):
        moe = isinstance(c, Ernie4_5_MoeConfig) and (
            (i + 1) % c.moe_layer_interval == 0 and c.moe_layer_start_index <= i <= c.moe_layer_end_index
        )
        if not moe:
            total, active = total + 3 * h * c.intermediate_size, active + 3 * h * c.intermediate_size
            continue
        expert, n, k = 3 * h * c.moe_intermediate_size, c.moe_num_experts, c.moe_k
        always = n * h + n + c.moe_num_shared_experts * expert  # router, correction bias, shared experts
        total += always + n * expert
        active += always + k * expert
    return {"total": total, "active": active}


def test_real_presets_are_transformers_defaults():
    """0.3B and 21B-A3B written out in the presets equal transformers' default configs (the published ones)."""
    assert preset_config("ernie4.5-0.3b").to_dict() == Ernie4_5Config().to_dict()
    assert preset_config("ernie4.5-21b-a3b").to_dict() == Ernie4_5_MoeConfig().to_dict()
    assert type(preset_config("ernie4.5-300b-a47b")) is Ernie4_5_MoeConfig
    assert type(preset_config("ernie4.5-100b")) is Ernie4_5Config


@pytest.mark.parametrize("name", list(DECODER_PRESETS))
def test_every_decoder_preset_counts_exactly_on_meta(name):
    cfg = preset_config(name)
    counts = parameter_counts(cfg)
    assert {k: counts[k] for k in ("total", "active")} == formula(cfg)
    assert count_parameters(cfg) == counts["total"]
    assert counts["active"] < counts["total"] if counts["moe_layers"] else counts["active"] == counts["total"]


def test_published_sizes_match_their_names():
    """The names' sizes follow from the shapes: 0.36B with embeddings; 21.8B total, 3.4B active; 300B-A47B: 299.5B
    total and 47B active once the input embedding (a lookup, no compute) is left out, as the name counts it."""
    small = parameter_counts(preset_config("ernie4.5-0.3b"))["total"]
    assert round(small / 1e9, 2) == 0.36
    c21 = parameter_counts(preset_config("ernie4.5-21b-a3b"))
    assert int(c21["total"] / 1e9) == 21 and int(c21["active"] / 1e9) == 3 and c21["moe_layers"] == 27
    cfg = preset_config("ernie4.5-300b-a47b")
    c300 = parameter_counts(cfg)
    assert abs(c300["total"] / 1e9 - 300) < 1 and c300["moe_layers"] == 51
    assert int((c300["active"] - cfg.vocab_size * cfg.hidden_size) / 1e9) == 47
    assert 95e9 < parameter_counts(preset_config("ernie4.5-100b"))["total"] < 105e9
    zoo = parameter_counts(preset_config("ernie4.5-zoo"))["total"]
    assert 5e6 < zoo < 10e6 and zoo * 2 <= 25e6  # ships <= 25 MB in fp16


def test_registry_names_the_decoders():
    assert model_class_for({"architectures": ["Ernie4_5ForCausalLM"]}) is Ernie4_5ForCausalLM
    assert model_class_for({"architectures": ["Ernie4_5_MoeForCausalLM"]}, "text-generation") is (
        Ernie4_5_MoeForCausalLM
    )
    # the encoder's causal LM stays the task's default (what AutoModelForCausalLM builds for an ErnieZooConfig)
    assert model_class_for({}, pipeline_tag="text-generation").__name__ == "ErnieZooForCausalLM"
    with pytest.raises(ValueError, match="unknown preset"):
        preset_config("ernie4.5-7b")


@pytest.mark.parametrize("name", ["ernie4.5-tiny", "ernie4.5-moe-tiny"])
def test_tiny_decoder_trains_and_round_trips_through_auto(name, tmp_path):
    torch.manual_seed(0)
    model = build_decoder(preset_config(name))
    ids = torch.randint(3, model.config.vocab_size, (2, 12))
    out = model(input_ids=ids, labels=ids)
    assert torch.isfinite(out.loss) and out.logits.shape == (2, 12, model.config.vocab_size)
    out.loss.backward()
    trained = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(g is not None and torch.isfinite(g).all() for g in trained.values())
    assert (
        sum(int(g.abs().sum() > 0) for g in trained.values()) >= len(trained) - 1
    )  # unrouted experts may be 0
    # one SGD step lowers the loss on the same batch
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.5 * p.grad
    assert model(input_ids=ids, labels=ids).loss < out.loss

    model.eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not list(tmp_path.glob("*.bin"))
    saved = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert model_class_for(saved) is type(model)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)  # plain transformers, no trust_remote_code
    assert type(loaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_hub_format_directory_loads_unchanged(tmp_path):
    """A directory laid out as baidu/ERNIE-4.5-0.3B-PT (its config.json keys, legacy `rope_theta`, bf16 dtype;
    shrunk to tiny sizes) with safetensors weights loads through AutoModelForCausalLM into the registered class."""
    from safetensors.torch import save_file

    hub = {
        "architectures": ["Ernie4_5ForCausalLM"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 128,
        "max_position_embeddings": 131072,
        "model_type": "ernie4_5",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "use_cache": False,
        "vocab_size": 1000,
        "rope_theta": 500000,
        "use_bias": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(hub), encoding="utf-8")
    torch.manual_seed(1)
    source = build_decoder(preset_config("ernie4.5-tiny"))
    weights = {k: v.contiguous() for k, v in source.state_dict().items() if k != "lm_head.weight"}  # tied
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert type(loaded) is model_class_for(hub) is Ernie4_5ForCausalLM
    assert loaded.config.rope_parameters["rope_theta"] == 500000
    ids = torch.randint(3, 1000, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, source.eval()(input_ids=ids).logits)


def test_info_lists_decoders_with_total_and_active(capsys):
    from ernie_zoo.commands.info import Args, run

    assert run(Args(preset=["ernie4.5-moe-tiny", "tiny"]), []) == 0
    out = capsys.readouterr().out
    counts = parameter_counts(preset_config("ernie4.5-moe-tiny"))
    row = next(line for line in out.splitlines() if line.startswith("ernie4.5-moe-tiny"))
    assert row.split()[-2:] == [f"{counts['total']:,}", f"{counts['active']:,}"] and "4x32 top-2 +1" in row
    assert "active/token" in out and out.splitlines()[0].startswith("preset")
    assert run(Args(preset=["ernie4.5-7b"]), []) == 2
    assert "unknown preset(s) ['ernie4.5-7b']" in capsys.readouterr().err


def test_router_load_sums_add_up_to_transformers_load_balancing_loss():
    """The pipeline carries the router loss as per-layer sums (`router_load_sums`): added over every MoE layer,
    `load_balancing_loss` of them is transformers' `aux_loss` of the whole model, and the gradient reaches every
    layer's router the same way; one layer's sums alone give another number (the loss pools the layers)."""
    from ernie_zoo.models.decoder import (
        build_decoder,
        decoder_config,
        load_balancing_loss,
        moe_blocks,
        router_load_sums,
    )

    torch.manual_seed(0)
    config = decoder_config(True, vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=8, intermediate_size=64, moe_num_experts=4, moe_k=2,
                            moe_intermediate_size=16, moe_layer_start_index=0)  # fmt: skip
    model = build_decoder(config)
    logits = []
    for block in moe_blocks(model):
        block.gate.register_forward_hook(lambda module, args, out: logits.append(out[0]))
    ids = torch.randint(5, 300, (3, 12))
    out = model(input_ids=ids, output_router_logits=True)
    assert len(logits) == 2
    per_layer = [router_load_sums(x, config.moe_k) for x in logits]
    ours = load_balancing_loss(per_layer[0] + per_layer[1])
    assert torch.allclose(ours, out.aux_loss, rtol=1e-6, atol=0)
    assert not torch.allclose(load_balancing_loss(per_layer[1]), out.aux_loss, rtol=1e-3, atol=0)
    gates = [b.gate.weight for b in moe_blocks(model)]
    want = torch.autograd.grad(out.aux_loss, gates, retain_graph=True)
    got = torch.autograd.grad(ours, gates)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-9) and a.abs().max() > 0 for a, b in zip(got, want))

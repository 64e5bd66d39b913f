"""Seeded initialisation (`models.seeded_init`): every weight drawn from the seed and its name, so a part of a
model built alone on the meta device (a pipeline stage) gets the whole model's values there without anything else
being allocated."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ernie_zoo import ErnieZooConfig, ErnieZooForMaskedLM
from ernie_zoo.models.decoder import build_decoder, decoder_config
from ernie_zoo.models.seeded_init import materialize, name_seed, seeded_draws
from ernie_zoo.parallel.pipeline import DECODER_SPLIT, ENCODER_SPLIT, prune_to_stages

VOCAB = 120


def _encoder_config() -> ErnieZooConfig:
    return ErnieZooConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        feature_fusion="concat",
    )


def _decoder_config(moe: bool = False):
    extra = {"moe_intermediate_size": 32} if moe else {}
    return decoder_config(moe, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=6, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=8, intermediate_size=64, tie_word_embeddings=True,
                          **extra)  # fmt: skip


def _encoder_meta() -> nn.Module:
    with torch.device("meta"):
        return ErnieZooForMaskedLM(_encoder_config())


def _decoder_meta(moe: bool = False) -> nn.Module:
    return build_decoder(_decoder_config(moe), device="meta")


KINDS = {"encoder": (_encoder_meta, ENCODER_SPLIT), "decoder": (_decoder_meta, DECODER_SPLIT)}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_stage_built_alone_has_the_whole_models_values(kind):
    build, split = KINDS[kind]
    whole = build()
    materialize(whole, seed=11)
    reference = whole.state_dict()
    for num_stages in (2, 3):
        seen: set[str] = set()
        for stage in range(num_stages):
            part = build()
            prune_to_stages(part, split, [stage], num_stages)
            allocated = materialize(part, seed=11)
            state = part.state_dict()
            assert not any(t.is_meta for t in state.values())
            different = [k for k in state if not torch.equal(state[k], reference[k])]
            assert different == [], (num_stages, stage, different)
            seen |= set(state)
            assert len(allocated) < len(reference)  # the other stages' layers were never allocated
        assert seen == set(reference)  # the stages together hold the whole model
    # the tied word embeddings: the output layer is the same tensor, its padding row zero on every stage
    emb = whole.get_input_embeddings().weight
    assert whole.get_output_embeddings().weight is emb
    assert emb[0].abs().max().item() == 0.0


def test_the_values_depend_on_the_seed_and_are_initialised_as_transformers_does():
    a, b, c = _encoder_meta(), _encoder_meta(), _encoder_meta()
    materialize(a, 1), materialize(b, 1), materialize(c, 2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    q = "ernie.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(sa[q], sc[q])
    std = a.config.initializer_range
    assert sa[q].std().item() == pytest.approx(std, rel=0.1)  # transformers' N(0, initializer_range)
    assert sa["ernie.encoder.layer.0.attention.self.query.bias"].abs().max().item() == 0.0
    assert torch.equal(sa["ernie.encoder.layer.0.output.LayerNorm.weight"], torch.ones(32))
    assert torch.equal(a.ernie.embeddings.position_ids[0], torch.arange(64))  # non-persistent buffers too
    # two layers of the same shape get different values (the name, not only the shape, seeds a draw)
    assert not torch.equal(sa[q], sa[q.replace("layer.0", "layer.1")])
    assert name_seed(1, q) != name_seed(1, q.replace("layer.0", "layer.1"))


def test_moe_experts_and_rotary_buffers_are_initialised():
    model = _decoder_meta(moe=True)
    names = materialize(model, seed=3)
    assert any("experts.gate_up_proj" in n for n in names)
    reference = build_decoder(_decoder_config(moe=True))  # transformers' own build, on the default device
    assert torch.equal(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    experts = dict(model.named_parameters())["model.layers.1.mlp.experts.down_proj"]
    assert experts.std().item() == pytest.approx(model.config.initializer_range, rel=0.1)


def test_tensors_already_allocated_keep_their_values():
    model = _encoder_meta()
    table = model.ernie.embeddings.char_features
    name = next(n for n, _ in table.named_buffers(recurse=False))
    table._buffers[name] = torch.arange(VOCAB)  # a character table loaded before the weights
    materialize(model, seed=0)
    assert torch.equal(getattr(table, name), torch.arange(VOCAB))
    # the module holding the kept tables is still initialised: its concat fusion starts as [I | 0]
    fusion = table.fusion.weight
    assert torch.equal(fusion[:, :32], torch.eye(32)) and fusion[:, 32:].abs().max().item() == 0.0


class _Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(4))  # a parameter no _init_weights rule fills


def test_a_tensor_the_initialisation_leaves_unfilled_is_an_error_naming_it():
    model = _encoder_meta()
    with torch.device("meta"):
        model.ernie.extra = _Custom()
    with pytest.raises(ValueError, match=r"ernie\.extra\.scale"):
        materialize(model, seed=0)


def test_a_random_fill_of_a_foreign_tensor_is_refused():
    model = _encoder_meta()
    materialize(model, seed=0)
    with seeded_draws(model, 0), pytest.raises(RuntimeError, match="not one of the model's parameters"):
        torch.nn.init.normal_(torch.empty(3))


def test_a_weight_is_the_cpu_draw_seeded_by_its_name():
    """A weight's values are torch's CPU `normal_` seeded by `name_seed(seed, name)`, whatever the device the
    weight lives on (the draw is made in a CPU tensor and copied), so a GPU build has a CPU build's values."""
    model = _encoder_meta()
    materialize(model, seed=5)
    weight = model.ernie.encoder.layer[0].attention.self.query.weight
    name = "ernie.encoder.layer.0.attention.self.query.weight"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(name_seed(5, name))
        expected = torch.empty(weight.shape).normal_(0.0, model.config.initializer_range)
    assert torch.equal(weight.detach(), expected)

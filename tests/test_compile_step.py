"""`torch_compile: true` in a pretraining recipe: every encoder layer under torch.compile (dynamic shapes) trains to
the eager run's numbers, and one compiled graph serves every layer and sequence length.

Tolerance: losses to 1e-5 relative and weights to 1e-4 absolute after 4 AdamW steps of lr 1e-2 (0.25% of the 4e-2
a weight can move; Inductor fuses and reorders the fp32 arithmetic, which AdamW's normalised update amplifies
for near-zero gradients: measured 1.4e-5). Step time is measured in
bench/compile_step.py, never asserted here. The model, batches and recipe are the DeepSpeed tests' (no dropout).
"""

from __future__ import annotations

import pytest
import torch
from test_parallel_deepspeed import _global_batch, _model, _recipe


def _train(compile: bool, sparse: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
    from ernie_zoo.training.backends import engine_for_recipe

    recipe = _recipe(4, 1)
    recipe.torch_compile, recipe.sparse_last_layer, recipe.max_steps = compile, sparse, 4
    engine = engine_for_recipe(recipe, _model(), torch.device("cpu"))
    losses = []
    for step, length in enumerate([16, 12, 16, 9]):  # new lengths after the first compile
        loss, _, _ = engine.forward({k: v[:, :length] for k, v in _global_batch(step).items()})
        engine.backward(loss)
        engine.step()
        engine.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in engine.model.state_dict().items()}


@pytest.mark.slow
def test_compiled_layers_train_like_eager_without_recompiling():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    graphs = []
    for sparse in (True, False):  # the sparse last layer calls the layers itself, the dense path the encoder
        eager_losses, eager_weights = _train(False, sparse)
        compiled_losses, compiled_weights = _train(True, sparse)
        assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
        assert max((compiled_weights[k] - eager_weights[k]).abs().max().item() for k in eager_weights) < 1e-4
        assert max(abs(a - b) for a, b in zip(eager_losses, eager_losses[1:])) > 1e-3  # training moved
        graphs.append(counters["stats"]["unique_graphs"])
    # dynamic shapes: one graph per calling convention (2 layers x 3 sequence lengths x 4 steps each), none per
    # layer or per new length
    assert graphs == [1, 2]
    assert counters["stats"]["calls_captured"] >= 2 * 4


def test_compile_is_refused_under_deepspeed():
    from ernie_zoo.training.recipe import DistributedArgs, PretrainRecipe

    recipe = PretrainRecipe(torch_compile=True, distributed=DistributedArgs(backend="deepspeed"))
    with pytest.raises(ValueError, match="'torch_compile' = True: needs distributed.backend single"):
        recipe.validate()


def _train_decoder(compile: bool) -> tuple[list[float], dict[str, torch.Tensor], torch.nn.Module]:
    """3 steps of the ERNIE 4.5 tiny decoder (transformers' Ernie4_5ForCausalLM) on packed random rows."""
    from ernie_zoo.models.decoder import decoder_config
    from ernie_zoo.models.presets import DECODER_PRESETS
    from ernie_zoo.training.backends import engine_for_recipe
    from ernie_zoo.training.causal_lm import build_decoder_model

    config = decoder_config(**{**DECODER_PRESETS["ernie4.5-tiny"], "vocab_size": 96})
    recipe = _recipe(4, 1)
    recipe.torch_compile, recipe.max_steps = compile, 3
    model = build_decoder_model(config, seed=0)
    engine = engine_for_recipe(recipe, model, torch.device("cpu"))
    losses = []
    for step, length in enumerate([16, 12, 9]):  # a new length after the first compile
        g = torch.Generator().manual_seed(step)
        ids = torch.randint(5, 96, (4, length), generator=g)
        pos = torch.arange(length).repeat(4, 1)
        pos[:, length // 2 :] -= length // 2  # two packed pieces per row
        batch = {"input_ids": ids, "position_ids": pos, "labels": ids.masked_fill(pos == 0, -100)}
        loss, _, _ = engine.forward({**batch, "attention_mask": torch.ones_like(ids)})
        engine.backward(loss)
        engine.step()
        engine.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in engine.model.state_dict().items()}, engine.model


@pytest.mark.slow
def test_compiled_decoder_layers_train_like_eager():
    """`torch_compile: true` on a decoder recipe (issue #50: "'Ernie4_5ForCausalLM' object has no attribute
    'ernie'"): the decoder's layers (`model.layers`) are compiled and train to the eager run's numbers."""
    torch._dynamo.reset()
    eager_losses, eager_weights, _ = _train_decoder(False)
    compiled_losses, compiled_weights, model = _train_decoder(True)
    assert type(model).__name__ == "Ernie4_5ForCausalLM"
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
    assert max((compiled_weights[k] - eager_weights[k]).abs().max().item() for k in eager_weights) < 1e-4
    assert max(abs(a - b) for a, b in zip(eager_losses, eager_losses[1:])) > 1e-3  # training moved

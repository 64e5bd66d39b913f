"""`compile: true` in a pretraining recipe: every encoder layer under torch.compile (dynamic shapes) trains to
the eager run's numbers, and one compiled graph serves every layer and sequence length.

Tolerance: losses to 1e-5 relative and weights to 1e-5 absolute after 4 AdamW steps of lr 1e-2 (Inductor fuses
and reorders the fp32 arithmetic: measured ~2e-7 relative on the losses). Step time is measured in
bench/compile_step.py, never asserted here."""

from __future__ import annotations

import pytest
import torch

from ernie_zoo import ErnieZooConfig

VOCAB, SEQ = 300, 16


def _model():
    from ernie_zoo.training.engine import build_model

    config = ErnieZooConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    g = torch.Generator().manual_seed(1)
    tables = {
        "default_pinyin_ids": torch.randint(0, config.pinyin_vocab_size, (VOCAB,), generator=g),
        "radical_ids": torch.randint(0, 215, (VOCAB,), generator=g),
        "stroke_counts": torch.randint(0, 30, (VOCAB,), generator=g),
        "stroke_seqs": torch.randint(0, 6, (VOCAB, 32), generator=g),
    }
    return build_model(config, tables, seed=0)


def _batch(step: int, length: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(5, VOCAB, (4, length), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 1::4] = ids[:, 1::4]
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "pinyin_ids": torch.randint(0, 400, (4, length), generator=g),
        "labels": labels,
    }


def _train(compile: bool, sparse: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
    from ernie_zoo.training.engine import SingleDeviceEngine
    from ernie_zoo.training.recipe import OptimArgs, PretrainRecipe

    recipe = PretrainRecipe(
        torch_compile=compile,
        sparse_last_layer=sparse,
        max_steps=4,
        micro_batch_size=4,
        precision="fp32",
        optim=OptimArgs(lr=1e-2, warmup_steps=1, grad_clip=1.0),
    )
    engine = SingleDeviceEngine(recipe, _model(), torch.device("cpu"))
    losses = []
    for step, length in enumerate([SEQ, 12, SEQ, 9]):  # new lengths after the first compile
        loss, _, _ = engine.loss(_batch(step, length))
        engine.backward(loss)
        engine.step()
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
        assert max((compiled_weights[k] - eager_weights[k]).abs().max().item() for k in eager_weights) < 1e-5
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

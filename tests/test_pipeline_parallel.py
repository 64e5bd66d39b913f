"""Pipeline parallelism (`distributed.backend: pipeline`): real gloo ranks on CPU against one process.

The reference is the single-device engine (`PlainEngine`) on the whole global batch of every step; each layout
trains the same 4-layer encoder on the same batches for 3 steps (sequence lengths change between steps and rows
carry padding, so stages are rebuilt for new shapes and the padding mask travels with the activations):

- PP 2 (2 ranks), 1F1B and interleaved 1F1B (2 virtual stages per rank, one layer each), grad accumulation 2;
- PP 2 under the zero-bubble schedules (each backward split into input and weight gradients): zero_bubble at one
  stage per rank (ZB-H1) and zbv (2 stages per rank in a V: rank 0 holds the first and the last), grad accumulation 2;
- PP 2 x TP 2 (4 ranks, each stage's TP plan layers DTensor-sharded), activation recompute on, under the
  zero-bubble schedule (ZB-H1: the planner's choice for 100B is TP x zero-bubble PP with recompute);
- PP 2 x DP 2 (4 ranks, gradients averaged over the two pipelines), selective recompute (the attention core).

The same for an ERNIE 4.5 dense decoder (transformers' Ernie4_5ForCausalLM, tied embeddings, GQA, RoPE) on packed
rows of two documents each (position ids restart inside every row, so each stage must rebuild the per-document
causal mask and the rotary embeddings from the positions that travel with the activations): PP 2 (1F1B, grad
accumulation 2), PP 2 under interleaved zero bubble (2 stages per rank), PP 2 x TP 2 (transformers' TP plan) with
selective recompute under zbv (2 stages per rank in a V) and PP 2 x DP 2 with ZeRO-1 and full recompute; clipping at
0.5.

Every run also records the stage actions each rank ran in its first pipeline step (forward, full backward, or the
zero-bubble schedules' input- and weight-gradient halves) and computes that step's idle fraction from them
(`parallel.pipeline.idle_fraction`: the timeline at the zero-bubble paper's equal costs, not a clock), which must be
the bubble the planner plans the schedule with (`planner.pipeline_bubble`).

The reference builds the model whole; every pipeline rank gets it on the meta device and allocates only its
stages (`models.seeded_init`: each weight drawn from the seed and its name), as `ernie-pretrain` runs a pipeline.

Every run: the same per-step losses and grad norms (clipping at 1.0 active), the same LR, final weights joined
from the stage shards equal to the reference's; each rank holds only its stage's layers (and TP halves); the
checkpoint the engine writes is a from_pretrained directory `AutoModelForMaskedLM` loads; a checkpoint written
before the last step, loaded into a fresh engine, reproduces the last step bit for bit; the forward-only path
(evaluation) gives the reference's loss of the trained model.

Tolerances (fp32): losses and grad norms 1e-5 relative (chunked sums and collectives add in another order than
one process); weights after 3 AdamW steps of lr 1e-2: 5e-5 absolute (a weight moves up to 3e-2). Measured maxima
are printed by the tests (`-s`) and recorded in docs/scale.md. The worker is this file run under torchrun.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from ernie_zoo.parallel.distributed import finish_distributed

REPO = Path(__file__).resolve().parents[1]
STEPS, GLOBAL_BATCH, VOCAB, LAYERS = 3, 8, 300, 4
SEQS = (16, 12, 16)  # per step: a new shape at step 2, the first one again at step 3
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 5e-5
#: bf16 (autocast): the first step runs on the same weights (loss equal to 1e-7, grad norm to 8.4e-5 relative:
#: bf16 matmuls round differently on a pipeline micro batch's rows than on the whole batch); AdamW at lr 1e-2 then
#: turns tiny gradients of opposite rounding into updates of opposite sign (a weight can differ by 2 x lr per step),
#: so later steps are compared loosely: losses 2e-3 relative (measured 2.7e-4), grad norms 5e-2 (3.4e-2), weights
#: 0.05 absolute at most (0.020) and 1e-3 on average (measured 9.4e-5 encoder, 2.6e-4 decoder).
BF16_LOSS_RTOL, BF16_NORM_RTOL, BF16_WEIGHT_ATOL = 2e-3, 5e-2, 5e-2

#: layout name -> (ranks, distributed keys, micro batch, grad accumulation)
LAYOUTS = {
    "pp2": (2, {"pp_size": 2}, 4, 2),
    "pp2-interleaved": (2, {"pp_size": 2, "pp_schedule": "interleaved", "pp_microbatches": 2}, 4, 2),
    "pp2-zero-bubble": (2, {"pp_size": 2, "pp_schedule": "zero_bubble", "pp_virtual_stages": 1,
                            "pp_microbatches": 4}, 4, 2),  # fmt: skip
    "pp2-zbv": (2, {"pp_size": 2, "pp_schedule": "zbv", "pp_microbatches": 4}, 4, 2),
    "decoder-pp2-zero-bubble": (2, {"pp_size": 2, "pp_schedule": "zero_bubble", "pp_microbatches": 2}, 4, 2),
    "pp2-tp2": (4, {"pp_size": 2, "tp_size": 2, "pp_microbatches": 4, "recompute": "full",
                    "pp_schedule": "zero_bubble", "pp_virtual_stages": 1}, 8, 1),  # fmt: skip
    "pp2-dp2": (4, {"pp_size": 2, "pp_microbatches": 2, "recompute": "selective"}, 2, 2),
    "pp2-dp2-zero1": (4, {"pp_size": 2, "pp_microbatches": 2, "zero_stage": 1}, 2, 2),
    "decoder-pp2": (2, {"pp_size": 2}, 4, 2),
    "pp2-bf16": (2, {"pp_size": 2}, 4, 2),
    "decoder-pp2-bf16": (2, {"pp_size": 2}, 4, 2),
    "decoder-pp2-tp2": (4, {"pp_size": 2, "tp_size": 2, "pp_microbatches": 4, "recompute": "selective",
                            "pp_schedule": "zbv"}, 8, 1),  # fmt: skip
    "decoder-pp2-dp2-zero1": (4, {"pp_size": 2, "pp_microbatches": 2, "zero_stage": 1, "recompute": "full"}, 2, 2),
}


def _recipe(micro_batch_size: int, grad_accum_steps: int, clip: float = 1.0, precision: str = "fp32", **distributed):
    from ernie_zoo.training.recipe import DistributedArgs, OptimArgs, PretrainRecipe

    backend = "pipeline" if distributed else "single"
    return PretrainRecipe(
        sparse_last_layer=False,
        max_steps=STEPS,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        precision=precision,
        seed=0,
        optim=OptimArgs(lr=1e-2, warmup_steps=1, decay="linear", grad_clip=clip, weight_decay=0.01),
        distributed=DistributedArgs(backend=backend, **distributed),
    )


def _model(meta: bool = False):
    """The 4-layer encoder, built whole; `meta`: on the meta device, as `ernie-pretrain` hands it to the pipeline
    engine (which allocates only its stages)."""
    from ernie_zoo import ErnieZooConfig
    from ernie_zoo.training.build import build_model

    config = ErnieZooConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        feature_fusion="concat",
    )
    g = torch.Generator().manual_seed(1)
    tables = {
        "default_pinyin_ids": torch.randint(0, config.pinyin_vocab_size, (VOCAB,), generator=g),
        "radical_ids": torch.randint(0, 215, (VOCAB,), generator=g),
        "stroke_counts": torch.randint(0, 30, (VOCAB,), generator=g),
        "stroke_seqs": torch.randint(0, 6, (VOCAB, 32), generator=g),
    }
    return build_model(config, tables, seed=0, meta=meta)


def _decoder(meta: bool = False):
    """A 4-layer ERNIE 4.5 dense decoder (the 0.3B's layout shrunk: tied embeddings, 4 query / 2 key-value heads)."""
    from ernie_zoo.models.decoder import decoder_config
    from ernie_zoo.training.causal_lm import build_decoder_model

    config = decoder_config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=64,
                            tie_word_embeddings=True)  # fmt: skip
    return build_decoder_model(config, seed=0, meta=meta)


def _decoder_batch(step: int) -> dict[str, torch.Tensor]:
    """The step's 8 packed rows, each two document pieces (the second starting at a row-dependent position); the
    first token of each piece has no target, so every row predicts seq - 2 tokens (a mean over any split of the
    rows weighs tokens as the mean over all of them)."""
    g = torch.Generator().manual_seed(2000 + step)
    seq = SEQS[step]
    ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, seq), generator=g)
    positions = torch.zeros_like(ids)
    labels = ids.clone()
    for row in range(GLOBAL_BATCH):
        cut = 3 + row % (seq - 5)
        positions[row, :cut] = torch.arange(cut)
        positions[row, cut:] = torch.arange(seq - cut)
        labels[row, [0, cut]] = -100
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def _global_batch(step: int) -> dict[str, torch.Tensor]:
    """The step's 8 rows; every row has 3 masked positions (so a mean over any split of the rows weighs tokens
    as the mean over all of them), odd rows end in padding."""
    g = torch.Generator().manual_seed(1000 + step)
    seq = SEQS[step]
    ids = torch.randint(5, VOCAB, (GLOBAL_BATCH, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[1::2, 11:] = 0
    ids[mask == 0] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 1:10:4] = ids[:, 1:10:4]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": torch.zeros_like(ids),
        "pinyin_ids": torch.randint(0, 400, (GLOBAL_BATCH, seq), generator=g),
        "labels": labels,
    }


def _rows(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def _kind(layout: str) -> tuple:
    """(model builder, batch of a step, grad clip: below the first step's norm) of a layout: the decoder's or the
    encoder's."""
    return (_decoder, _decoder_batch, 0.5) if layout.startswith("decoder") else (_model, _global_batch, 1.0)


def _precision(layout: str) -> str:
    return "bf16" if "bf16" in layout else "fp32"


def _reference(layout: str = "pp2") -> dict:
    from ernie_zoo.training.backends import engine_for_recipe

    make_model, batch_of, clip = _kind(layout)
    recipe = _recipe(GLOBAL_BATCH, 1, clip, _precision(layout))
    engine = engine_for_recipe(recipe, make_model(), torch.device("cpu"))
    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        loss, _, _ = engine.forward(batch_of(step))
        engine.backward(loss)
        norms.append(engine.step())
        engine.zero_grad()
        losses.append(loss.item())
        lrs.append(engine.lr)
    params = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    return {"losses": losses, "norms": norms, "lrs": lrs, "params": params, "eval": _eval_loss(engine, batch_of)}


def _eval_loss(engine, batch_of=_global_batch) -> float:
    """The trained model's loss on step 0's batch, forward only (the pipeline: stage after stage, no micro
    batches)."""
    engine.model.eval()
    with torch.no_grad():
        loss, _, _ = engine.forward(batch_of(0))
    engine.model.train()
    return loss.item()


@pytest.fixture(scope="module")
def reference():
    return _reference()


@pytest.fixture(scope="module")
def decoder_reference():
    return _reference("decoder")


@pytest.fixture(scope="module")
def bf16_references():
    return {"pp2-bf16": _reference("pp2-bf16"), "decoder-pp2-bf16": _reference("decoder-pp2-bf16")}


def _run(tmp_path: Path, layout: str) -> list[dict]:
    from ernie_zoo.parallel.distributed import run_local_ranks

    ranks = LAYOUTS[layout][0]
    run_local_ranks([__file__, "--worker", str(tmp_path), layout], nproc=ranks, timeout=900)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]


def _check(
    tmp_path: Path, results: list[dict], reference: dict, layout: str, loss_rtol=LOSS_RTOL, weight_atol=WEIGHT_ATOL
) -> dict:
    """Losses, norms, LR and the joined final weights against the reference; the checkpoint loads in
    transformers; the resumed last step is bit-exact. Returns the measured maxima."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from ernie_zoo.utils import tied_names

    make_model, _, clip = _kind(layout)
    loss_diff = norm_diff = 0.0
    for res in results:
        assert res["losses"] == pytest.approx(reference["losses"], rel=loss_rtol)
        assert res["norms"] == pytest.approx(reference["norms"], rel=loss_rtol)
        assert res["norms"][0] > clip  # clipping was active, on the norm over every stage
        assert res["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
        loss_diff = max(loss_diff, *(abs(a - b) for a, b in zip(res["losses"], reference["losses"])))
        norm_diff = max(norm_diff, *(abs(a - b) / b for a, b in zip(res["norms"], reference["norms"])))
        assert res["resumed_max_diff"] == 0.0  # the resumed last step: bit for bit
        assert res["eval"] == pytest.approx(reference["eval"], rel=loss_rtol)
        # distributed.recompute selective: the engine set the model's attention core to recompute itself
        selective = LAYOUTS[layout][1].get("recompute") == "selective"
        assert res["attention"].startswith("selective_recompute_") == selective, res["attention"]
    ckpt = tmp_path / "final"
    final = load_file(str(ckpt / "model.safetensors"))
    ref = reference["params"]
    tied = tied_names(make_model())  # the MLM decoder's weight and bias / lm_head, stored once (as save_pretrained)
    assert tied and set(final) == set(ref) - tied
    weight_diff = max((final[k] - ref[k]).abs().max().item() for k in final)
    assert weight_diff < weight_atol, weight_diff
    moved = max((ref[k] - make_model().state_dict()[k]).abs().max().item() for k in final)
    assert moved > 1e-3  # training moved the weights, so agreeing with the reference means something
    # the checkpoint is a from_pretrained directory: transformers' Auto class loads the reference's weights
    decoder = layout.startswith("decoder")
    model = (AutoModelForCausalLM if decoder else AutoModelForMaskedLM).from_pretrained(str(ckpt), dtype=torch.float32)
    loaded = model.state_dict()
    assert max((loaded[k] - ref[k]).abs().max().item() for k in ref) < weight_atol
    head, embedding = (
        ("lm_head.weight", "model.embed_tokens.weight")
        if decoder
        else ("cls.predictions.decoder.weight", "ernie.embeddings.word_embeddings.weight")
    )
    assert loaded[head].data_ptr() == loaded[embedding].data_ptr()
    measured = {"layout": layout, "loss_abs": loss_diff, "norm_rel": norm_diff, "weight_abs": weight_diff,
                "idle": _check_idle(results, layout)}  # fmt: skip
    print(measured)
    return measured


def _check_idle(results: list[dict], layout: str) -> float:
    """The idle fraction of the first pipeline step, from the actions each pipeline rank ran, is the schedule's
    planned bubble; a zero-bubble schedule ran split backwards (I then W), the others whole ones (B)."""
    from ernie_zoo.parallel.pipeline import idle_fraction
    from ernie_zoo.parallel.planner import pipeline_bubble

    one = [r for r in results if r["dp_rank"] == 0 and r["tp_rank"] == 0]  # one pipeline
    actions = {r["pp_rank"]: [tuple(a) for a in r["actions"]] for r in one}
    info = one[0]["pipeline"]
    measured = idle_fraction(actions, info["num_stages"])
    planned = {"interleaved": "1f1b"}.get(info["schedule"], info["schedule"])
    expected = pipeline_bubble(len(one), info["n_microbatches"], info["virtual"], planned)
    assert measured == pytest.approx(expected, rel=1e-9), (layout, measured, expected)
    kinds = {a[1] for acts in actions.values() for a in acts}
    assert kinds == ({"F", "I", "W"} if info["schedule"] in ("zero_bubble", "zbv") else {"F", "B"}), kinds
    assert sorted(actions) == list(range(len(one)))
    return measured


def _held_layers(res: dict) -> set[int]:
    return {int(n.split(".")[3]) for n in res["shapes"] if n.startswith("ernie.encoder.layer.")} | {
        int(n.split(".")[2]) for n in res["shapes"] if n.startswith("model.layers.")
    }


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_matches_one_process(tmp_path, reference):
    """PP 2 on 2 ranks, 1F1B then interleaved 1F1B: each rank holds half the layers, the embeddings sit on
    the first stage only, the MLM head on the last (with its tied word-embedding copy)."""
    results = _run(tmp_path, "pp2")
    _check(tmp_path, results, reference, "pp2")
    first, last = results
    assert _held_layers(first) == {0, 1} and _held_layers(last) == {2, 3}
    assert any(n.startswith("ernie.embeddings.char_features") for n in first["shapes"])
    assert not any(n.startswith("ernie.embeddings.char_features") for n in last["shapes"])
    assert not any(n.startswith("cls.") for n in first["shapes"])
    assert "cls.predictions.transform.dense.weight" in last["shapes"]
    assert "ernie.embeddings.word_embeddings.weight" in last["shapes"]  # the tied copy, kept in sync
    assert first["tied_copies_equal"] and last["tied_copies_equal"]

    results = _run(tmp_path / "interleaved", "pp2-interleaved")
    _check(tmp_path / "interleaved", results, reference, "pp2-interleaved")
    assert [_held_layers(r) for r in results] == [{0, 2}, {1, 3}]  # stages 0, 2 on rank 0; 1, 3 on rank 1


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_tp2_matches_one_process(tmp_path, reference):
    """PP 2 x TP 2 on 4 ranks (recompute on, the zero-bubble schedule): every rank holds its stage's layers, and TP
    halves of their planned Linear layers."""
    results = _run(tmp_path, "pp2-tp2")
    _check(tmp_path, results, reference, "pp2-tp2")
    ref = reference["params"]
    q = "ernie.encoder.layer.{}.attention.self.query.weight"
    for res in results:
        layers = _held_layers(res)
        assert layers == ({0, 1} if res["pp_rank"] == 0 else {2, 3})
        i = min(layers)
        assert res["shapes"][q.format(i)] == [16, 32]  # colwise: half the output rows
        assert res["shapes"][f"ernie.encoder.layer.{i}.output.dense.weight"] == [32, 32]  # rowwise: 64 -> 32
        # the MLM head and the embeddings stay whole (replicated over the TP pair)
        assert res["shapes"][q.format(i)] != list(ref[q.format(i)].shape)
        if res["pp_rank"] == 1:
            assert res["shapes"]["cls.predictions.transform.dense.weight"] == [32, 32]
        assert res["shapes"]["ernie.embeddings.word_embeddings.weight"] == [VOCAB, 32]


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_dp2_matches_one_process(tmp_path, reference):
    """PP 2 x DP 2 on 4 ranks: two pipelines on disjoint halves of each batch, gradients averaged; selective
    recompute (each layer's attention core run again in backward)."""
    results = _run(tmp_path, "pp2-dp2")
    _check(tmp_path, results, reference, "pp2-dp2")
    assert sorted((r["dp_rank"], r["pp_rank"]) for r in results) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for res in results:
        assert _held_layers(res) == ({0, 1} if res["pp_rank"] == 0 else {2, 3})
        assert res["optimizer_numel"] == 2 * res["param_numel"]  # replicated: Adam's m and v of every parameter


@pytest.mark.distributed
@pytest.mark.slow
def test_pp2_dp2_zero1_matches_one_process_and_shards_the_optimizer(tmp_path, reference):
    """PP 2 x DP 2 with ZeRO-1 (distributed.zero_stage 1): the same losses and weights as one process and a
    bit-exact resume, with each stage's AdamW state split between its two data-parallel ranks (each holds Adam's
    m and v for its share only, the shares cover the stage once)."""
    results = _run(tmp_path, "pp2-dp2-zero1")
    _check(tmp_path, results, reference, "pp2-dp2-zero1")
    for pp_rank in (0, 1):
        pair = [r for r in results if r["pp_rank"] == pp_rank]
        assert len(pair) == 2 and pair[0]["param_numel"] == pair[1]["param_numel"]
        held = [r["optimizer_numel"] for r in pair]
        assert sum(held) == 2 * pair[0]["param_numel"]  # m and v of every parameter, once over the pair
        assert all(0 < h < 2 * pair[0]["param_numel"] for h in held)  # really split
    # the logical checkpoint: every rank wrote its share's AdamW state, which covers every parameter once
    from ernie_zoo.parallel.resharding import DCP_DIR, saved_shapes
    from ernie_zoo.utils import tied_names

    assert len(list((tmp_path / "final" / DCP_DIR).glob("*.safetensors"))) == 4
    moments = {k for k in saved_shapes(tmp_path / "final") if k.endswith(".exp_avg")}
    whole = _model()
    assert moments == {f"optim.{n}.exp_avg" for n, _ in whole.named_parameters()}
    assert not tied_names(whole) & {k[len("optim.") : -len(".exp_avg")] for k in moments}


@pytest.mark.distributed
@pytest.mark.slow
def test_decoder_pp2_and_pp2_dp2_zero1_match_one_process(tmp_path, decoder_reference):
    """An ERNIE 4.5 dense decoder on packed rows: PP 2 (1F1B, grad accumulation 2) on 2 ranks, then PP 2 x DP 2
    with ZeRO-1 and recompute on 4 ranks: the same losses, grad norms, weights and eval loss as one process, a
    bit-exact resume, a checkpoint AutoModelForCausalLM loads with lm_head tied; each rank holds its half of the
    layers, the token embeddings on the first stage and (the tied copy) on the last, the final norm on the last."""
    results = _run(tmp_path, "decoder-pp2")
    _check(tmp_path, results, decoder_reference, "decoder-pp2")
    first, last = results
    assert _held_layers(first) == {0, 1} and _held_layers(last) == {2, 3}
    assert "model.embed_tokens.weight" in first["shapes"] and "model.embed_tokens.weight" in last["shapes"]
    assert "model.norm.weight" in last["shapes"] and "model.norm.weight" not in first["shapes"]
    assert first["tied_copies_equal"] and last["tied_copies_equal"]

    results = _run(tmp_path / "zero1", "decoder-pp2-dp2-zero1")
    _check(tmp_path / "zero1", results, decoder_reference, "decoder-pp2-dp2-zero1")
    for pp_rank in (0, 1):
        pair = [r for r in results if r["pp_rank"] == pp_rank]
        assert all(_held_layers(r) == ({0, 1} if pp_rank == 0 else {2, 3}) for r in pair)
        held = [r["optimizer_numel"] for r in pair]
        assert sum(held) == 2 * pair[0]["param_numel"] and all(0 < h < 2 * pair[0]["param_numel"] for h in held)


@pytest.mark.distributed
@pytest.mark.slow
def test_decoder_pp2_tp2_matches_one_process(tmp_path, decoder_reference):
    """The decoder under PP 2 x TP 2 on 4 ranks: transformers' own TP plan (q/k/v, gate/up colwise; o, down
    rowwise) on each stage's layers, whole key-value heads per rank, norms and embeddings replicated; selective
    recompute, under zbv (the V: pipeline rank 0 holds layers 0 and 3, with the embeddings and the LM head)."""
    results = _run(tmp_path, "decoder-pp2-tp2")
    _check(tmp_path, results, decoder_reference, "decoder-pp2-tp2")
    for res in results:
        i = min(_held_layers(res))
        assert _held_layers(res) == ({0, 3} if res["pp_rank"] == 0 else {1, 2})
        assert ("model.norm.weight" in res["shapes"]) == (res["pp_rank"] == 0)
        shapes = {k.split(f"layers.{i}.")[1]: v for k, v in res["shapes"].items() if f"layers.{i}." in k}
        assert shapes["self_attn.q_proj.weight"] == [16, 32] and shapes["self_attn.k_proj.weight"] == [8, 32]
        assert shapes["self_attn.o_proj.weight"] == [32, 16] and shapes["mlp.up_proj.weight"] == [32, 32]
        assert shapes["mlp.down_proj.weight"] == [32, 32] and shapes["input_layernorm.weight"] == [32]
        if res["pp_rank"] == 0:
            assert res["shapes"]["model.embed_tokens.weight"] == [VOCAB, 32]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["pp2-bf16", "decoder-pp2-bf16"])
def test_bf16_pp2_matches_one_process_in_bf16(tmp_path, bf16_references, layout):
    """precision bf16 (autocast in every stage and in the head's loss, as one process autocasts the whole model):
    PP 2 against the single-device engine (`PlainEngine`) in bf16, the encoder and the decoder."""
    from safetensors.torch import load_file

    results = _run(tmp_path, layout)
    ref = bf16_references[layout]
    _check(tmp_path, results, ref, layout, BF16_NORM_RTOL, BF16_WEIGHT_ATOL)
    for res in results:
        assert res["losses"][0] == pytest.approx(ref["losses"][0], rel=1e-6)  # the same forward in bf16
        assert res["norms"][0] == pytest.approx(ref["norms"][0], rel=5e-4)
        assert res["losses"] == pytest.approx(ref["losses"], rel=BF16_LOSS_RTOL)
    final = load_file(str(tmp_path / "final" / "model.safetensors"))
    mean = sum((final[k] - ref["params"][k]).abs().sum().item() for k in final) / sum(v.numel() for v in final.values())
    print(layout, "bf16 mean abs weight diff", mean)
    assert mean < 1e-3


def test_the_moe_layouts_the_pipeline_backend_does_not_build_are_refused():
    """PP x EP runs (tests/test_expert_parallel.py); TP of a MoE decoder's pipeline stages, ZeRO-1 of a pipeline's
    experts and EP of a dense model are refused by name, before any rank is launched."""
    from ernie_zoo.models.decoder import decoder_config
    from ernie_zoo.training.causal_lm import build_decoder_model
    from ernie_zoo.training.pipeline_engine import PipelineEngine

    shape = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=64)  # fmt: skip
    moe = build_decoder_model(decoder_config(True, moe_num_experts=4, moe_intermediate_size=32, **shape), seed=0)
    with pytest.raises(ValueError, match="TP of the fused MoE experts is not built"):
        PipelineEngine(_recipe(4, 1, pp_size=2, tp_size=2), moe, torch.device("cpu"))
    with pytest.raises(ValueError, match="ZeRO-1 of the pipeline's experts"):
        PipelineEngine(_recipe(4, 1, pp_size=2, ep_size=2, zero_stage=1), moe, torch.device("cpu"))
    dense = build_decoder_model(decoder_config(False, **shape), seed=0)
    with pytest.raises(ValueError, match="expert parallelism needs a MoE decoder"):
        PipelineEngine(_recipe(4, 1, pp_size=2, ep_size=2), dense, torch.device("cpu"))


@pytest.mark.distributed
@pytest.mark.slow
def test_zero_bubble_schedules_match_one_process(tmp_path, reference):
    """distributed.pp_schedule zero_bubble (ZB-H1, one stage per rank) and zbv (two per rank, in a V) on 2 ranks:
    the same losses, grad norms, weights, eval loss and bit-exact resume as one process, with each backward split
    into its input and weight halves and the idle fraction of their bubble formulas (`_check_idle`). Under zbv rank
    0 holds layers 0 and 3 (the first and the last stage, so one word-embedding matrix serves both), rank 1 the
    middle."""
    results = _run(tmp_path, "pp2-zero-bubble")
    _check(tmp_path, results, reference, "pp2-zero-bubble")
    assert [_held_layers(r) for r in results] == [{0, 1}, {2, 3}]

    results = _run(tmp_path / "zbv", "pp2-zbv")
    _check(tmp_path / "zbv", results, reference, "pp2-zbv")
    first, middle = results
    assert _held_layers(first) == {0, 3} and _held_layers(middle) == {1, 2}
    assert {"cls.predictions.transform.dense.weight", "ernie.embeddings.word_embeddings.weight"} <= set(first["shapes"])
    assert not any(n.startswith(("cls.", "ernie.embeddings")) for n in middle["shapes"])


@pytest.mark.distributed
@pytest.mark.slow
def test_decoder_interleaved_zero_bubble_matches_one_process(tmp_path, decoder_reference):
    """The ERNIE 4.5 decoder under interleaved zero bubble (2 stages per rank, looped: rank 0 layers 0 and 2): the
    tied word embeddings' two copies (stage 0 on rank 0, the LM head on rank 1) get their weight gradients from the
    deferred W halves and stay equal; everything else as `_check`."""
    results = _run(tmp_path, "decoder-pp2-zero-bubble")
    _check(tmp_path, results, decoder_reference, "decoder-pp2-zero-bubble")
    assert [_held_layers(r) for r in results] == [{0, 2}, {1, 3}]
    assert all(r["tied_copies_equal"] for r in results)


# ------------------------------------------------------------------ the ernie-pretrain loop on 2 ranks
TINY = REPO / "recipes" / "pretrain" / "tiny-cpu.yaml"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


@pytest.mark.distributed
@pytest.mark.slow
def test_ernie_pretrain_pipeline_resumes_exactly_and_consolidates(tmp_path, tiny_tokenizer, capsys):
    """`ernie-pretrain` with `distributed.backend: pipeline` (PP 2, dropout on, eval every 2 steps through the
    forward-only path) on 2 gloo ranks: a run SIGKILLed after step 4 and restarted logs the same losses, grad norms
    and eval losses as an uninterrupted 6-step run and ends on the same weights, bit for bit; `ernie-zoo
    consolidate` turns its checkpoint into a from_pretrained directory with those weights."""
    from safetensors.torch import load_file

    from ernie_zoo.cli import main as cli
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.training.logging_utils import read_metrics

    tiny_tokenizer.save_pretrained(tmp_path / "tok")

    def pretrain(out: Path, env: dict | None = None) -> None:
        run_local_ranks(
            ["-m", "ernie_zoo.training.pretrain", str(TINY), "--output_dir", str(out)]
            + [
                "--tokenizer.path",
                str(tmp_path / "tok"),
                "--max_steps",
                "6",
                "--data.files",
                f"[{SENTENCES}]",
            ]
            + [
                "--distributed.backend",
                "pipeline",
                "--distributed.pp_size",
                "2",
                "--checkpoint.interval",
                "2",
            ]
            + ["--eval.interval", "2", "--eval.batch_size", "3", "--logging.interval", "1"]
            + [
                "--logging.progress_bar",
                "false",
                "--logging.tensorboard",
                "false",
                "--optim.warmup_steps",
                "1",
            ],
            nproc=2,
            timeout=600,
            cwd=REPO,
            env=env,
        )

    pretrain(tmp_path / "straight")
    with pytest.raises(RuntimeError, match="failed"):  # both ranks SIGKILL themselves after step 4
        pretrain(tmp_path / "resumed", env={"ERNIE_ZOO_TEST_KILL_AT_STEP": "4"})
    # checkpoint-4 was being written in the background (checkpoint.async_save) when the ranks died: it is there
    # if its write won the race, else the run continues from checkpoint-2; either way it ends where the other does
    assert (tmp_path / "resumed" / "checkpoint-2").is_dir()
    pretrain(tmp_path / "resumed")
    straight = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    resumed = {(r["step"], tuple(sorted(r))): r for r in read_metrics(tmp_path / "resumed" / "metrics.jsonl")}
    train = [r for r in straight if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in straight if "eval/loss" in r] == [2, 4, 6]
    for r in straight:
        twin = resumed[r["step"], tuple(sorted(r))]
        for key in ("train/loss", "train/grad_norm", "eval/loss"):
            if key in r:
                assert twin[key] == r[key], (r["step"], key)  # the same floats: exact resume
    a = load_file(str(tmp_path / "straight" / "checkpoint-6" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "checkpoint-6" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(list((tmp_path / "straight" / "checkpoint-6" / "dcp").glob("*.safetensors"))) == 2  # one per stage
    assert (tmp_path / "straight" / "checkpoint-6" / "layout.json").is_file()

    out = tmp_path / "model"
    assert cli(["consolidate", str(tmp_path / "straight" / "checkpoint-6"), str(out)]) == 0
    merged = load_file(str(out / "model.safetensors"))
    assert merged.keys() == a.keys() and all(torch.equal(merged[k], a[k]) for k in a)
    assert (out / "tokenizer_config.json").is_file()
    # loaded with AutoModelForMaskedLM and checked against the checkpoint's own export
    assert "logits match" in capsys.readouterr().out


@pytest.mark.distributed
@pytest.mark.slow
def test_ernie_pretrain_runs_a_decoder_recipe_on_the_pipeline_backend(tmp_path):
    """`ernie-pretrain recipes/pretrain/ernie4.5-tiny-cpu.yaml` (causal-LM on packed documents) with the pipeline
    backend on 2 ranks: it trains and evaluates through the stages, and `ernie-zoo consolidate` turns a checkpoint
    into a from_pretrained directory that plain transformers loads as Ernie4_5ForCausalLM with the checkpoint's
    weights."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ernie_zoo.cli import main as cli
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.taskflow.models import ZOO_DIR
    from ernie_zoo.training.logging_utils import read_metrics

    out = tmp_path / "run"
    run_local_ranks(
        ["-m", "ernie_zoo.training.pretrain", str(REPO / "recipes/pretrain/ernie4.5-tiny-cpu.yaml"), "--output_dir",
         str(out), "--max_steps", "4", "--checkpoint.interval", "4", "--eval.interval", "2", "--data.files",
         f"[{SENTENCES}]", "--tokenizer.path", str(ZOO_DIR / "ernie-zoo-mini-zh"), "--distributed.backend",
         "pipeline", "--distributed.pp_size", "2", "--logging.progress_bar", "false", "--logging.tensorboard",
         "false"],
        nproc=2, timeout=600, cwd=REPO,
    )  # fmt: skip
    metrics = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in metrics if "eval/loss" in r] == [2, 4]
    assert all(math.isfinite(r["train/loss"]) for r in metrics if "train/loss" in r)
    assert cli(["consolidate", str(out / "checkpoint-4"), str(tmp_path / "model")]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"), dtype=torch.float32)
    assert type(model).__name__ == "Ernie4_5ForCausalLM"
    saved = load_file(str(out / "checkpoint-4" / "model.safetensors"))
    loaded = model.state_dict()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


# ------------------------------------------------------------------------------ splitting, no ranks
def test_stage_layers_are_contiguous_and_balanced():
    from ernie_zoo.parallel.pipeline import rank_stages, stage_layers, stage_ranks

    assert stage_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert stage_layers(5, 2) == [range(0, 2), range(2, 5)]  # the extra layer away from the embeddings
    assert stage_layers(24, 4)[3] == range(18, 24)
    assert rank_stages(1, 2, 2) == [1, 3]
    assert stage_ranks(4, 2) == [0, 1, 2, 3, 0, 1, 2, 3]  # looped (interleaved, zero_bubble)
    assert stage_ranks(4, 2, v_shape=True) == [0, 1, 2, 3, 3, 2, 1, 0]  # zbv
    assert rank_stages(0, 2, 2, v_shape=True) == [0, 3] and rank_stages(1, 4, 2, v_shape=True) == [1, 6]
    with pytest.raises(ValueError, match="3 layers cannot fill 4 pipeline stages"):
        stage_layers(3, 4)


def test_prune_keeps_names_and_the_tied_embedding_on_the_last_stage():
    from ernie_zoo.parallel.pipeline import ENCODER_SPLIT, prune_to_stages, tied_weights

    whole = _model()
    names = dict(whole.state_dict())
    assert tied_weights(ENCODER_SPLIT, whole) == ["ernie.embeddings.word_embeddings.weight"]
    first, last, middle = _model(), _model(), _model()
    assert prune_to_stages(first, ENCODER_SPLIT, [0], 3) == {0: [0]}
    assert prune_to_stages(last, ENCODER_SPLIT, [2], 3) == {2: [2, 3]}
    prune_to_stages(middle, ENCODER_SPLIT, [1], 3)
    for stage in (first, last, middle):  # every name is the whole model's, with the same value
        for key, value in stage.state_dict().items():
            assert torch.equal(value, names[key]), key
    assert not any(k.startswith("cls.") for k in first.state_dict())
    assert {k.split(".")[3] for k in middle.state_dict() if "encoder.layer" in k} == {"1"}
    assert not any(k.startswith(("cls.", "ernie.embeddings")) for k in middle.state_dict())
    # the last stage: the head, still tied to a word-embedding matrix of the same name, and nothing else of
    # the embeddings
    emb = last.ernie.embeddings.word_embeddings.weight
    assert last.cls.predictions.decoder.weight is emb
    assert [k for k in last.state_dict() if k.startswith("ernie.embeddings")] == [
        "ernie.embeddings.word_embeddings.weight"
    ]
    # an untied head keeps no embedding copy
    untied = _model()
    untied.cls.predictions.decoder.weight = torch.nn.Parameter(untied.cls.predictions.decoder.weight.clone())
    assert tied_weights(ENCODER_SPLIT, untied) == []
    prune_to_stages(untied, ENCODER_SPLIT, [1], 2)
    assert untied.ernie.embeddings is None


def test_decoder_split_prunes_ernie45_the_same_way():
    """The split is data: transformers' Ernie4_5ForCausalLM (the decoder family) splits with DECODER_SPLIT,
    lm_head staying tied to a copy of the token embeddings on the last stage."""
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

    from ernie_zoo.parallel.pipeline import DECODER_SPLIT, prune_to_stages, tied_weights

    config = Ernie4_5Config(
        num_hidden_layers=4,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=100,
        tie_word_embeddings=True,
    )
    model = Ernie4_5ForCausalLM(config)
    assert tied_weights(DECODER_SPLIT, model) == ["model.embed_tokens.weight"]
    whole = set(model.state_dict())
    prune_to_stages(model, DECODER_SPLIT, [1], 2)
    held = set(model.state_dict())
    assert held <= whole
    assert {k.split(".")[2] for k in held if k.startswith("model.layers.")} == {"2", "3"}
    assert model.lm_head.weight is model.model.embed_tokens.weight and model.model.norm is not None
    assert model.model.rotary_emb is not None  # no parameters: every stage keeps it


def test_recipe_rules_for_the_pipeline_backend():
    from ernie_zoo.training.recipe import DistributedArgs, MaskingArgs, PretrainRecipe

    def check(message: str, **kwargs) -> None:
        with pytest.raises(ValueError, match=message):
            DistributedArgs(**kwargs).validate()

    check("distributed.pp_size.*needs distributed.backend pipeline", backend="deepspeed", pp_size=2)
    check("distributed.pp_size.*must be >= 1", backend="pipeline", pp_size=0)
    check("distributed.pp_schedule.*interleaved needs distributed.pp_size >= 2", backend="pipeline",
          pp_schedule="interleaved")  # fmt: skip
    DistributedArgs(backend="pipeline", pp_size=1, tp_size=2).validate()  # TP x DP without a pipeline
    check(
        "distributed.pp_schedule.*must be one of 1f1b, interleaved",
        backend="pipeline",
        pp_size=2,
        pp_schedule="gpipe",
    )
    check(
        "distributed.zero_stage.*must be 0, 1 or null under backend pipeline",
        backend="pipeline",
        pp_size=2,
        zero_stage=2,
    )
    check("distributed.deepspeed_config.*needs distributed.backend deepspeed", backend="pipeline", pp_size=2,
          deepspeed_config="ds.json")  # fmt: skip
    DistributedArgs(backend="pipeline", pp_size=2, zero_stage=1).validate()
    DistributedArgs(backend="pipeline", pp_size=2, tp_size=2, recompute="full").validate()
    pipeline = DistributedArgs(backend="pipeline", pp_size=2)
    with pytest.raises(ValueError, match="'precision' = 'fp16'.*fp32 or bf16"):
        PretrainRecipe(precision="fp16", distributed=pipeline).validate()
    with pytest.raises(ValueError, match="data.files"):  # bf16 passes the pipeline's rules; the data is missing
        PretrainRecipe(precision="bf16", distributed=pipeline).validate()
    sentiment = MaskingArgs(schedule=[{"strategy": "sentiment", "until_step": None}])
    with pytest.raises(ValueError, match="masking.polarity_weight.*word-polarity head"):
        PretrainRecipe(masking=sentiment, distributed=pipeline).validate()


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("m", [4, 8, 12])
def test_torch_schedules_idle_fraction_is_the_planned_bubble(p, m):
    """The action lists torch 2.13 builds for the multi-stage schedules (every rank's, `pipeline_order`), run as a
    timeline at the zero-bubble paper's equal costs, leave idle exactly the bubble the planner plans them with:
    interleaved (p-1)/(v m+p-1), zero_bubble (p-1)/(3 v m+p-1) at v = 1 and 2, zbv (p-1)/(6m+p-1) for m >= 2p-1.
    The 1F1B schedule runs its own loop (its `pipeline_order` is a drawing), so its timeline is measured on ranks."""
    from types import SimpleNamespace

    from torch.distributed import pipelining

    from ernie_zoo.parallel.pipeline import idle_fraction, rank_stages
    from ernie_zoo.parallel.planner import pipeline_bubble

    cases = [
        (pipelining.ScheduleInterleaved1F1B, "1f1b", 2),
        (pipelining.ScheduleInterleavedZeroBubble, "zero_bubble", 1),
        (pipelining.ScheduleInterleavedZeroBubble, "zero_bubble", 2),
        (pipelining.ScheduleZBVZeroBubble, "zbv", 2),
    ]
    for cls, schedule, v in cases:
        if schedule == "zbv" and m < 2 * p - 1:
            continue
        n = p * v
        stages = [  # rank 0's stages, as much of a PipelineStage as building the action lists reads
            SimpleNamespace(stage_index=s, num_stages=n, group_size=p, group_rank=0, is_first=s == 0,
                            is_last=s == n - 1, submod=torch.nn.Linear(1, 1))  # fmt: skip
            for s in rank_stages(0, p, v, v_shape=schedule == "zbv")
        ]
        order = cls(stages, m).pipeline_order
        actions = {
            rank: [(a.stage_index, a.computation_type.value, a.microbatch_index) for a in acts
                   if a is not None and a.computation_type.value in "FBIW"]  # fmt: skip
            for rank, acts in order.items()
        }
        assert sum(len(a) for a in actions.values()) == n * m * (3 if schedule != "1f1b" else 2)
        measured = idle_fraction(actions, n)
        assert measured == pytest.approx(pipeline_bubble(p, m, v, schedule), rel=1e-9), (cls.__name__, v)


def test_idle_fraction_reads_a_timeline():
    from ernie_zoo.parallel.pipeline import idle_fraction

    # 2 stages, 1 micro batch: F 0-1 on rank 0, F 1-2 and B 2-4 on rank 1, B 4-6 on rank 0: 6 busy of 2 x 6
    whole = {0: [(0, "F", 0), (0, "B", 0)], 1: [(1, "F", 0), (1, "B", 0)]}
    assert idle_fraction(whole, 2) == pytest.approx(0.5)
    # split into input and weight halves: rank 0's I (3-4) starts after rank 1's I (2-3), beside rank 1's W: span 5
    split = {0: [(0, "F", 0), (0, "I", 0), (0, "W", 0)], 1: [(1, "F", 0), (1, "I", 0), (1, "W", 0)]}
    assert idle_fraction(split, 2) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="deadlock"):  # rank 0 runs the backward before the forward
        idle_fraction({0: [(0, "B", 0), (0, "F", 0)], 1: [(1, "F", 0), (1, "B", 0)]}, 2)


def test_schedule_rules_name_the_recipe_key():
    from ernie_zoo.parallel.pipeline import check_schedule, stage_layers
    from ernie_zoo.training.recipe import DistributedArgs

    def check(message: str, **kwargs) -> None:
        with pytest.raises(ValueError, match=message):
            DistributedArgs(backend="pipeline", **kwargs).validate()

    check("'distributed.pp_schedule' = 'zbv': zbv needs distributed.pp_size >= 2", pp_schedule="zbv")
    check("'distributed.pp_virtual_stages' = 3: zbv runs exactly 2 stages per rank", pp_size=2, pp_schedule="zbv",
          pp_virtual_stages=3)  # fmt: skip
    check("'distributed.pp_virtual_stages' = 1: interleaved runs >= 2", pp_size=2, pp_schedule="interleaved",
          pp_virtual_stages=1)  # fmt: skip
    check("'distributed.pp_virtual_stages' = 0: zero_bubble runs >= 1", pp_size=2, pp_schedule="zero_bubble",
          pp_virtual_stages=0)  # fmt: skip
    check("'distributed.pp_microbatches' = 3: 1f1b needs at least pp_size", pp_size=4, pp_microbatches=3)
    check("'distributed.pp_microbatches' = 5: zero_bubble runs the micro batches in 2 equal rounds", pp_size=2,
          pp_schedule="zero_bubble", pp_microbatches=5)  # fmt: skip
    DistributedArgs(backend="pipeline", pp_size=2, pp_schedule="zero_bubble", pp_virtual_stages=1).validate()
    DistributedArgs(backend="pipeline", pp_size=4, pp_schedule="interleaved", pp_microbatches=6).validate()
    check_schedule("zbv", 2, 2, 1)  # runs (torch pads to 2p-1 micro batches); the planner wants m >= 2p-1
    with pytest.raises(ValueError, match="4 layers cannot fill 8 pipeline stages.*pp_virtual_stages"):
        stage_layers(4, 2 * 4)  # pp_size 2 x pp_virtual_stages 4 of a 4-layer model


def test_micro_batch_must_split_into_pipeline_micro_batches():
    from ernie_zoo.training.pipeline_engine import PipelineEngine

    recipe = _recipe(6, 1, pp_size=2, pp_microbatches=4)
    with pytest.raises(
        ValueError, match="micro_batch_size 6 does not split into distributed.pp_microbatches 4"
    ):
        PipelineEngine(recipe, _model(), torch.device("cpu"))


# ---------------------------------------------------------------------------------------------- worker
def _worker(out_dir: str, layout: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from ernie_zoo.training.pipeline_engine import PipelineEngine

    torch.set_num_threads(1)
    out = Path(out_dir)
    _, keys, micro, accum = LAYOUTS[layout]
    make_model, batch_of, clip = _kind(layout)
    recipe = _recipe(micro, accum, clip, _precision(layout), **keys)

    def make_engine():
        # the model on the meta device: each rank allocates its stages only, seeded by name (the reference's values)
        model = make_model(meta=True)
        assert all(t.is_meta for t in model.parameters())
        return PipelineEngine(recipe, model, torch.device("cpu"))

    engine = make_engine()
    rank = dist.get_rank()
    ran = _record_actions()
    first_step: list[tuple] = []  # the actions of the first pipeline step

    def train_step(step: int) -> tuple[float, float]:
        batch = batch_of(step)
        per_replica = GLOBAL_BATCH // engine.dp_world_size
        total = 0.0
        for m in range(accum):
            start = engine.dp_rank * per_replica + m * micro
            loss, _, _ = engine.forward(_rows(batch, slice(start, start + micro)))
            if not first_step:
                first_step.extend(ran)
            engine.backward(loss / accum, m == accum - 1)
            total += loss.item() / accum
        norm = engine.step()
        (mean,) = engine.dp_sum([total])
        return mean / engine.dp_world_size, norm

    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        if step == STEPS - 1:
            engine.save(out / "before-last")
        loss, norm = train_step(step)
        losses.append(loss)
        norms.append(norm)
        lrs.append(engine.lr)
    engine.save(out / "final")
    evaluated = _eval_loss(engine, batch_of)
    final = {k: v.clone() for k, v in engine.local_state().items()}
    shapes = {
        n: list((p.to_local() if isinstance(p, DTensor) else p).shape)
        for n, p in engine.model.named_parameters()
    }
    emb = "model.embed_tokens.weight" if layout.startswith("decoder") else "ernie.embeddings.word_embeddings.weight"
    params = dict(engine.model.named_parameters())
    tied_equal = True
    if emb in params and (engine.first != engine.last):
        # the first and last stage's copies of the tied word embeddings agree bit for bit
        mine = params[emb].detach().clone()
        other = mine.clone()
        peer = engine.pp_ranks[engine.stage_rank[-1] if engine.first else 0]
        ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, other, peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        tied_equal = bool(torch.equal(mine, other))
    # resume: a fresh engine loads the checkpoint written before the last step and runs that step again
    engine = make_engine()
    engine.load(out / "before-last")
    train_step(STEPS - 1)
    again = engine.local_state()
    diff = max((again[k] - final[k]).abs().max().item() for k in final)
    result = {
        "losses": losses,
        "norms": norms,
        "lrs": lrs,
        "shapes": shapes,
        "pp_rank": engine.pp_rank,
        "dp_rank": engine.dp_rank,
        "tp_rank": engine.tp_rank,
        "actions": first_step,
        "pipeline": {"schedule": engine.schedule_name, "virtual": engine.virtual, "num_stages": engine.num_stages,
                     "n_microbatches": engine.n_microbatches},  # fmt: skip
        "tied_copies_equal": tied_equal,
        "resumed_max_diff": diff,
        "eval": evaluated,
        "attention": engine.model.config._attn_implementation,
        "num_parameters": engine.num_parameters(),
        "param_numel": sum(
            (p.to_local() if isinstance(p, DTensor) else p).numel() for p in engine.model.parameters()
        ),
        "optimizer_numel": sum(
            (v.to_local() if isinstance(v, DTensor) else v).numel()
            for state in engine.optimizer.state.values()
            for k, v in state.items()
            if k in ("exp_avg", "exp_avg_sq")
        ),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


def _record_actions() -> list[tuple[int, str, int]]:
    """A list that fills with every stage action this process runs, in order: (stage, kind, micro batch), kind F
    (forward), B (full backward), I (input-gradient half) or W (weight-gradient half)."""
    from torch.distributed.pipelining.stage import _PipelineStageBase as Stage

    ran: list[tuple[int, str, int]] = []
    forward, backward = Stage.forward_one_chunk, Stage.backward_one_chunk
    weight = Stage.backward_weight_one_chunk

    def forward_one_chunk(self, chunk, *args, **kwargs):
        ran.append((self.stage_index, "F", chunk))
        return forward(self, chunk, *args, **kwargs)

    def backward_one_chunk(self, chunk, loss=None, full_backward=True, last_backward=False):
        ran.append((self.stage_index, "B" if full_backward else "I", chunk))
        return backward(self, chunk, loss=loss, full_backward=full_backward, last_backward=last_backward)

    def backward_weight_one_chunk(self, chunk, last_backward=False):
        ran.append((self.stage_index, "W", chunk))
        return weight(self, chunk, last_backward=last_backward)

    Stage.forward_one_chunk, Stage.backward_one_chunk = forward_one_chunk, backward_one_chunk
    Stage.backward_weight_one_chunk = backward_weight_one_chunk
    return ran


if __name__ == "__main__" and "--worker" in sys.argv:
    i = sys.argv.index("--worker")
    _worker(sys.argv[i + 1], sys.argv[i + 2])
    finish_distributed()  # every rank, after its last collective (a live group can abort at exit)

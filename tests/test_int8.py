"""int8 compute with per-row input scales (ernie_zoo.models.int8.RowwiseInt8Linear) and the CRF's batched
Viterbi backtrack: what makes `Taskflow("ner")` fast without changing its entities."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ernie_zoo.models.crf import LinearChainCRF
from ernie_zoo.models.int8 import RowwiseInt8Linear, quantize_linear_int8


def _linear(n_in: int, n_out: int, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_is_close_to_fp32(bias):
    lin = _linear(64, 48, bias)
    q = RowwiseInt8Linear(lin)
    x = torch.randn(5, 7, 64)
    ref, out = lin(x), q(x)
    assert out.shape == ref.shape and out.dtype == torch.float32
    # per-row 7-bit inputs and per-row 8-bit weights: a few percent of the output's scale
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()
    assert not torch.equal(out, ref)  # it really is quantised


def test_a_rows_output_does_not_depend_on_the_other_rows():
    """The property per-tensor dynamic quantisation lacks: a row computed alone, or next to a row 1000x larger,
    gives the same bits."""
    q = RowwiseInt8Linear(_linear(32, 16))
    row = torch.randn(1, 32)
    alone = q(row)
    for neighbours in (torch.randn(6, 32), 1000 * torch.randn(3, 32), torch.zeros(2, 32)):
        assert torch.equal(q(torch.cat([neighbours, row]))[-1:], alone)


def test_zero_rows_and_every_linear_replaced():
    q = RowwiseInt8Linear(_linear(8, 4))
    zero = q(torch.zeros(3, 8))
    assert torch.isfinite(zero).all() and torch.allclose(zero, q.bias.expand(3, 4))
    model = nn.Sequential(_linear(8, 8), nn.ReLU(), nn.Sequential(_linear(8, 4, seed=1)))
    x = torch.randn(4, 8)
    ref = model(x)
    quantize_linear_int8(model)
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert sum(isinstance(m, RowwiseInt8Linear) for m in model.modules()) == 2
    assert torch.allclose(model(x), ref, atol=0.05 * ref.abs().max().item())


def _brute_force_paths(crf: LinearChainCRF, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row decoded alone with the per-step Python backtrack (the reference)."""
    B, T, C = emissions.shape
    paths = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        n = int(mask[b].sum())
        if n == 0:
            continue
        score = crf.start_transitions + emissions[b, 0]
        pointers = []
        for t in range(1, n):
            best, idx = (score.unsqueeze(1) + crf.transitions).max(0)
            pointers.append(idx)
            score = best + emissions[b, t]
        tag = int((score + crf.end_transitions).argmax())
        paths[b, n - 1] = tag
        for t in range(n - 1, 0, -1):
            tag = int(pointers[t - 1][tag])
            paths[b, t - 1] = tag
    return paths


def test_batched_viterbi_equals_each_row_decoded_alone():
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        C, B, T = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 8), (1, 6), (1, 12)))
        crf = LinearChainCRF(C)
        with torch.no_grad():
            for p in crf.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        emissions = torch.randn(B, T, C, generator=g)
        lengths = torch.randint(0, T + 1, (B,), generator=g)  # empty rows included
        mask = torch.arange(T)[None] < lengths[:, None]
        assert torch.equal(crf(emissions, mask), _brute_force_paths(crf, emissions, mask))


def test_shipped_ner_scores_do_not_depend_on_the_batch():
    """The README's promise for the int8 default: a text's scores alone and in a batch of 64 texts of mixed lengths
    were 1.6e-3 apart (entities equal); int8 batches now hold one padded width, and the scores are equal."""
    import random

    from ernie_zoo.taskflow import Taskflow

    rng = random.Random(0)
    clauses = [
        "新华社北京三月五日电",
        "李明在北京大学发表讲话",
        "上海市政府今天召开会议",
        "王芳代表联合国在日内瓦发言",
        "张伟去年从清华大学毕业后到深圳工作",
        "中国足球协会宣布了新的主教练人选",
        "记者从广州市公安局获悉",
    ]
    texts = ["，".join(rng.choices(clauses, k=rng.randint(1, 9))) + "。" for _ in range(64)]
    assert len({len(t) // 8 for t in texts}) > 5  # mixed padded widths
    flow = Taskflow("ner")
    assert flow._task.settings.precision == "int8"
    batch = flow(texts)
    for text, together in zip(texts, batch):
        alone = flow(text)
        assert [(e["start"], e["end"], e["type"]) for e in alone["entities"]] == [
            (e["start"], e["end"], e["type"]) for e in together["entities"]
        ]
        assert all(
            abs(a["score"] - b["score"]) <= 1e-6 for a, b in zip(alone["entities"], together["entities"])
        )
    assert sum(len(r["entities"]) for r in batch) > 50

"""The linear-chain CRF against brute-force enumeration of every tag path on tiny cases, and the CRF head."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ernie_zoo.models.crf import LinearChainCRF, compact
from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF, default_crf_mask


def _random_crf(num_tags: int, seed: int) -> LinearChainCRF:
    torch.manual_seed(seed)
    crf = LinearChainCRF(num_tags)
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_()
    return crf


def _score(crf, emissions, path):
    s = crf.start_transitions[path[0]] + emissions[0, path[0]]
    for t in range(1, len(path)):
        s = s + crf.transitions[path[t - 1], path[t]] + emissions[t, path[t]]
    return s + crf.end_transitions[path[-1]]


@pytest.mark.parametrize(("num_tags", "lengths"), [(2, [1, 3]), (3, [4, 2, 3]), (4, [3, 1])])
def test_log_likelihood_and_viterbi_match_brute_force(num_tags, lengths):
    crf = _random_crf(num_tags, seed=num_tags)
    T = max(lengths)
    emissions = torch.randn(len(lengths), T, num_tags)
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])
    tags = torch.randint(0, num_tags, (len(lengths), T))
    ll = crf.log_likelihood(emissions, mask, tags)
    paths = crf(emissions, mask)
    for b, n in enumerate(lengths):
        all_paths = list(itertools.product(range(num_tags), repeat=n))
        scores = torch.stack([_score(crf, emissions[b], p) for p in all_paths])
        log_z = torch.logsumexp(scores, 0)
        expected = _score(crf, emissions[b], tags[b, :n].tolist()) - log_z
        assert ll[b].item() == pytest.approx(expected.item(), abs=1e-4)
        best = all_paths[int(scores.argmax())]
        assert paths[b, :n].tolist() == list(best)
        assert (paths[b, n:] == -1).all()
        # probabilities of all paths sum to one
        total = sum(
            math.exp(
                crf.log_likelihood(
                    emissions[b : b + 1], mask[b : b + 1], torch.tensor([list(p) + [0] * (T - n)])
                ).item()
            )
            for p in all_paths
        )
        assert total == pytest.approx(1.0, abs=1e-4)


def test_nll_is_mean_negative_log_likelihood_and_has_gradients():
    crf = _random_crf(3, seed=1)
    emissions = torch.randn(2, 4, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[0, 1, 2, 1], [2, 2, -100, -100]])
    nll = crf(emissions, mask, tags)
    assert nll.item() == pytest.approx(-crf.log_likelihood(emissions, mask, tags).mean().item())
    nll.backward()
    assert emissions.grad is not None and crf.transitions.grad is not None
    assert emissions.grad[1, 2:].abs().sum() == 0  # masked positions get no gradient


def test_empty_rows_and_bad_inputs():
    crf = _random_crf(2, seed=0)
    emissions = torch.randn(2, 3, 2)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    ll = crf.log_likelihood(emissions, mask, torch.zeros(2, 3, dtype=torch.long))
    assert ll[1].item() == 0.0
    assert (crf(emissions, mask)[1] == -1).all()
    with pytest.raises(ValueError, match="prefix"):
        crf(emissions, torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=torch.bool))
    with pytest.raises(ValueError, match="tags must lie"):
        crf(emissions, mask, torch.full((2, 3), 5))
    with pytest.raises(ValueError, match="emissions"):
        crf(torch.randn(2, 3, 4), mask)


def test_compact_moves_valid_positions_first():
    mask = torch.tensor([[0, 1, 1, 0, 1]], dtype=torch.bool)
    values = torch.tensor([[10, 11, 12, 13, 14]])
    mask_c, order, values_c = compact(mask, values)
    assert mask_c.tolist() == [[True, True, True, False, False]]
    assert values_c[0, :3].tolist() == [11, 12, 14]
    assert order[0, :3].tolist() == [1, 2, 4]


def test_default_crf_mask_drops_cls_and_sep():
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert default_crf_mask(attention).int().tolist() == [[0, 1, 1, 0, 0], [0, 1, 1, 1, 0]]


def test_crf_head_trains_decodes_and_roundtrips(tiny_tokenizer, make_config, zh_sentences, tmp_path):
    torch.manual_seed(0)
    model = ErnieZooForTokenClassificationCRF(make_config(num_labels=3))
    model.load_char_tables(tiny_tokenizer)
    assert model.config.use_crf and float(model.crf.transitions.abs().sum()) == 0.0
    enc = tiny_tokenizer(zh_sentences[:4], padding=True, return_tensors="pt")
    crf_mask = default_crf_mask(enc["attention_mask"])
    labels = torch.where(
        crf_mask, torch.arange(enc["input_ids"].shape[1]) % 3, torch.full_like(enc["input_ids"], -100)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():
        out = model(**enc)
    assert ((out.predictions == -100) == ~crf_mask).all()
    assert out.predictions[crf_mask].min() >= 0
    model.save_pretrained(tmp_path / "crf")
    reloaded = ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path / "crf").eval()
    with torch.no_grad():
        again = reloaded(**enc)
    assert torch.equal(again.predictions, out.predictions)
    torch.testing.assert_close(reloaded.crf.transitions, model.crf.transitions)
    with pytest.raises(ValueError, match="-100"):
        model(**enc, labels=torch.full_like(labels, -100))

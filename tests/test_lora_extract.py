"""A full fine-tune as a LoRA adapter on its base (ernie_zoo.finetune.lora_extract): exact at full rank, through
peft's own loading and merging; truncated below it, with the error it reports."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tiny_config

from ernie_zoo import ErnieZooTokenizerFast
from ernie_zoo.finetune.lora_extract import lora_from_difference
from ernie_zoo.models.span_extraction import ErnieZooForSpanExtraction


@pytest.fixture(scope="module")
def pair():
    """(tokenizer, base, tuned): a random tiny span extractor and a copy with every weight moved."""
    tokenizer = ErnieZooTokenizerFast.train_vocab(
        ["李明毕业于北京大学。王芳在上海工作。"], vocab_size=100, min_frequency=1, show_progress=False
    )
    torch.manual_seed(0)
    base = ErnieZooForSpanExtraction(tiny_config(tokenizer)).eval()
    tuned = copy.deepcopy(base)
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return tokenizer, base, tuned


def _logits(model, tokenizer):
    enc = tokenizer(
        ["人物", "地点"], ["李明毕业于北京大学。", "王芳在上海工作。"], padding=True, return_tensors="pt"
    )
    keep = {k: v for k, v in enc.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = model(**keep)
    return torch.cat([out.start_logits, out.end_logits], dim=-1)


def test_full_rank_is_the_tuned_model_through_peft(pair, tmp_path):
    from peft import PeftModel

    tokenizer, base, tuned = pair
    expected, before = _logits(tuned, tokenizer), _logits(base, tokenizer)
    assert not torch.allclose(expected, before, atol=1e-2)
    model, errors = lora_from_difference(copy.deepcopy(base), tuned, rank=64)  # >= every matrix's rank
    assert max(errors.values()) < 1e-6 and any("word_embeddings" in k for k in errors)
    assert torch.allclose(_logits(model.eval(), tokenizer), expected, atol=1e-5)
    model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    loaded = PeftModel.from_pretrained(copy.deepcopy(base), tmp_path / "adapter").eval()
    assert torch.allclose(_logits(loaded, tokenizer), expected, atol=1e-5)
    assert torch.allclose(_logits(loaded.merge_and_unload(), tokenizer), expected, atol=1e-5)


def test_low_rank_drops_what_it_reports(pair):
    tokenizer, base, tuned = pair
    expected = _logits(tuned, tokenizer)
    gaps = []
    for rank in (1, 8):
        model, errors = lora_from_difference(copy.deepcopy(base), tuned, rank=rank)
        assert 0 < min(errors.values()) <= max(errors.values()) < 1
        gaps.append(float((_logits(model.eval(), tokenizer) - expected).abs().max()))
    assert gaps[0] > gaps[1] > 0
    with pytest.raises(ValueError, match="rank must be >= 1"):
        lora_from_difference(copy.deepcopy(base), tuned, rank=0)

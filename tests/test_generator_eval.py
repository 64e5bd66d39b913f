"""evaluate_generator (the general generator's card numbers) end to end on a tiny random ERNIE 4.5 decoder."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from ernie_zoo.data.labelled import write_jsonl
from ernie_zoo.evaluation.generation import evaluate_generator
from ernie_zoo.models.decoder import build_decoder, decoder_config
from ernie_zoo.taskflow.models import ZOO_DIR


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    tok = AutoTokenizer.from_pretrained(ZOO_DIR / "ernie-zoo-mini-zh")
    torch.manual_seed(0)
    config = decoder_config(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, vocab_size=len(tok), bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model = build_decoder(config)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    data = root / "data"
    data.mkdir()
    write_jsonl(data / "generator_heldout.jsonl", [
        {"domain": "news", "source": "msra-test", "text": "新华社北京三月五日电"},
        {"domain": "review", "source": "reviews-test", "text": "这家酒店服务很好"},
    ])  # fmt: skip
    write_jsonl(data / "generator_prefixes.jsonl", [
        {"domain": "news", "source": "msra-test", "prefix": "香港特别行政区,"},
        {"domain": "everyday", "source": "hand-written", "prefix": "今天天气很好，"},
    ])  # fmt: skip
    (data / "generator.txt").write_text("新华社北京电\n酒店服务很好\n今天天气很好\n", encoding="utf-8")
    ds = root / "datasets"
    write_jsonl(ds / "idioms/train.jsonl", [{"word": "一帆风顺", "explanation": "比喻非常顺利。"}])
    write_jsonl(ds / "idioms/test.jsonl", [{"word": "一路顺风", "explanation": "旅途平安。"}])
    return root


def test_evaluate_generator_reports_every_number(tiny):
    result = evaluate_generator(
        tiny / "model", tiny / "data", tiny / "datasets", max_new_tokens=8, ngram_order=3
    )
    ppl = result["perplexity_per_char"]
    assert set(ppl) == {"generator", "char_3gram_kn"}
    assert set(ppl["generator"]) == {"msra-test", "reviews-test", "all"}
    assert all(v > 1 for row in ppl.values() for v in row.values())
    assert ppl["generator"]["all"] > 1000  # random weights over a 16k vocabulary: near-uniform
    assert set(result["register"]) == {"news", "everyday"}
    assert all(0 <= r["verse_rate"] <= 1 for r in result["register"].values())
    assert len(result["continuations"]) == 2 and all(
        isinstance(c["continuation"], str) for c in result["continuations"]
    )
    assert result["idioms"]["retrieval_baseline"]["char_f1"] == pytest.approx(1 / 6)  # only "。" shared
    assert result["idioms"]["generator"]["n"] == 1
    json.dumps(result, ensure_ascii=False)  # a card can store it

"""An ERNIE 4.5 decoder directory in Taskflow (#37 item 5, #39 item 3 for decoders): `Taskflow("text_generation",
task_path=DIR)` on transformers' Ernie4_5ForCausalLM with the zoo's character tokenizer gives what plain
`model.generate()` and `transformers.pipeline("text-generation")` give on the same weights (greedy, KV cache on),
and the KV cache does not change the greedy result."""

from __future__ import annotations

import pytest
import torch
import transformers

from ernie_zoo.models.decoder import build_decoder, decoder_config
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.models import ZOO_DIR

PROMPTS = ["今天天气很好，", "据新华社报道，", "这家酒店的服务"]


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory):
    tok = transformers.AutoTokenizer.from_pretrained(ZOO_DIR / "ernie-zoo-mini-zh")
    config = decoder_config(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=len(tok), bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        pad_token_id=tok.pad_token_id, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_decoder(config)
    path = tmp_path_factory.mktemp("decoder") / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _generate(model, tok, prompt: str, n: int, use_cache: bool = True) -> str:
    ids = torch.tensor([[tok.cls_token_id, *tok(prompt, add_special_tokens=False)["input_ids"]]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id, use_cache=use_cache)  # fmt: skip
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).replace(" ", "")


def test_taskflow_equals_generate_and_the_kv_cache_changes_nothing(decoder_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(decoder_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(decoder_dir)
    assert type(model).__name__ == "Ernie4_5ForCausalLM"
    results = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=12)(PROMPTS)
    for prompt, result in zip(PROMPTS, results):
        expected = _generate(model, tok, prompt, 12)
        assert result["generated"] == [expected]
        assert _generate(model, tok, prompt, 12, use_cache=False) == expected
        assert len(expected) > 0


def test_the_transformers_pipeline_gives_the_same_continuation(decoder_dir):
    tok = transformers.AutoTokenizer.from_pretrained(decoder_dir)
    pipe = transformers.pipeline("text-generation", model=str(decoder_dir), tokenizer=tok, device="cpu")
    ours = Taskflow("text_generation", task_path=decoder_dir, max_new_tokens=10)(PROMPTS)
    for prompt, result in zip(PROMPTS, ours):
        # the pipeline tokenizes with the tokenizer's special tokens ([CLS] prompt [SEP]); give it the ids Taskflow uses
        out = pipe(prompt, max_new_tokens=10, do_sample=False, return_full_text=False, add_special_tokens=False,
                   prefix=tok.cls_token)  # fmt: skip
        assert out[0]["generated_text"].replace(" ", "") == result["generated"][0]

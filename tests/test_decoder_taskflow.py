"""An ERNIE 4.5 decoder directory in Taskflow (#37 item 5, #39 item 3 for decoders): `Taskflow("text_generation",
task_path=DIR)` on transformers' Ernie4_5ForCausalLM with the zoo's character tokenizer gives what plain
`model.generate()` and `transformers.pipeline("text-generation")` give on the same weights (greedy, KV cache on),
and the KV cache does not change the greedy result."""

from __future__ import annotations

import pytest
import torch
import transformers

from ernie_zoo.models.decoder import build_decoder
from ernie_zoo.taskflow import Taskflow

PROMPTS = ["今天天气很好，", "据新华社报道，", "这家酒店的服务"]


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


@pytest.mark.slow
def test_full_size_ernie45_03b_replica_in_taskflow_and_serve(tmp_path):
    """#37: a random-weight replica of the real ERNIE-4.5-0.3B configuration (transformers' default Ernie4_5Config:
    18 layers, hidden 1024, 103,424-token vocabulary, 360.7M parameters) with a WordPiece vocabulary of that size
    (nothing is downloaded) runs in `Taskflow("text_generation", task_path=)` with `generate()`'s greedy output,
    streams the same text, and `ernie-zoo serve` answers it."""
    import threading

    from fastapi.testclient import TestClient
    from transformers import BertTokenizerFast, Ernie4_5Config

    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.serving.app import create_app
    from ernie_zoo.serving.config import ServeConfig

    config = preset_config("ernie4.5-0.3b")
    assert config.to_dict() == Ernie4_5Config().to_dict() and config.vocab_size == 103424
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]  # ids 0, 1, 2: the config's pad, bos, eos
    chars = [chr(c) for c in range(0x4E00, 0x9FA6)] + list("，。！？、；：“”（）0123456789")
    words = specials + chars
    words += [f"[unused{i}]" for i in range(config.vocab_size - len(words))]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    tok = BertTokenizerFast.from_pretrained(str(tmp_path))
    assert (tok.pad_token_id, tok.cls_token_id, tok.sep_token_id) == (
        config.pad_token_id,
        config.bos_token_id,
        config.eos_token_id,
    )
    torch.manual_seed(0)
    model = build_decoder(config)
    assert sum(p.numel() for p in model.parameters()) == 360_748_032
    path = tmp_path / "ernie-4.5-0.3b-replica"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([[tok.cls_token_id, *tok("今天天气很好，", add_special_tokens=False)["input_ids"]]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                         eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    expected = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).replace(" ", "")
    del model
    flow = Taskflow("text_generation", task_path=path, max_new_tokens=6)
    result = flow("今天天气很好，")
    assert result["generated"][0].replace(" ", "") == expected
    streamed = "".join(Taskflow("text_generation", task_path=path, max_new_tokens=6, stream=True)("今天天气很好，"))
    assert streamed == result["generated"][0]
    config = ServeConfig(tasks=["text_generation"], task_paths={"text_generation": str(path)})
    with TestClient(create_app(config)) as client:
        for _ in range(2400):
            if client.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        r = client.post("/v1/text_generation", json={"texts": ["今天天气很好，"], "options": {"max_new_tokens": 6}})
        assert r.status_code == 200 and r.json()["results"] == [result]

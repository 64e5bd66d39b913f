"""Shared fixtures: a tiny tokenizer trained on real sentences and tiny model configs (no network)."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(1)

DATA = Path(__file__).parent / "data"


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """`rows` as a JSONL file (UTF-8, one object per line); returns the path as a str (a CLI argument)."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def sentences() -> list[str]:
    return [line for line in (DATA / "zh_sentences.txt").read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture(scope="session")
def zh_sentences() -> list[str]:
    return sentences()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from ernie_zoo import ErnieZooTokenizerFast

    return ErnieZooTokenizerFast.train_vocab(
        sentences(), vocab_size=600, min_frequency=1, show_progress=False
    )


def tiny_config(tokenizer, **overrides):
    from ernie_zoo import ErnieZooConfig

    fields = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    fields.update(overrides)
    return ErnieZooConfig(**fields)


@pytest.fixture
def make_config(tiny_tokenizer):
    """`make_config(**overrides)` -> a tiny ErnieZooConfig matching `tiny_tokenizer`."""
    return lambda **overrides: tiny_config(tiny_tokenizer, **overrides)


@pytest.fixture(scope="session")
def decoder_dir(tmp_path_factory):
    """A random-weight ERNIE 4.5 decoder (transformers' Ernie4_5ForCausalLM, 2 layers of hidden 64) with the zoo's
    character tokenizer, saved as a from_pretrained directory (Taskflow, streaming and serving tests)."""
    import transformers

    from ernie_zoo.models.decoder import build_decoder, decoder_config
    from ernie_zoo.taskflow.models import ZOO_DIR

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


def load_recorder(name: str):
    """scripts/<name>.py as a module: a recorder with OUTPUT (the committed record), record() and dumps()."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_as_recorded(module, what: str, context: int = 2) -> None:
    """Fail with a diff (first 6,000 characters) where `module.record()` differs from its committed OUTPUT."""
    expected = module.OUTPUT.read_text(encoding="utf-8")
    actual = module.dumps(module.record())
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True),
                actual.splitlines(True),
                "recorded",
                "now",
                n=context,
                lineterm="\n",
            )
        )
        pytest.fail(f"{what} changed ({module.OUTPUT.name}):\n{diff[:6000]}")

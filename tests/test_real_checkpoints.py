"""Real Chinese BERT / ERNIE 3.0 checkpoints in Taskflow (#39 item 3): plain transformers directories (their own
config.json, vocab.txt, label names, no character features) in the layouts of nghuyong/ernie-3.0-*-zh and
hfl/chinese-roberta-wwm-ext. Nothing is downloaded: random-weight replicas of the real configurations are built
locally (a vocab.txt of special tokens and CJK characters padded to the real vocabulary size).

Checked: sentiment, NER, fill-mask and feature extraction run through `Taskflow(task, task_path=DIR)` with the
results `transformers.pipeline` gives on the same weights (labels, fill-mask candidates identical; scores and
embeddings within 1e-5); label names come from the checkpoint's id2label; `ernie-zoo export --onnx` exports them
and the onnxruntime backend gives the same results; the base-size replicas (ERNIE 3.0 base / medium,
RoBERTa-wwm-ext base) have the published parameter counts and run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.onnx import export_onnx

# config.json of the real checkpoints (architecture fields; vocabularies as published)
ERNIE3 = dict(model_type="ernie", vocab_size=40000, max_position_embeddings=2048, type_vocab_size=4,
              task_type_vocab_size=3, use_task_id=True, layer_norm_eps=1e-5, num_attention_heads=12)  # fmt: skip
CONFIGS = {
    "ernie-3.0-base-zh": dict(ERNIE3, hidden_size=768, num_hidden_layers=12, intermediate_size=3072),
    "ernie-3.0-medium-zh": dict(ERNIE3, hidden_size=768, num_hidden_layers=6, intermediate_size=3072),
    "ernie-3.0-mini-zh": dict(ERNIE3, hidden_size=384, num_hidden_layers=6, intermediate_size=1536),
    "chinese-roberta-wwm-ext": dict(
        model_type="bert",
        vocab_size=21128,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        type_vocab_size=2,
    ),  # fmt: skip
}
HEADS = {
    "sentiment_analysis": "ForSequenceClassification",
    "ner": "ForTokenClassification",
    "fill_mask": "ForMaskedLM",
    "feature_extraction": "Model",
}
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
DATA = Path(__file__).parent / "data"
TEXTS = [t for t in (DATA / "zh_sentences.txt").read_text(encoding="utf-8").splitlines() if t][:20]


def replica(name: str, task: str, root: Path, labels: list[str] | None = None) -> Path:
    """A random-weight directory of checkpoint `name` with the head of `task`."""
    fields = dict(CONFIGS[name])
    family = "Ernie" if fields.pop("model_type") == "ernie" else "Bert"
    config = getattr(transformers, f"{family}Config")(**fields)
    if task == "ner":
        labels = labels or TAGS
    elif task == "sentiment_analysis":
        labels = labels or ["negative", "positive"]
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {v: k for k, v in config.id2label.items()}
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}{HEADS[task]}")(config)
    out = root / f"{name}-{task}"
    vocab = root / f"{name}-vocab"
    if not vocab.is_dir():
        vocab.mkdir()
        specials = ["[PAD]", *[f"[unused{i}]" for i in range(1, 100)], "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        chars = [chr(c) for c in range(0x4E00, 0x9FA6)] + list(
            "，。！？、；：“”（）0123456789abcdefghijklmnopqrstuvwxyz"
        )
        words = (specials + chars)[: fields["vocab_size"]]
        words += [f"[unused{i}]" for i in range(100, 100 + fields["vocab_size"] - len(words))]
        (vocab / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    model.save_pretrained(out)
    transformers.BertTokenizer.from_pretrained(str(vocab)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    root = tmp_path_factory.mktemp("ernie3-mini")
    return {task: replica("ernie-3.0-mini-zh", task, root) for task in HEADS}


def test_sentiment_matches_the_transformers_pipeline(mini):
    ours = Taskflow("sentiment_analysis", task_path=mini["sentiment_analysis"])(TEXTS)
    pipe = transformers.pipeline("text-classification", model=str(mini["sentiment_analysis"]), device="cpu")
    theirs = pipe(TEXTS)
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    assert np.allclose([r["score"] for r in ours], [r["score"] for r in theirs], atol=1e-5)
    assert {r["label"] for r in ours} <= {"negative", "positive"}  # the checkpoint's own label names


def test_fill_mask_matches_the_transformers_pipeline(mini):
    texts = [t[:5] + "[MASK]" + t[6:] for t in TEXTS if len(t) > 8]
    ours = Taskflow("fill_mask", task_path=mini["fill_mask"], top_k=5)(texts)
    pipe = transformers.pipeline("fill-mask", model=str(mini["fill_mask"]), device="cpu", top_k=5)
    for a, b in zip(ours, pipe(texts)):
        assert [c["token"] for c in a["masks"][0]["candidates"]] == [
            c["token_str"].replace(" ", "") for c in b
        ]
        assert np.allclose(
            [c["score"] for c in a["masks"][0]["candidates"]], [c["score"] for c in b], atol=1e-5
        )


def test_feature_extraction_is_the_mean_of_the_hidden_states(mini):
    ours = Taskflow("feature_extraction", task_path=mini["feature_extraction"])(TEXTS)
    pipe = transformers.pipeline("feature-extraction", model=str(mini["feature_extraction"]), device="cpu")
    for a, b in zip(ours, pipe(TEXTS)):
        assert np.allclose(a["embedding"], np.mean(b[0], axis=0), atol=1e-5)  # mean over [CLS] .. [SEP]


def test_ner_reads_the_checkpoint_label_names(tmp_path):
    path = replica(
        "ernie-3.0-mini-zh", "ner", tmp_path, labels=["O", "B-PERSON", "I-PERSON", "B-GPE", "I-GPE"]
    )
    results = Taskflow("ner", task_path=path)(TEXTS)
    types = {e["type"] for r in results for e in r["entities"]}
    assert types and types <= {"PERSON", "GPE"}  # random weights tag something, in the checkpoint's own names
    for text, r in zip(TEXTS, results):
        assert all(text[e["start"] : e["end"]] == e["text"] for e in r["entities"])


@pytest.mark.slow
@pytest.mark.parametrize("task", list(HEADS))
def test_exported_plain_checkpoints_run_on_onnxruntime(mini, tmp_path, task):
    exported = export_onnx(mini[task], tmp_path / task)
    texts = [t[:5] + "[MASK]" + t[6:] for t in TEXTS] if task == "fill_mask" else TEXTS
    torch_results = Taskflow(task, task_path=mini[task])(texts)
    ort_results = Taskflow(task, task_path=exported, backend="onnxruntime", precision="fp32")(texts)
    if task == "feature_extraction":
        assert np.allclose(
            [r["embedding"] for r in torch_results], [r["embedding"] for r in ort_results], atol=1e-4
        )
    elif task == "sentiment_analysis":
        assert [r["label"] for r in torch_results] == [r["label"] for r in ort_results]
    elif task == "ner":
        assert [[e["text"] for e in r["entities"]] for r in torch_results] == [
            [e["text"] for e in r["entities"]] for r in ort_results
        ]
    else:
        assert [r["filled"] for r in torch_results] == [r["filled"] for r in ort_results]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, published",
    [("ernie-3.0-base-zh", 117.9e6), ("ernie-3.0-medium-zh", 75.4e6), ("chinese-roberta-wwm-ext", 102.3e6)],
)
def test_base_size_replicas_have_the_published_size_and_run(tmp_path, name, published):
    path = replica(name, "sentiment_analysis", tmp_path)
    model = transformers.AutoModel.from_pretrained(path)  # the encoder alone, as the published counts are
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(published, rel=0.01)
    results = Taskflow("sentiment_analysis", task_path=path)(TEXTS[:4])
    assert [r["label"] for r in results] and all(0.0 <= r["score"] <= 1.0 for r in results)


@pytest.mark.slow
def test_ernie3_base_lora_finetune_export_onnxruntime_serve_chain(tmp_path):
    """#39: a random-weight ERNIE 3.0 base replica through `ernie-finetune` (LoRA, a few steps) ->
    `Taskflow(task_path=)` -> `ernie-zoo export --onnx` -> `Taskflow(backend="onnxruntime")` -> `ernie-zoo serve
    --backend onnxruntime`: the same labels at every stop, scores within 1e-4 of torch."""
    import json
    import random

    from fastapi.testclient import TestClient

    from ernie_zoo.cli import main as cli_main
    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.serving.app import create_app
    from ernie_zoo.serving.config import ServeConfig

    base = replica("ernie-3.0-base-zh", "feature_extraction", tmp_path)
    rows = [json.loads(line) for line in (DATA / "finetune" / "sentiment.jsonl").read_text("utf-8").splitlines()]
    random.Random(0).shuffle(rows)
    files = {}
    for name, part in {"train": rows[:48], "dev": rows[48:64]}.items():
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    out = tmp_path / "finetuned"
    run_finetune(
        build_args(
            {
                "task": "sequence_classification",
                "data": {"train_file": str(files["train"]), "dev_file": str(files["dev"]), "max_length": 32},
                "model": {"model_name_or_path": str(base)},
                "method": {"method": "lora", "lora_r": 4},
                "train": {"output_dir": str(out), "batch_size": 8, "learning_rate": 1e-3, "max_steps": 3,
                          "progress": False, "num_threads": 2},
            }
        )
    )  # fmt: skip
    torch_flow = Taskflow("sentiment_analysis", task_path=out)
    expected = torch_flow(TEXTS)
    assert {r["label"] for r in expected} <= {"negative", "positive"}

    exported = tmp_path / "onnx"
    assert cli_main(["export", "--onnx", str(out), str(exported), "--int8", "false"]) == 0
    ort = Taskflow("sentiment_analysis", task_path=exported, backend="onnxruntime")(TEXTS)
    assert [r["label"] for r in ort] == [r["label"] for r in expected]
    assert np.allclose([r["score"] for r in ort], [r["score"] for r in expected], atol=1e-4)

    config = ServeConfig(
        tasks=["sentiment_analysis"], task_paths={"sentiment_analysis": str(exported)}, backend="onnxruntime"
    )
    with TestClient(create_app(config)) as client:
        for _ in range(1200):
            if client.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        served = client.post("/v1/sentiment_analysis", json={"texts": TEXTS})
        assert served.status_code == 200
        results = served.json()["results"]
        assert [r["label"] for r in results] == [r["label"] for r in expected]
        assert np.allclose([r["score"] for r in results], [r["score"] for r in expected], atol=1e-4)
        bad = client.post("/v1/sentiment_analysis", json={"texts": ["好"], "options": {"no_such_option": 1}})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_option"

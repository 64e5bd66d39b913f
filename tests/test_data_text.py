"""Text cleaning: normalisation, markup stripping, dedupe, Traditional -> Simplified (line splitting: test_text_sentences)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ernie_zoo.data.corpora import parse_fortunes
from ernie_zoo.data.text import (
    Deduper,
    clause_pairs,
    groff_to_paragraphs,
    han_count,
    html_to_paragraphs,
    iter_clean_lines,
    join_wrapped,
    normalize_text,
    opencc_to_simplified,
    strip_ansi,
)

DATA = Path(__file__).parent / "data"


def test_normalize_text_nfkc_whitespace_and_invisibles():
    assert normalize_text("ＡＢＣ１２３") == "ABC123"
    assert normalize_text("  你好\u3000\u3000世界\n\t!  ") == "你好 世界 !"
    assert normalize_text("零\u200b宽\ufeff字符\x07") == "零宽字符"
    assert normalize_text("豈") == "豈"  # U+F900 compatibility ideograph -> U+8C48
    assert normalize_text("\uf900") == "\u8c48"
    with pytest.raises(TypeError, match="expects str"):
        normalize_text(b"bytes")  # type: ignore[arg-type]


def test_strip_ansi():
    assert strip_ansi("\x1b[32m《送别》\x1b[m 作者\x1b[1;33m王维\x1b[0m") == "《送别》 作者王维"


def test_han_count():
    assert han_count("abc中文，123字") == 3


def test_iter_clean_lines_filters_short_and_non_chinese():
    paras = [
        "你好",
        "这是一句足够长的中文句子。",
        "An English sentence only.",
        "   ",
        "中 a b c d e f g h i j k",
    ]
    assert list(iter_clean_lines(paras)) == ["这是一句足够长的中文句子。"]
    # NFKC turns the full-width comma into ",", and the pieces are cut after one
    assert list(iter_clean_lines(["中文中文，" * 30], max_chars=40)) == ["中文中文," * 8] * 3 + [
        "中文中文," * 6
    ]


def test_join_wrapped():
    assert (
        join_wrapped(["很难避免遇到与你意见不和，或者难以合作", "的人。"])
        == "很难避免遇到与你意见不和，或者难以合作的人。"
    )
    assert join_wrapped(["use the", "command  ", "", "ls"]) == "use the command ls"


def test_deduper_exact():
    d = Deduper()
    assert [d.add(x) for x in ["甲乙", "甲乙", "甲 乙", "丙"]] == [True, False, True, True]
    assert "丙" in d and "丁" not in d and len(d) == 3


def test_clause_pairs():
    pairs = clause_pairs("床前明月光，疑是地上霜。举头望明月，低头思故乡。")
    assert pairs == {"床前明月光疑是地上霜", "疑是地上霜举头望明月", "举头望明月低头思故乡"}
    assert clause_pairs("床前明月光,疑是地上霜") == {"床前明月光疑是地上霜"}  # half-width punctuation too
    assert clause_pairs("短，句") == set()  # under min_han
    assert clause_pairs("一个没有标点的长句子") == {"一个没有标点的长句子"}


def test_to_simplified_sample():
    assert opencc_to_simplified("秦川雄帝宅，函谷壯皇居。綺殿千尋起，離宮百雉餘。") == (
        "秦川雄帝宅，函谷壮皇居。绮殿千寻起，离宫百雉余。"
    )
    assert opencc_to_simplified("舉頭望明月，低頭思故鄉。") == "举头望明月，低头思故乡。"
    assert opencc_to_simplified("简体保持不变") == "简体保持不变"


def test_groff_to_paragraphs_fixture():
    paras = groff_to_paragraphs((DATA / "manpage_sample.1").read_text(encoding="utf-8"))
    text = "\n".join(paras)
    assert "DO NOT MODIFY" not in text and ".TH" not in text and "\\f" not in text
    assert "ls - 列出目录内容" in paras
    # wrapped lines of one paragraph are joined without a space between CJK characters
    assert (
        "列出指定“文件”（默认为当前目录）的信息。如果既没有指定 -cftuvSUX 中任何一个，也没有指定 --sort，则按字母排序项目。"
        in paras
    )
    # .TP: the tag line and the description are separate paragraphs
    assert "-a, --all" in paras and "不要忽略以点号（“.”）起始的条目" in paras
    # .B stays inline (no space next to CJK); \(em becomes an em dash
    assert "选项-r可以用来阻止这种行为—这是注释之外的文字。" in paras
    assert "ls -l /tmp | head" in paras  # no-fill block kept as its own line
    assert "dir(1), vdir(1)" in paras


def test_html_to_paragraphs_fixture():
    paras = html_to_paragraphs((DATA / "help_sample.html").read_text(encoding="utf-8"))
    assert paras[0] == "启动自动更正"
    assert "使用自动更正更正了您的文字，用印刷引号替换了双引号&单引号。" in paras
    assert "选择「工具」-「自动更正」" in paras
    assert "说明文字比较长的一个单元格" in paras
    joined = "".join(paras)
    for chrome in ("不应出现的脚本文字", "LibreOffice 7.4 帮助", "搜索所有模块", "请支持我们"):
        assert chrome not in joined


def test_parse_fortunes_fixture():
    paras = list(parse_fortunes((DATA / "fortunes_sample").read_text(encoding="utf-8")))
    assert "\x1b" not in "".join(paras)
    assert paras[:3] == ["《送别》", "作者：王维", "下马饮君酒，问君何所之。君言不得意，归卧南山陲。"]
    assert (
        "在 Debian 这种规模的项目中，很难避免遇到与你意见不和，或者难以合作的人。请接受这一事实，并保持礼貌。"
        in paras
    )
    assert "-- Debian 《行为准则》第一条" in paras
    assert "《詩經‧國風》" in paras and "關關雎鳩，在河之洲。" in paras

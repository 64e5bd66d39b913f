"""Tests for ernie_zoo.tokenization.pinyin (context-aware per-character pinyin ids)."""

from __future__ import annotations

import importlib.util
import random
import threading
from pathlib import Path

import pytest
from pypinyin import Style, lazy_pinyin
from pypinyin.constants import RE_HANS
from pypinyin.seg.simpleseg import simple_seg

from ernie_zoo.tokenization import pinyin as P
from ernie_zoo.tokenization.pinyin import (
    NUM_TONES,
    batch_char_pinyin_ids,
    char_pinyin_ids,
    decode_pinyin_id,
    default_pinyin_id,
    encode_syllable,
    num_pinyin_ids,
    syllable_vocab,
)

REPO = Path(__file__).resolve().parents[1]

# Realistic sentences, rich in polyphonic characters (行 长 重 了 得 地 的 着 还 都 乐 觉 便 调 ...).
SENTENCES = [
    "中国银行行长今天在北京发表了重要讲话。",
    "他重新检查了一遍，觉得没有什么问题。",
    "我们周末去长城玩了一整天，累得不行。",
    "这家银行的行长是我大学同学。",
    "了解情况以后，他马上调整了计划。",
    "你好了没有？我们快要迟到了。",
    "重庆的火锅很有名，重量级的美食。",
    "小明长大以后想当一名医生。",
    "这条河很长，两岸种满了柳树。",
    "他的成长经历对我影响很大。",
    "音乐会上大家都很快乐。",
    "都市生活节奏快，大家都很忙。",
    "请把这本书还给图书馆，还有那张光盘。",
    "他睡觉的时候总是打呼噜。",
    "我觉得这个方案还可以再改进一下。",
    "便宜没好货，好货不便宜。",
    "会议的时间调到下午三点了。",
    "这首曲子的音调有点高。",
    "他在银行工作了十年，一直兢兢业业。",
    "行人请走人行横道。",
    "这个行业发展得很快。",
    "一行人浩浩荡荡地来到了山顶。",
    "数学考试他得了满分，大家都很佩服他。",
    "你得好好想想，不能再这样下去了。",
    "地上的落叶被风吹得到处都是。",
    "他慢慢地走到窗前，看着外面的雨。",
    "目的地还有多远？我们已经走了两个小时。",
    "的确，这是我见过最美的风景。",
    "着火了！大家赶快离开大楼。",
    "他着急地问医生病情怎么样。",
    "别着凉了，多穿一件衣服。",
    "我们在长江边上散步，聊了很久。",
    "参加比赛的人参差不齐。",
    "人参是一种名贵的中药材。",
    "这个问题很难回答，我需要时间考虑。",
    "他们一起度过了艰难的岁月。",
    "空调坏了，屋里热得要命。",
    "请你有空的时候给我回个电话。",
    "教室里空无一人，只有黑板上的字。",
    "老师教我们唱歌，大家学得很认真。",
    "这个数字不对，请再数一遍。",
    "他数落了我半天，我一句话也没说。",
    "处理这件事情需要耐心。",
    "他在办事处上班，离家很近。",
    "放假的时候我们去海边度假吧。",
    "这些消息真假难辨，要小心。",
    "房间里很安静，只听得见钟表的声音。",
    "中间那个人是我的哥哥。",
    "看守所的看门人很严格。",
    "他在看书，别打扰他。",
    "树叶落了一地，秋天到了。",
    "我把钥匙落在家里了。",
    "他没有钱，买不起那辆车。",
    "船慢慢地沉没在大海里。",
    "朝阳从东方升起，照亮了大地。",
    "唐朝是中国历史上一个强盛的朝代。",
    "他流了很多血，被送到了医院。",
    "你应该早点告诉我这件事。",
    "他应邀参加了开幕式。",
    "只要努力，就一定会成功。",
    "一只小鸟落在了窗台上。",
    "他打中了靶心，大家都为他鼓掌。",
    "中午我们在食堂吃饭。",
    "将来你想做什么工作？",
    "他是一位能征善战的将军。",
    "我们相互帮助，共同进步。",
    "他的相貌很英俊。",
    "当时我并不知道这件事。",
    "这件衣服很适当，价格也恰当。",
    "你估量一下这次要用多少材料。",
    "请给我一杯水，谢谢。",
    "公司给予他很高的评价。",
    "和平是全世界人民的共同愿望。",
    "他们一唱一和，配合得很默契。",
    "打麻将他总是和牌。",
    "这家工厂供应全市的牛奶。",
    "他在法庭上供认了全部罪行。",
    "这次考试的及格率很高。",
    "他率领队伍打了一场胜仗。",
    "他的头发长得很快，该理发了。",
    "我们明天出发去上海。",
    "墙角有一只小猫。",
    "他在戏里扮演一个重要的角色。",
    "这个模型做得很精致。",
    "他的模样很像他爸爸。",
    "这首歌的曲调很优美。",
    "弯弯曲曲的小路通向山顶。",
    "这张纸很薄，一撕就破。",
    "他的脸皮薄，不好意思开口。",
    "我要去超市买东西。",
    "政府要求各单位认真落实政策。",
    "西藏的风景非常壮观。",
    "他把钱藏在床底下了。",
    "他是一个很倔强的人。",
    "你不要勉强自己。",
    "他背着书包去上学。",
    "老师让我们背诵这首诗。",
    "他冲着我大喊了一声。",
    "水流冲走了小桥。",
    "大家都称赞他是个好人。",
    "这双鞋很合脚，很称心。",
    "这个大夫医术很高明。",
    "单于率领军队南下。",
    "今天的温度是二十五度。",
    "我们要揣度一下对方的意图。",
    "衣服晒干了，可以收起来了。",
    "他干活很卖力。",
    "天色更晚了，我们赶快回家吧。",
    "打更的人已经走了。",
    "飞机降落在机场。",
    "敌人终于投降了。",
    "他们结婚已经十年了。",
    "这棵树结了很多果子。",
    "请把这卷纸递给我。",
    "试卷发下来了，大家开始答题。",
    "这几天工作太累了。",
    "果实累累，今年是个丰收年。",
    "他露出了满意的笑容。",
    "清晨的草地上有很多露水。",
    "刀磨得很快。",
    "这台石磨已经用了几十年。",
    "宁可少睡一点，也要把作业做完。",
    "南京古称金陵，又称江宁。",
    "船停泊在港口。",
    "湖泊里的水很清澈。",
    "这真是一件奇怪的事情。",
    "七是一个奇数。",
    "路上塞车塞得很厉害。",
    "边塞的风光很壮美。",
    "他散步回来后就去睡了。",
    "这本书的内容很松散。",
    "我们要节省用水。",
    "他反省了自己的错误。",
    "他们长得很相似。",
    "这件事似的，谁也说不清。",
    "学生宿舍在校园的东边。",
    "他一宿没睡，眼睛都红了。",
    "请提前十分钟到达会场。",
    "他提着一桶水走过来。",
    "他吐了口痰，被人批评了。",
    "他吃坏了肚子，上吐下泻。",
    "削苹果的时候要小心手。",
    "削减开支是当务之急。",
    "他兴高采烈地跑回家。",
    "这个城市很兴旺。",
    "压力太大的时候要学会放松。",
    "压根儿就没有这回事。",
    "他哽咽着说不出话来。",
    "狼吞虎咽地吃完了饭。",
    "这辆卡车载重十吨。",
    "这本杂志连载了一部小说。",
    "他在手臂上扎了一针。",
    "他们在山脚下扎营。",
    "油价又涨了，大家都很无奈。",
    "他的脸涨得通红。",
    "他正在写作业，别打扰他。",
    "正月十五是元宵节。",
    "这块地属于国家所有。",
    "他转过身去，不再说话。",
    "车轮转得飞快。",
    "这部作品获得了很多奖项。",
    "他在作坊里做木工。",
    "他着手准备明天的演讲。",
    "天气预报说明天有雨，记得带伞。",
    "我们应该珍惜时间，努力学习。",
    "今天的晚饭是妈妈做的红烧肉。",
    "他在图书馆里看了一下午的书。",
    "这部电影讲述了一个感人的故事。",
    "医生建议他多喝水，多休息。",
    "孩子们在操场上踢足球。",
    "春天来了，花都开了。",
    "他每天早上六点起床跑步。",
    "我们的目标是建设一个美好的家园。",
    "经济发展需要稳定的社会环境。",
    "公司决定明年扩大生产规模。",
    "他在会上提出了一个重要的建议。",
    "这条新闻引起了社会的广泛关注。",
    "科学家们正在研究新的治疗方法。",
    "这家饭店的菜很好吃，价格也合理。",
    "他用了三年时间完成了这部小说。",
    "老人们在公园里下棋聊天。",
    "长辈们常说，吃亏是福。",
    "这孩子长得真快，一年长高了十公分。",
    "部长在会上强调了安全生产的重要性。",
    "队长带领我们赢得了比赛。",
    "董事长决定重组公司的业务部门。",
    "重复的工作让人觉得很无聊。",
    "这个箱子太重了，我搬不动。",
    "他们重逢时都流下了眼泪。",
    "了不起！你居然一个人完成了。",
    "事情了结以后，他终于松了一口气。",
    "他对这件事了如指掌。",
    "我们行不行啊？当然行！",
    "银行行长和行业专家一起出席了会议。",
]

_MIX_PIECES = [
    "",
    " ",
    "，",
    "ABC",
    "GPU",
    "2024年",
    "１２３",
    "ＡＢＣ",
    "😀",
    "👍🏻",
    "\n",
    "—",
    "《",
    "》",
    "3.14",
]


def _random_sentences(n: int = 200, seed: int = 1234) -> list[str]:
    """Seeded mixes of 1-3 sentences of SENTENCES with non-Han pieces in between."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 3)):
            parts.append(rng.choice(_MIX_PIECES))
            parts.append(rng.choice(SENTENCES))
        out.append("".join(parts))
    return out


def _reference_ids(text: str) -> list[int]:
    """pypinyin on the whole text, aligned to characters (non-Han -> '' -> 0)."""
    pys = lazy_pinyin(
        text,
        style=Style.TONE3,
        neutral_tone_with_five=True,
        v_to_u=False,
        errors=lambda chars: [""] * len(chars),
    )
    assert len(pys) == len(text)
    return [encode_syllable(p) for p in pys]


def _readings(text: str) -> list[str]:
    return [decode_pinyin_id(i) for i in char_pinyin_ids(text)]


# ----------------------------------------------------------------------------- vocabulary / codec


def test_vocab_header_sorted_and_complete():
    vocab = syllable_vocab()
    assert vocab[0] == "[NONE]"
    assert vocab[1:] == sorted(vocab[1:])
    assert len(set(vocab)) == len(vocab)
    for s in ["hang", "zhang", "chang", "lv", "nv", "lve", "nve", "m", "n", "ng", "hm", "hng", "ê", "er"]:
        assert s in vocab, s
    assert not any("ü" in s for s in vocab)


def test_num_pinyin_ids_matches_vocab():
    assert NUM_TONES == 6
    assert num_pinyin_ids() == len(syllable_vocab()) * NUM_TONES
    ids = [i for s in SENTENCES for i in char_pinyin_ids(s)]
    assert max(ids) < num_pinyin_ids()
    assert min(ids) >= 0


def test_vocab_file_is_reproducible():
    spec = importlib.util.spec_from_file_location(
        "build_pinyin_vocab", REPO / "scripts" / "build_pinyin_vocab.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build_vocab() == syllable_vocab()


def test_encode_decode_round_trip_all_syllables():
    vocab = syllable_vocab()
    seen = set()
    for idx, syl in enumerate(vocab[1:], start=1):
        for tone in range(NUM_TONES):
            s = syl + (str(tone) if tone else "")
            i = encode_syllable(s)
            assert i == idx * NUM_TONES + tone
            assert decode_pinyin_id(i) == s
            seen.add(i)
    assert len(seen) == (len(vocab) - 1) * NUM_TONES
    assert decode_pinyin_id(0) == ""
    assert encode_syllable("hang2") == vocab.index("hang") * 6 + 2


def test_encode_edge_cases():
    assert encode_syllable("") == 0
    assert encode_syllable("xyz3") == 0
    assert encode_syllable("hang7") == 0
    assert encode_syllable("lü4") == encode_syllable("lv4")
    with pytest.raises(ValueError):
        decode_pinyin_id(num_pinyin_ids())
    with pytest.raises(ValueError):
        decode_pinyin_id(-1)


# ----------------------------------------------------------------------------- context


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("银行行长", ["yin2", "hang2", "hang2", "zhang3"]),
        ("长城", ["chang2", "cheng2"]),
        ("重要", ["zhong4", "yao4"]),
        ("重新", ["chong2", "xin1"]),
        ("了解", ["liao3", "jie3"]),
        ("好了", ["hao3", "le5"]),
        ("银行", ["yin2", "hang2"]),
        ("行人", ["xing2", "ren2"]),
        ("女绿略虐", ["nv3", "lv4", "lve4", "nve4"]),
    ],
)
def test_polyphonic_examples(text, expected):
    assert _readings(text) == expected


def test_context_inside_longer_text():
    text = "Hi! 中国银行行长说：重新了解长城，很重要。好了。"
    got = dict(zip(text, _readings(text)))
    r = _readings(text)
    assert r[text.index("行长")] == "hang2" and r[text.index("行长") + 1] == "zhang3"
    assert r[text.index("银行") + 1] == "hang2"
    assert r[text.index("重新")] == "chong2"
    assert r[text.index("重要")] == "zhong4"
    assert r[text.index("了解")] == "liao3"
    assert r[text.index("好了") + 1] == "le5"
    assert r[text.index("长城")] == "chang2"
    assert got["H"] == got["!"] == got["："] == ""


def test_default_pinyin_id_is_context_free():
    assert decode_pinyin_id(default_pinyin_id("行")) == "xing2"
    assert decode_pinyin_id(default_pinyin_id("长")) == "zhang3"
    assert decode_pinyin_id(default_pinyin_id("了")) == "le5"
    assert default_pinyin_id("a") == 0
    assert default_pinyin_id("😀") == 0
    for ch in "中国银行行长重了的":
        assert default_pinyin_id(ch) == _reference_ids(ch)[0]
    with pytest.raises(ValueError):
        default_pinyin_id("中国")
    with pytest.raises(ValueError):
        default_pinyin_id("")


def test_traditional_characters():
    assert _readings("銀") == ["yin2"]
    assert _readings("說話") == ["shuo1", "hua4"]
    assert _readings("國家") == ["guo2", "jia1"]
    assert _readings("學習語言") == ["xue2", "xi2", "yu3", "yan2"]
    # Outside phrases a Traditional char keeps its own reading, not its Simplified form's default.
    assert _readings("髮") == ["fa4"]  # 发 defaults to fa1
    assert _readings("三隻") == ["san1", "zhi1"]  # 只 defaults to zhi3


def test_traditional_phrase_context():
    # pypinyin's phrase dictionary is Simplified only: lazy_pinyin gives 銀行 -> yin2 xing2.
    assert [decode_pinyin_id(i) for i in _reference_ids("銀行")] == ["yin2", "xing2"]
    assert _readings("銀行") == ["yin2", "hang2"]
    assert _readings("銀行行長") == ["yin2", "hang2", "hang2", "zhang3"]
    assert _readings("行長") == ["hang2", "zhang3"]  # 長 alone is not context-sensitive in pypinyin
    assert _readings("頭髮長了") == ["tou2", "fa4", "zhang3", "le5"]
    assert _readings("記得") == ["ji4", "de5"]
    assert [decode_pinyin_id(i) for i in _reference_ids("記得")] == ["ji4", "de2"]
    assert _readings("一個") == ["yi2", "ge4"]
    assert _readings("銀行行长") == _readings("银行行长")  # mixed scripts in one run
    # pypinyin's few phrases written with Traditional chars still win over the converted form
    assert _readings("漢藏") == ["han4", "zang4"]  # 汉藏 would not be a phrase: cang2


def test_pypinyin_phrases_with_traditional_chars_unchanged():
    from ernie_zoo.text.traditional import traditional_chars

    phrases = [p for p in P.PHRASES_DICT if not traditional_chars().isdisjoint(p)]
    assert len(phrases) > 20
    for phrase in phrases:
        assert char_pinyin_ids(phrase) == _reference_ids(phrase), phrase


def test_traditional_text_matches_its_simplified_form_in_phrases():
    """Every Traditional sentence gets the readings of its Simplified form, except outside phrases."""
    from ernie_zoo.text.traditional import to_simplified

    trad = "中國銀行行長今天在北京發表了重要講話，他重新檢查了一遍，覺得沒有什麼問題。"
    simp = to_simplified(trad)
    assert simp == "中国银行行长今天在北京发表了重要讲话，他重新检查了一遍，觉得没有什么问题。"
    assert char_pinyin_ids(trad) == char_pinyin_ids(simp) == _reference_ids(simp)
    # the same text with one Traditional char at a run edge, then served from the run cache
    text = "A銀行行長B" * 2
    assert [decode_pinyin_id(i) for i in char_pinyin_ids(text)][1:5] == ["yin2", "hang2", "hang2", "zhang3"]
    assert char_pinyin_ids(text) == char_pinyin_ids(text)


def test_traditional_sensitive_set():
    tables = P._tables()
    assert {"行", "長", "還"} <= tables.sensitive  # 長/還 via 长/还 in phrases with other readings
    assert "銀" not in tables.sensitive  # 银 has one reading everywhere
    assert "銀" in tables.traditional and "银" not in tables.traditional
    assert tables.sensitive.isdisjoint("我你他它") and "a" not in tables.sensitive


def test_jieba_presegmentation_would_break_context():
    """Documented choice: pypinyin's own segmenter, not jieba words (银行行长 is one jieba word)."""
    jieba = pytest.importorskip("jieba")
    words = jieba.lcut("银行行长")
    if words == ["银行行长"]:
        assert lazy_pinyin(words, style=Style.TONE3)[1] == "xing2"
    assert _readings("银行行长")[1:3] == ["hang2", "hang2"]


# ----------------------------------------------------------------------------- non-Han / alignment


def test_non_han_is_zero():
    text = "abc XYZ 123，。！？、；：“”（）《》ＡＢＣ１２３ａｂｃ\t\n\u3000😀👍🏻—…€%@#"
    assert char_pinyin_ids(text) == [0] * len(text)


def test_alignment_with_emoji_and_full_width():
    text = "我😀爱ＡＢＣ１２３北京👨‍👩‍👧！"
    ids = char_pinyin_ids(text)
    assert len(ids) == len(text)
    assert [decode_pinyin_id(i) for i in ids[:3]] == ["wo3", "", "ai4"]
    assert ids[3:9] == [0] * 6
    assert [decode_pinyin_id(i) for i in ids[9:11]] == ["bei3", "jing1"]
    assert ids[11:] == [0] * (len(text) - 11)
    assert len("😀") == 1  # one Python char even though UTF-16 needs a surrogate pair


def test_astral_han_character():
    text = "𠀀a𠀀"  # U+20000, CJK Extension B, outside the BMP
    ids = char_pinyin_ids(text)
    assert len(ids) == 3 and ids[1] == 0
    assert ids == _reference_ids(text)


def test_empty_and_types():
    assert char_pinyin_ids("") == []
    assert batch_char_pinyin_ids([]) == []
    assert batch_char_pinyin_ids(["", "a", "中"]) == [[], [0], char_pinyin_ids("中")]
    with pytest.raises(TypeError):
        char_pinyin_ids(["中"])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- equality with pypinyin


def test_equal_to_lazy_pinyin_on_sentences():
    P.clear_caches()
    for text in SENTENCES:
        assert char_pinyin_ids(text) == _reference_ids(text), text


def test_equal_to_lazy_pinyin_on_random_sentences():
    texts = _random_sentences()
    assert len(texts) == 200
    got = batch_char_pinyin_ids(texts)
    for text, ids in zip(texts, got):
        assert len(ids) == len(text)
        assert ids == _reference_ids(text), text
    # second pass is served from the caches and must not change anything
    assert batch_char_pinyin_ids(texts) == got


def test_han_runs_match_pypinyin_split():
    text = "".join(_random_sentences(20, seed=7))
    tables = P._tables()
    runs = [text[a:b] for a, b in P._han_runs(text, tables.han_run)]
    assert tables.han_run is not None
    assert runs == [chunk for chunk in simple_seg(text) if RE_HANS.match(chunk)]
    assert [text[a:b] for a, b in P._han_runs(text, None)] == runs  # fallback path


def test_context_sensitive_set():
    sensitive = P._tables().sensitive
    assert {"行", "长", "重", "了"} <= sensitive
    assert "宜" in sensitive  # single reading yí, but 便宜 -> yi5
    assert "我" not in sensitive and "a" not in sensitive


def test_thread_safety():
    texts = _random_sentences(80, seed=99)
    expected = [_reference_ids(t) for t in texts]
    P.clear_caches()
    results: list[list[list[int]] | None] = [None] * 8
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        try:
            barrier.wait()
            order = texts[k % 3 :] + texts[: k % 3]
            out = batch_char_pinyin_ids(order)
            results[k] = out[len(texts) - k % 3 :] + out[: len(texts) - k % 3]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out in results:
        assert out == expected

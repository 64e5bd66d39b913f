"""The training mix of the default information-extraction model (issue #48, first part): MSRA's entities asked under
several Chinese type names each, with negative prompts, written as UIE prompt-example JSONL that
`ernie-finetune --task information_extraction` reads as it is (recipes/zoo/ie-mini.yaml).

    PER -> 人物 / 人名 / 姓名      LOC -> 地点 / 地名 / 位置      ORG -> 机构 / 组织 / 机构名
    held out (never trained, for zero-shot): PER 人, LOC 地方, ORG 单位

Each sentence asks each of the three types once, under one of its names drawn by a hash seeded with `seed` (so every
name is seen about equally): a type with mentions in the sentence is a positive prompt, one without is a negative
prompt (nothing to find). A negative never uses another name of a type the sentence has, so the model never learns
"人名 finds nothing where 人物 finds 李明".

    <out>/train.jsonl, dev.jsonl     from MSRA train / our seeded dev split of it (data/labelled.py), trained names
    <out>/test.jsonl                 MSRA test, trained names
    <out>/test_unseen.jsonl          MSRA test, held-out names (zero-shot on type names)

Texts of the repository's exclude lists (`ernie_zoo.data.corpora.EXCLUDE_FILES`: the hand-labelled relation set
`data/eval/relations`, whose sentences are MSRA training text) are dropped from train.jsonl and dev.jsonl, with the clause-pair rule
of the pretraining corpus (the MSRA test files stay the public test, whole).

Two types and two relations come from rules over the same sentences (silver labels; the model card says so):

    时间  dates and times (`TIME_PATTERN`: 1998年3月5日, 九八年, 今年3月, 昨天下午, 八十年代, 10时30分)
    金额  sums of money (`MONEY_PATTERN`: 3.5亿元, 五十万美元)
          a positive prompt where the pattern matches; a negative only in a sentence with no digit, no Chinese
          numeral and none of 年月日号时点天元今昨晨晚午 明天/明年/明日/明晨 (so a date the pattern misses is never taught as "nothing")
    <人物>的职务, <人物>的任职机构
          an MSRA person right after a post from `POSTS` (副/常务/代理 kept inside, as the relation set's guide
          says): 职务 = the post; 任职机构 = an MSRA organisation right before the post (中共中央总书记江泽民)

With `relations` (off by default: the mix the shipped ernie-zoo-e5-ie v1 / v2 trained on is without it), more
relation prompts, so that a relation the model was never shown stops being answered with whatever span of the right
type is near (the relation set's zero-shot triples were 1,883 predicted for 328 gold):

    <人物>的国籍      positive: a country of `COUNTRIES` (an MSRA place), then a national post of `NATIONAL_POSTS`,
                      then the person (俄罗斯总统叶利钦 -> 俄罗斯; not after 驻: 中国驻韩国大使 is not 韩国's)
    negatives         a relation of `RELATION_OBJECTS` asked of an MSRA person or organisation of the sentence that
                      cannot hold it there: its object type is absent (no MSRA organisation: no 毕业院校 / 任职机构;
                      no place: no 国籍 / 籍贯 / 出生地 / 所在地; no person: no 创始人; no number or time word: no
                      出生日期 / 成立时间), or the relation is one the labelling guide (data/eval/relations/GUIDE.md)
                      takes only as stated and the sentence has none of its cue words (`RELATION_CUES`: 毕业院校
                      without 毕业 / 就读 / 考入 / ...; 创始人, 成立时间, 出生地, 出生日期 likewise); one such prompt per
                      sentence and subject type, the relation and the subject drawn by the seeded hash

The entity lexicons' types (jieba nr/ns/nt/nz, jionlp places) and dictionary entries of #48 item 2 are not in this mix.

    python -m ernie_zoo.data.extraction_mix --out ~/.cache/ernie_zoo/datasets/extraction
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ernie_zoo.recipe_cli import command_main
from ernie_zoo.text.extraction import relation_prompt

from .annotations import PromptExample, write_prompt_examples
from .corpora import HeldOut
from .labelled import DEFAULT_DATASETS, load_split
from .text import normalize_text

logger = logging.getLogger(__name__)

#: MSRA's types under the names the model is trained on
TYPE_NAMES: dict[str, tuple[str, ...]] = {
    "PER": ("人物", "人名", "姓名"),
    "LOC": ("地点", "地名", "位置"),
    "ORG": ("机构", "组织", "机构名"),
}
#: names never trained on, for zero-shot evaluation of type names
HELD_OUT_NAMES: dict[str, tuple[str, ...]] = {"PER": ("人",), "LOC": ("地方",), "ORG": ("单位",)}


_YEAR = r"(?:[0-9]{2,4}|[〇○零一二三四五六七八九]{2,4})年"
_MONTH = r"(?:1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])月(?:份)?"
_DAY = r"(?:3[01]|[12][0-9]|0?[1-9]|三十一?|二?十[一二三四五六七八九]?|[一二三四五六七八九])[日号]"
_CLOCK = (
    r"(?:[0-9]{1,2}|[一二三四五六七八九十]{1,3})(?:时|点)(?:[0-9]{1,2}分|[一二三四五六七八九十]{1,3}分|半)?"
)
_RELATIVE = r"(?:今年|去年|明年|前年|今天|昨天|明天|前天|今日|昨日|今晨|昨晚|今晚|本月|上月|下月|当天|上午|下午|晚上|凌晨|中午|傍晚|清晨|早晨|夜间)"
_DECADE = r"(?:[0-9]{2,4}|[〇○零一二三四五六七八九十]+)(?:世纪|年代)(?:初|末|中期|以来)?"
_PART = rf"(?:{_DECADE}|{_YEAR}(?:初|底|末)?|{_MONTH}(?:初|底|中旬|上旬|下旬)?|{_DAY}|{_CLOCK}|{_RELATIVE})"
#: 时间 (silver): one span per run of adjacent date/time parts
TIME_PATTERN = re.compile(rf"{_PART}+")
#: 金额 (silver): a number, its magnitude and a currency
MONEY_PATTERN = re.compile(
    r"(?:[0-9]+(?:\.[0-9]+)?|[一二三四五六七八九十百千万亿两]+)多?(?:[十百千万亿]+)?多?"
    r"(?:元|美元|日元|港元|港币|英镑|马克|法郎|卢布|欧元|台币|韩元)"
)
#: the sentences where a 时间 / 金额 negative prompt is safe: none of these characters
_NUMERIC = re.compile(r"[0-9〇○零一二三四五六七八九十百千万亿两年月日号时点天元今昨晨晚午]|明[天年日晨]")
#: posts a person can hold, for the 职务 / 任职机构 relations (longest first when matching)
POSTS = tuple(
    sorted(
        """主席 总理 总统 首相 部长 外长 外交部长 国防部长 书记 总书记 委员长 主任 院长 校长 局长 省长 市长 县长 区长
        乡长 镇长 村长 董事长 总经理 经理 厂长 社长 秘书长 大使 总领事 司令员 司令 政委 参谋长 主编 总编辑 教练
        主教练 队长 会长 理事长 教授 研究员 记者 议长 国务卿 发言人 总干事 总裁 团长 军长 师长 处长 所长 检察长
        庭长 行长 州长 国王 女王 总督 总参谋长 党魁 领导人 特使 专员 常委 委员 代表""".split(),
        key=len,
        reverse=True,
    )
)
_POST = re.compile("(?:副|常务|代理|代)?(?:" + "|".join(POSTS) + ")")
#: the silver types and their prompt names
RULE_TYPES: dict[str, re.Pattern] = {"时间": TIME_PATTERN, "金额": MONEY_PATTERN}

#: countries (full names as MSRA writes them) for the 国籍 rule; abbreviations (美, 华) are left out: 驻华, 中美
COUNTRIES = frozenset(
    """中国 美国 俄罗斯 英国 法国 德国 日本 韩国 朝鲜 印度 巴基斯坦 以色列 埃及 意大利 伊朗 伊拉克 南非 印度尼西亚
    智利 乌克兰 西班牙 哈萨克斯坦 泰国 阿联酋 斯里兰卡 加拿大 孟加拉国 瑞典 墨西哥 马来西亚 埃塞俄比亚 南斯拉夫 奥地利
    土耳其 巴西 阿根廷 澳大利亚 新西兰 荷兰 比利时 瑞士 挪威 丹麦 芬兰 波兰 捷克 匈牙利 罗马尼亚 保加利亚 希腊 葡萄牙
    爱尔兰 越南 老挝 柬埔寨 缅甸 菲律宾 新加坡 蒙古 尼泊尔 阿富汗 沙特阿拉伯 叙利亚 约旦 黎巴嫩 科威特 卡塔尔 也门
    阿尔及利亚 摩洛哥 突尼斯 利比亚 苏丹 尼日利亚 肯尼亚 坦桑尼亚 津巴布韦 古巴 秘鲁 哥伦比亚 委内瑞拉 白俄罗斯
    格鲁吉亚 亚美尼亚 阿塞拜疆 乌兹别克斯坦 吉尔吉斯斯坦 塔吉克斯坦 土库曼斯坦 斯洛伐克 斯洛文尼亚 克罗地亚 马其顿
    立陶宛 拉脱维亚 爱沙尼亚 摩尔多瓦 冰岛 卢森堡 巴勒斯坦""".split()
)
#: posts held for a country (its head of state, government or diplomacy): the holder is the country's national
NATIONAL_POSTS = tuple("总统 总理 首相 副总统 副总理 外长 外交部长 国防部长 国务卿 国王 女王 大使 特使".split())
_NATIONAL_POST = re.compile("|".join(sorted(NATIONAL_POSTS, key=len, reverse=True)))
#: a relation's subject type and object type (MSRA's PER/LOC/ORG; TIME: a number or time word, `_NUMERIC`)
RELATION_OBJECTS: dict[str, tuple[str, str]] = {
    "毕业院校": ("PER", "ORG"),
    "任职机构": ("PER", "ORG"),
    "国籍": ("PER", "LOC"),
    "籍贯": ("PER", "LOC"),
    "出生地": ("PER", "LOC"),
    "出生日期": ("PER", "TIME"),
    "所在地": ("ORG", "LOC"),
    "创始人": ("ORG", "PER"),
    "成立时间": ("ORG", "TIME"),
}
#: relations the labelling guide takes only as stated, and the words that state them
RELATION_CUES: dict[str, re.Pattern] = {
    "毕业院校": re.compile(
        "毕业|就读|考入|考取|读书|求学|进修|留学|学习|学成|肄业|攻读|学生|校友|学员|研究生|本科|博士|硕士"
    ),
    "创始人": re.compile("创办|创立|创建|创始|成立|建立|组建|发起|开办|兴办|筹建|缔造|始建|建起"),
    "成立时间": re.compile("成立|创办|创立|创建|建立|组建|开办|兴办|筹建|始建|建于|建成|诞生|问世|开业|挂牌"),
    "出生地": re.compile("出生|生于|诞生|降生|出世|生长|老家|家乡|故乡"),
    "出生日期": re.compile("出生|生于|诞生|降生|出世|生日|岁"),
}


def rule_prompt_examples(records: Iterable[dict[str, Any]]) -> Iterator[PromptExample]:
    """Per MSRA record the 时间 / 金额 prompts of the rules and the 职务 / 任职机构 relation prompts of the post rule
    (module docstring): positives where a rule finds something, negatives only where nothing could be missed."""
    for record in records:
        text = record["text"]
        for name, pattern in RULE_TYPES.items():
            spans = tuple(m.span() for m in pattern.finditer(text))
            if spans or not _NUMERIC.search(text):
                yield PromptExample(name, text, spans)
        entities = sorted({(e["start"], e["end"], e["type"]) for e in record["entities"]})
        by_end = {end: (start, kind) for start, end, kind in entities}
        for start, end, kind in entities:
            if kind != "PER":
                continue
            post = next((m for m in _POST.finditer(text, max(0, start - 8), start) if m.end() == start), None)
            if post is None:
                continue
            person = text[start:end]
            yield PromptExample(relation_prompt(person, "职务"), text, (post.span(),))
            org = by_end.get(post.start())
            if org is not None and org[1] == "ORG":
                yield PromptExample(relation_prompt(person, "任职机构"), text, ((org[0], post.start()),))


def relation_prompt_examples(records: Iterable[dict[str, Any]], seed: int = 0) -> Iterator[PromptExample]:
    """Per MSRA record the 国籍 positives of the national-post rule and at most one negative relation prompt per
    subject type (module docstring, `relations`)."""
    for record in records:
        text = record["text"]
        entities = sorted({(e["start"], e["end"], e["type"]) for e in record["entities"]})
        present = {kind for _, _, kind in entities} | ({"TIME"} if _NUMERIC.search(text) else set())
        for (a_start, a_end, a_kind), (p_start, p_end, p_kind) in zip(entities, entities[1:]):
            if a_kind != "LOC" or p_kind != "PER" or text[a_start:a_end] not in COUNTRIES:
                continue
            if text[max(0, a_start - 1) : a_start] == "驻" or not _NATIONAL_POST.fullmatch(
                text[a_end:p_start]
            ):
                continue
            yield PromptExample(relation_prompt(text[p_start:p_end], "国籍"), text, ((a_start, a_end),))
        for subject_kind in ("PER", "ORG"):
            subjects = sorted({text[s:e] for s, e, kind in entities if kind == subject_kind})
            impossible = [
                relation
                for relation, (kind, object_kind) in RELATION_OBJECTS.items()
                if kind == subject_kind
                and (
                    object_kind not in present
                    or (relation in RELATION_CUES and not RELATION_CUES[relation].search(text))
                )
            ]
            if not subjects or not impossible:
                continue
            subject = _pick(subjects, seed, f"{text}\0{subject_kind}\0subject")
            if any(subject in other and subject != other for other in subjects):
                continue  # 李 inside 李明: asking 李's relation would be ambiguous
            relation = _pick(impossible, seed, f"{text}\0{subject_kind}\0relation")
            yield PromptExample(relation_prompt(subject, relation), text, ())


def _pick(names: Sequence[str], seed: int, key: str) -> str:
    digest = hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest()
    return names[int.from_bytes(digest, "big") % len(names)]


def msra_prompt_examples(
    records: Iterable[dict[str, Any]], names: dict[str, Sequence[str]] = TYPE_NAMES, seed: int = 0
) -> Iterator[PromptExample]:
    """Per MSRA record (`{"text", "entities": [{"start", "end", "type"}]}`) one prompt per type of `names`, under a
    name drawn for (sentence, type): its mentions, or none (a negative prompt)."""
    for record in records:
        text = record["text"]
        for kind, choices in names.items():
            spans = sorted({(e["start"], e["end"]) for e in record["entities"] if e["type"] == kind})
            yield PromptExample(_pick(choices, seed, f"{text}\0{kind}"), text, tuple(spans))


def build_extraction_mix(
    out: Path,
    datasets: Path = DEFAULT_DATASETS,
    seed: int = 0,
    exclude_files: Iterable[str | Path] | None = None,
    rules: bool = True,
    relations: bool = False,
) -> dict[str, int]:
    """Write the mix (see the module docstring) from the prepared MSRA splits, without the texts of
    ``exclude_files`` (default: the repository's exclude lists), with the rule prompts unless ``rules`` is false,
    with the 国籍 and negative relation prompts when ``relations``; returns the examples per file and, under
    ``dropped_heldout``, how many sentences the exclude lists removed."""
    held = HeldOut.from_exclude_files(exclude_files)
    counts = {"dropped_heldout": 0}
    for name, split, names in (
        ("train", "train", TYPE_NAMES),
        ("dev", "dev", TYPE_NAMES),
        ("test", "test", TYPE_NAMES),
        ("test_unseen", "test", HELD_OUT_NAMES),
    ):
        records = []
        for record in load_split("ner", split, datasets):
            if split != "test" and held.contains(normalize_text(record["text"])):
                counts["dropped_heldout"] += 1
            else:
                records.append(record)
        examples = []  # a sentence's prompts together, so a file's first N rows hold every kind of prompt
        for record in records:
            examples += msra_prompt_examples([record], names, seed)
            if rules and name != "test_unseen":
                examples += rule_prompt_examples([record])
            if relations and name != "test_unseen":
                examples += relation_prompt_examples([record], seed)
        counts[name] = write_prompt_examples(out / f"{name}.jsonl", examples)
        logger.info("%s: %d prompt examples", out / f"{name}.jsonl", counts[name])
    return counts


@dataclass
class Args:
    """Build the information-extraction training mix (MSRA under several type names) as UIE prompt JSONL."""

    out: Path = DEFAULT_DATASETS / "extraction"
    """Directory to write train/dev/test/test_unseen.jsonl to."""
    datasets: Path = DEFAULT_DATASETS
    """The prepared labelled sets (scripts/prepare_corpora.py --sources msra), holding ner/{train,dev,test}.jsonl."""
    seed: int = 0
    """Seed of the type-name draw."""
    rules: bool = True
    """Add the rule-labelled 时间 / 金额 prompts and 职务 / 任职机构 relation prompts (module docstring)."""
    relations: bool = False
    """Add the 国籍 rule's prompts and negative relation prompts (module docstring; write them to another --out)."""


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    build_extraction_mix(
        args.out.expanduser(),
        args.datasets.expanduser(),
        args.seed,
        rules=args.rules,
        relations=args.relations,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(Args, run, "python -m ernie_zoo.data.extraction_mix", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())

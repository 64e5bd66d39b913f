"""Entity lexicon features: matching, the file format, the builder's parsing, the CRF tagger's lexicon input,
saving/loading with the model, Taskflow, and fine-tuning that learns from lexicon matches alone."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from test_finetune_loop import _ner_args  # a CRF tagger of the small random model the fine-tuning tests train

from ernie_zoo.data.lexicon import jieba_entities, jionlp_locations
from ernie_zoo.finetune import build_args, load_finetuned, run_finetune
from ernie_zoo.finetune.export import unwrap
from ernie_zoo.models.crf_tagger import LEXICON_FILE, ErnieZooForTokenClassificationCRF
from ernie_zoo.text.lexicon import EntityLexicon

TYPES = ("PER", "LOC", "ORG")


@pytest.fixture
def lexicon():
    return EntityLexicon(
        {
            "北京": {"LOC"},
            "北京市": {"LOC"},
            "王小明": {"PER"},
            "新华社": {"ORG"},
            "华社": {"PER"},
            "京": {"LOC"},
        },
        TYPES,
        min_length=2,  # as the zoo's lexicon is built
    )


def test_matches_mark_begin_inside_end_per_type_and_overlap(lexicon):
    feats = [lexicon.describe(f) for f in lexicon.char_features("王小明在北京市新华社")]
    assert feats == [
        "PER-B",
        "PER-M",
        "PER-E",
        "",
        "LOC-B",  # 北京 and 北京市 both begin here
        "LOC-M,LOC-E",  # 京 ends 北京 and is inside 北京市; the one-character word 京 was dropped
        "LOC-E",
        "ORG-B",
        "PER-B,ORG-M",  # 华社 (PER) overlaps 新华社 (ORG)
        "PER-E,ORG-E",
    ]
    assert "京" not in lexicon and len(lexicon) == 5
    kept = EntityLexicon(
        {"京": {"LOC"}, "北京": {"LOC"}}, TYPES
    )  # min_length 1 keeps 京, which still marks nothing
    assert "京" in kept and [kept.describe(f) for f in kept.char_features("京北京")] == ["", "LOC-B", "LOC-E"]
    assert lexicon.num_features == 9


def test_a_match_never_runs_past_the_end_of_the_text(lexicon):
    # "北京" at the end: the 3-character candidate slice is only 2 characters long and must not match 北京
    # as if it were 北京市 (it once wrote past the end of the feature list).
    assert [lexicon.describe(f) for f in lexicon.char_features("到北京")] == ["", "LOC-B", "LOC-E"]
    assert lexicon.char_features("") == []


def test_traditional_text_matches_the_simplified_lexicon(lexicon):
    assert lexicon.char_features("新華社") == lexicon.char_features("新华社") != [0, 0, 0]


def test_token_features_or_the_characters_and_skip_special_tokens(lexicon):
    text = "王小明"
    offsets = [(0, 0), (0, 1), (1, 3), (0, 0)]  # [CLS] 王 小明 [SEP]
    out = lexicon.token_features(text, offsets, special=[1, 0, 0, 1])
    per_b, per_m, per_e = 1, 2, 4
    assert out == [0, per_b, per_m | per_e, 0]
    assert lexicon.token_features(text, [None, (0, 1)]) == [0, per_b]


def test_save_load_roundtrip_and_clear_errors(lexicon, tmp_path):
    path = tmp_path / LEXICON_FILE
    lexicon.save(path)
    again = EntityLexicon.load(path)
    assert again.types == TYPES and again.words == lexicon.words
    again.save(tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_bytes() == path.read_bytes()  # sorted: a stable checksum

    plain = tmp_path / "plain.txt"  # entity masking's plain list: the types are the names it uses, sorted
    plain.write_text("# masking entities\n北京\tLOC\n新华社 ORG\n长江\n", encoding="utf-8")
    assert EntityLexicon.load(plain).types == ("LOC", "ORG")
    assert dict(EntityLexicon.load(plain).entries()) == {"北京": ("LOC",), "新华社": ("ORG",), "长江": ()}

    bad = tmp_path / "bad.txt"
    bad.write_text("# ernie-zoo entity lexicon: PER LOC\n北京 LOC\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected"):
        EntityLexicon.load(bad)
    bad.write_text("# ernie-zoo entity lexicon: PER LOC\n北京\tGPE\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt:2: lexicon word '北京' has type 'GPE', not one of"):
        EntityLexicon.load(bad)
    with pytest.raises(ValueError, match="distinct"):
        EntityLexicon({}, ["PER", "PER"])


def test_builder_reads_jieba_tags_and_jionlp_levels():
    words = jieba_entities("江泽民 100 nr\n北京 200 ns\n新华社 50 nt\n高兴 300 a\n奥尔布赖特 3 nrt\n")
    assert words == {"江泽民": {"PER"}, "北京": {"LOC"}, "新华社": {"ORG"}, "奥尔布赖特": {"PER"}}
    china = "上海市\t310000\t上海\n\t上海市\t310000\t上海\n\t\t嘉定区\t310114\t嘉定\n\t\t\t华亭镇\n\t\t\t\t北新村\n"
    world = "亚洲:\n日本\t日本国\t东京\t大阪/京都\n"
    names = jionlp_locations(china, world)
    assert {"上海市", "上海", "嘉定区", "嘉定", "华亭镇", "日本国", "东京", "京都"} <= names
    # villages, codes and continent headings are left out
    assert "北新村" not in names and "310000" not in names and "亚洲:" not in names


def test_tagger_lexicon_input_starts_at_zero_and_roundtrips(tiny_tokenizer, make_config, lexicon, tmp_path):
    torch.manual_seed(0)
    plain = ErnieZooForTokenClassificationCRF(make_config(num_labels=3)).eval()
    torch.manual_seed(0)
    model = ErnieZooForTokenClassificationCRF(make_config(num_labels=3, lexicon_types=list(TYPES))).eval()
    model.load_state_dict(plain.state_dict(), strict=False)  # everything but lexicon_proj
    plain.load_char_tables(tiny_tokenizer)
    model.load_char_tables(tiny_tokenizer)
    assert not model.lexicon_proj.weight.any()
    texts = ["王小明在北京工作。", "新华社记者报道"]
    enc = tiny_tokenizer(texts, padding=True, return_tensors="pt", return_offsets_mapping=True)
    offsets = enc.pop("offset_mapping").tolist()
    ids = torch.tensor([lexicon.token_features(t, o) for t, o in zip(texts, offsets)])
    assert int(ids.count_nonzero()) > 0
    with torch.no_grad():
        base = plain(**enc).logits
        torch.testing.assert_close(model(**enc, lexicon_ids=ids).logits, base)  # zero projection: no change
        model.lexicon_proj.weight.normal_()
        moved = model(**enc, lexicon_ids=ids).logits
        assert not torch.allclose(moved, base)
        with pytest.raises(ValueError, match="lexicon_ids shape"):
            model(**enc, lexicon_ids=ids[:, :2])

    with pytest.raises(ValueError, match="config.lexicon_types"):
        model.set_entity_lexicon(EntityLexicon({"北京": {"LOC"}}, ["LOC"]))
    model.set_entity_lexicon(lexicon)
    model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / LEXICON_FILE).is_file()
    reloaded = ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path / "m").eval()
    assert reloaded.entity_lexicon is not None and reloaded.entity_lexicon.words == lexicon.words
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**enc, lexicon_ids=ids).logits, moved)


# ------------------------------------------------------------------------------------- fine-tuning + Taskflow


def _lexicon_only_task(tmp_path):
    """Sentences "<name>来了。" whose type (PER or LOC) shows nowhere but in the lexicon; dev names never occur in
    train (their characters are unknown to the trained vocabulary), so only the lexicon can type them."""
    rng = random.Random(0)
    people = ["张伟", "李娜", "王芳", "刘洋", "陈明", "赵强"]
    places = ["杭州", "南京", "苏州", "成都", "武汉", "西安"]
    dev_people, dev_places = ["孙悦", "马骏", "胡静"], ["昆明", "贵阳", "兰州"]
    lexicon = EntityLexicon(
        {**{n: {"PER"} for n in people + dev_people}, **{n: {"LOC"} for n in places + dev_places}}, TYPES
    )
    lexicon.save(tmp_path / "lexicon.txt")

    def rows(per, loc, n):
        out = []
        for _ in range(n):
            kind, names = rng.choice([("PER", per), ("LOC", loc)])
            name = rng.choice(names)
            out.append({"text": f"{name}来了。", "entities": [{"start": 0, "end": len(name), "type": kind}]})
        return out

    for split, data in (("train", rows(people, places, 96)), ("dev", rows(dev_people, dev_places, 24))):
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8"
        )


def _run(tmp_path, out, lexicon):
    """The LoRA CRF tagger of the small random model on `_lexicon_only_task`, with or without its lexicon."""
    return run_finetune(
        _ner_args(
            tmp_path,
            out,
            str(tmp_path / "train.jsonl"),
            str(tmp_path / "dev.jsonl"),
            lexicon=str(tmp_path / "lexicon.txt") if lexicon else None,
            method="lora",
            learning_rate=1e-2,
        )
    )


def test_fine_tuning_learns_types_from_the_lexicon_and_taskflow_uses_it(tmp_path):
    _lexicon_only_task(tmp_path)
    without = _run(tmp_path, "plain", lexicon=False)
    with_lexicon = _run(tmp_path, "lex", lexicon=True)
    print("dev F1 without / with the lexicon:", without["dev"]["f1"], with_lexicon["dev"]["f1"])
    assert with_lexicon["dev"]["f1"] >= 0.9
    assert without["dev"]["f1"] <= 0.75  # the type of an unknown name is a guess without the lexicon

    out = tmp_path / "lex"
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["lexicon_types"] == list(TYPES)
    assert (out / LEXICON_FILE).read_bytes() == (tmp_path / "lexicon.txt").read_bytes()

    from ernie_zoo.taskflow import Taskflow

    ner = Taskflow("ner", task_path=str(out), entity_only=True)
    assert ner("贵阳来了。")["entities"][0]["type"] == "LOC"
    assert ner("胡静来了。")["entities"][0]["type"] == "PER"

    # user_dict: a user word is an entity of its given type wherever it occurs (intervention), and the model
    # also sees it as a lexicon match; the model's own lexicon is not changed.
    for tag, kind in (("ns", "LOC"), ("nr", "PER"), ("ORG", "ORG")):
        flow = Taskflow("ner", task_path=str(out), entity_only=True, user_dict=[f"拉萨 {tag}"])
        assert flow("拉萨来了。")["entities"] == [
            {"text": "拉萨", "type": kind, "start": 0, "end": 2, "score": None}
        ], tag
        assert "拉萨" in flow._task.lexicon
    assert "拉萨" not in ner._task.lexicon
    with pytest.raises(ValueError, match="needs an entity type of the model"):
        Taskflow("ner", task_path=str(out), user_dict=["拉萨 10"])
    with pytest.raises(ValueError, match="two types"):
        Taskflow("ner", task_path=str(out), user_dict=["拉萨 ns", "拉萨 nr"])
    with pytest.raises(
        ValueError, match="user_dict is only used by ner, pos_tagging, text_correction, word_segmentation"
    ):
        Taskflow("sentiment_analysis", task_path=str(out), user_dict=["拉萨 ns"])

    # The default method is LoRA: the adapter directory carries the lexicon too (its base directory has none).
    adapter, _ = load_finetuned(out / "adapter")
    assert unwrap(adapter).entity_lexicon.words == with_lexicon["model"].entity_lexicon.words

    # A saved lexicon tagger without its lexicon file is refused, not run blind.
    blind = tmp_path / "blind"
    shutil.copytree(out, blind, ignore=shutil.ignore_patterns(LEXICON_FILE, "checkpoints", "adapter"))
    with pytest.raises(ValueError, match=f"no {LEXICON_FILE}"):
        Taskflow("ner", task_path=str(blind))


def test_a_lexicon_needs_the_crf_tagger(tmp_path):
    with pytest.raises(ValueError, match="data.lexicon"):
        build_args(
            {
                "task": "token_classification",
                "data": {"train_file": "x.jsonl", "lexicon": "lexicon.txt"},
                "model": {"use_crf": False},
            }
        )


def test_lexicon_recall_splits_the_unseen_test_names_by_the_lexicon(lexicon):
    from ernie_zoo.evaluation.zoo import lexicon_recall

    known = {("王小明", "PER")}  # seen in training: left out of both buckets
    texts = ["王小明在北京", "新华社在上海"]
    gold = [
        [{"start": 0, "end": 3, "type": "PER"}, {"start": 4, "end": 6, "type": "LOC"}],
        [{"start": 0, "end": 3, "type": "ORG"}, {"start": 4, "end": 6, "type": "LOC"}],
    ]
    pred = [
        [{"start": 4, "end": 6, "type": "LOC"}],
        [{"start": 0, "end": 3, "type": "LOC"}],
    ]  # 新华社 mistyped
    out = lexicon_recall(lexicon, known, texts, gold, pred)
    assert out["words"] == 5 and out["types"] == list(TYPES)
    split = out["test_unseen_names"]
    assert split["in_lexicon"] == {"gold": 2, "found": 1, "recall": 0.5}  # 北京 found, 新华社 not
    assert split["not_in_lexicon"] == {"gold": 1, "found": 0, "recall": 0.0}  # 上海
    assert split["share_in_lexicon"] == pytest.approx(2 / 3)


def test_user_dict_intervention_is_longest_first_and_replaces_overlapping_entities():
    from ernie_zoo.taskflow.ner import Entity, NamedEntityRecognition

    task = NamedEntityRecognition.__new__(NamedEntityRecognition)  # only the intervention, no model
    task.user_words = {"北京": "LOC", "北京大学": "ORG", "小王": "PER"}
    task.user_lexicon = EntityLexicon(task.user_words)
    model = [
        Entity("京大", "LOC", 3, 5, 0.9),
        Entity("上海", "LOC", 7, 9, 0.8),
        Entity("王非", "PER", 11, 13, 0.7),
    ]
    out = task._intervene("他在北京大学和上海的小王非常好", model)
    assert [(e.text, e.type, e.start, e.end, e.score) for e in out] == [
        ("北京大学", "ORG", 2, 6, None),  # longest user word wins over 北京; the model's 京大 overlapped it
        ("上海", "LOC", 7, 9, 0.8),  # untouched
        ("小王", "PER", 10, 12, None),  # replaces the model's 王非
    ]
    # Traditional text matches Simplified user words; offsets index the text as given.
    assert [(e.text, e.start) for e in task._intervene("在北京大學", [])] == [("北京大學", 1)]


def test_same_as_compares_words_and_types(lexicon):
    assert lexicon.same_as(EntityLexicon(dict(lexicon.entries()), lexicon.types))
    assert not lexicon.same_as(None)
    assert not lexicon.same_as(lexicon.with_words({"上海": {"LOC"}}))
    assert not lexicon.same_as(EntityLexicon(dict(lexicon.entries()), tuple(reversed(lexicon.types))))


def test_lexicon_command_line_keeps_its_flags(capsys):
    """`python -m ernie_zoo.data.lexicon --out FILE --raw-dir DIR` parses onto the typed `Args`; --out is
    required, with an error that says so."""
    from pathlib import Path

    from ernie_zoo.data.lexicon import Args, main
    from ernie_zoo.recipe_cli import cli_args, parse_recipe

    argv = ["--out", "lex.txt", "--raw-dir", "~/raw"]
    assert parse_recipe(Args, cli_args(argv, None, Args, True), True) == Args(Path("lex.txt"), Path("~/raw"))
    assert main(["--raw-dir", "x"]) == 2
    assert "--out is required" in capsys.readouterr().err

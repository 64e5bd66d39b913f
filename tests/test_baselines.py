"""Metrics on hand-made cases, the Kneser-Ney n-gram LM against hand-computed values, poem format checks,
and the baseline systems on tiny inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ernie_zoo.evaluation.baselines import (
    ner_jieba,
    ner_lac,
    run_baselines,
    sentiment_snownlp,
    sentiment_tfidf_lr,
    words_to_spans,
)
from ernie_zoo.evaluation.poetry import check_poem_format, format_rates, poem_lines
from ernie_zoo.models.ngram import CharNgramLM
from ernie_zoo.text.metrics import accuracy, entity_names, macro_f1, recall_by_seen

DATA = Path(__file__).parent / "data"

# ------------------------------------------------------------------------------------------ metrics


def test_recall_by_seen_splits_gold_by_names_known_from_training():
    train_texts = ["李明在北京", "北京大学很大"]
    train_gold = [[(0, 2, "PER"), (3, 5, "LOC")], [(0, 4, "ORG")]]
    texts = ["北京的李明", "王芳去北京大学", "北京"]
    gold = [
        [(0, 2, "LOC"), (3, 5, "PER")],  # both seen
        [(0, 2, "PER"), (3, 7, "ORG"), (3, 5, "ORG")],  # 王芳 unseen; 北京大学 seen; 北京 seen only as LOC
        [{"start": 0, "end": 2, "type": "LOC"}],
    ]
    pred = [[(0, 2, "LOC")], [(0, 2, "PER"), (3, 7, "ORG")], []]
    known = entity_names(train_texts, train_gold)
    assert known == {("李明", "PER"), ("北京", "LOC"), ("北京大学", "ORG")}
    r = recall_by_seen(known, texts, gold, pred)
    assert r["seen"] == {"gold": 4, "found": 2, "recall": 0.5}
    assert r["unseen"] == {"gold": 2, "found": 1, "recall": 0.5}
    assert r["unseen_share"] == 2 / 6
    assert recall_by_seen(entity_names([], []), [""], [[]], [[]])["unseen_share"] == 0.0
    with pytest.raises(ValueError, match="same number of sentences"):
        recall_by_seen(known, texts, gold, pred[:2])
    with pytest.raises(ValueError, match="same number of sentences"):
        entity_names(train_texts, train_gold[:1])


def test_accuracy_and_macro_f1():
    gold = ["pos", "pos", "neg", "neg"]
    pred = ["pos", "neg", "neg", "neg"]
    assert accuracy(gold, pred) == 0.75
    # pos: p=1, r=.5, f=2/3 ; neg: p=2/3, r=1, f=.8
    assert macro_f1(gold, pred) == pytest.approx((2 / 3 + 0.8) / 2)
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])
    with pytest.raises(ValueError, match="4 labels"):
        accuracy(gold, pred[:3])


# -------------------------------------------------------------------------------------------- n-gram


def test_kneser_ney_bigram_matches_hand_computation():
    # corpus "ab", "b"; V = {a, b, <unk>} = 3; D = 0.5
    # bigram counts: (<s> a)=1 (a b)=1 (<s> b)=1
    # unigram continuation counts: a=1, b=2 (total 3, 2 types)
    #   p1(a) = (1-.5 + .5*2/3)/3 = 5/18 ; p1(b) = (2-.5 + .5*2/3)/3 = 11/18 ; p1(unk) = (.5*2/3)/3 = 2/18
    #   p2(a|<s>) = (1-.5 + .5*2*5/18)/2 = 7/18 ; p2(b|<s>) = 10/18 ; p2(unk|<s>) = 1/18
    #   p2(b|a) = (1-.5 + .5*1*11/18)/1 = 29/36 ; context "b" unseen -> p2(a|b) = p1(a) = 5/18
    lm = CharNgramLM(order=2, discount=0.5).fit(["ab", "b"])
    assert lm.prob("a") == pytest.approx(7 / 18)
    assert lm.prob("b") == pytest.approx(10 / 18)
    assert lm.prob("z") == pytest.approx(1 / 18)
    assert lm.prob("b", "a") == pytest.approx(29 / 36)
    assert lm.prob("a", "b") == pytest.approx(5 / 18)
    assert lm.perplexity(["ab"]) == pytest.approx(math.sqrt(1 / (7 / 18 * 29 / 36)))
    assert lm.perplexity(["ab", "ba"]) == pytest.approx(
        math.exp(-(math.log(7 / 18) + math.log(29 / 36) + math.log(10 / 18) + math.log(5 / 18)) / 4)
    )
    assert lm.perplexity(["c"]) == pytest.approx(18.0)


def test_unigram_order_one_is_discounted_counts():
    # order 1 uses raw counts: a=2, b=1, total 3, 2 types, V=3, D=.5
    lm = CharNgramLM(order=1, discount=0.5).fit(["aab"])
    assert lm.prob("a") == pytest.approx((1.5 + 0.5 * 2 / 3) / 3)
    assert lm.prob("b") == pytest.approx((0.5 + 0.5 * 2 / 3) / 3)
    assert lm.prob("q", "aaaa") == pytest.approx((0.5 * 2 / 3) / 3)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_distributions_sum_to_one(order):
    texts = ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。", "明月松间照，清泉石上流。"]
    lm = CharNgramLM(order=order).fit(texts)
    for context in ["", "明", "明月", "望明月", "从未见过"]:
        dist = lm.distribution(context)
        assert sum(dist.values()) == pytest.approx(1.0)
        assert min(dist.values()) > 0
        assert dist["光"] == pytest.approx(lm.prob("光", context))
    assert 1 < lm.perplexity(texts) < lm.num_predictable
    assert len(lm.log_probs("明月光")) == 3


def test_higher_order_fits_training_text_better():
    texts = ["春眠不觉晓，处处闻啼鸟。", "夜来风雨声，花落知多少。"] * 3
    ppl = [CharNgramLM(order=n).fit(texts).perplexity(texts) for n in (1, 2, 3)]
    assert ppl[0] > ppl[1] > ppl[2]


def test_ngram_errors():
    with pytest.raises(ValueError, match="order"):
        CharNgramLM(order=0)
    with pytest.raises(ValueError, match="discount"):
        CharNgramLM(discount=1.0)
    with pytest.raises(RuntimeError, match="not fitted"):
        CharNgramLM().perplexity(["x"])
    lm = CharNgramLM(order=2).fit(["ab"])
    with pytest.raises(ValueError, match="empty"):
        lm.perplexity([""])
    with pytest.raises(ValueError, match="without characters"):
        CharNgramLM().fit([""])
    with pytest.raises(TypeError, match="must be str"):
        lm.perplexity([b"ab"])  # type: ignore[list-item]


# -------------------------------------------------------------------------------------- poem format


def test_poem_format_checks():
    jueju = "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。"
    f = check_poem_format(jueju)
    assert f.is_regulated and f.line_lengths == [5, 5, 5, 5]
    lvshi = "国破山河在,城春草木深。感时花溅泪,恨别鸟惊心。烽火连三月,家书抵万金。白头搔更短,浑欲不胜簪。"
    assert check_poem_format(lvshi).is_regulated and check_poem_format(lvshi).n_lines == 8
    qiyan = "少小离家老大回，乡音无改鬓毛衰。儿童相见不相识，笑问客从何处来。"
    assert check_poem_format(qiyan).line_lengths == [7, 7, 7, 7] and check_poem_format(qiyan).is_regulated

    mixed = check_poem_format("床前明月光，疑是地上霜霜。举头望明月，低头思故乡。")
    assert not mixed.line_length_ok and not mixed.couplets_parallel and mixed.line_count_ok
    odd = check_poem_format("春眠不觉晓，处处闻啼鸟，夜来风雨声。")
    assert odd.n_lines == 3 and not odd.line_count_ok and not odd.couplets_parallel and not odd.punctuation_ok
    bad_punct = check_poem_format("床前明月光。疑是地上霜，举头望明月。低头思故乡，")
    assert bad_punct.line_length_ok and bad_punct.couplets_parallel and not bad_punct.punctuation_ok
    six = check_poem_format("一二三四五六，一二三四五六。一二三四五六，一二三四五六。")
    assert six.couplets_parallel and not six.line_length_ok
    ci = check_poem_format("明月几时有？把酒问青天。不知天上宫阙，今夕是何年。")
    assert not ci.is_regulated
    assert check_poem_format("").n_lines == 0 and not check_poem_format("").is_regulated
    assert poem_lines("甲乙丙,丁戊。") == [("甲乙丙", ","), ("丁戊", "。")]
    assert poem_lines("没有标点") == [("没有标点", "")]


def test_format_rates():
    rates = format_rates(["床前明月光，疑是地上霜。举头望明月，低头思故乡。", "明月几时有？把酒问青天。"])
    assert rates["poems"] == 2 and rates["is_regulated"] == 0.5 and rates["line_count_ok"] == 0.5
    with pytest.raises(ValueError):
        format_rates([])
    with pytest.raises(TypeError):
        check_poem_format(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ systems


def test_words_to_spans():
    words = [("江泽民", "nr"), ("在", "p"), ("北京", "ns"), ("会见", "v"), ("新华社", "nt")]
    assert words_to_spans("江泽民在北京会见新华社", words, {"nr": "PER", "ns": "LOC", "nt": "ORG"}) == [
        {"start": 0, "end": 3, "type": "PER"},
        {"start": 4, "end": 6, "type": "LOC"},
        {"start": 8, "end": 11, "type": "ORG"},
    ]
    with pytest.raises(ValueError, match="does not reproduce"):
        words_to_spans("江泽民在北京", [("江泽民", "nr")], {"nr": "PER"})


NER_SENTENCE = "江泽民主席在北京人民大会堂会见了联合国秘书长安南。"


def test_ner_jieba_and_lac_on_a_sentence():
    jieba_spans = ner_jieba([NER_SENTENCE])[0]
    lac_spans = ner_lac([NER_SENTENCE])[0]
    for spans in (jieba_spans, lac_spans):
        found = {(NER_SENTENCE[s["start"] : s["end"]], s["type"]) for s in spans}
        assert ("江泽民", "PER") in found and ("联合国", "ORG") in found
        assert all(s["type"] in ("PER", "LOC", "ORG") for s in spans)
    assert ("安南", "PER") in {(NER_SENTENCE[s["start"] : s["end"]], s["type"]) for s in lac_spans}


def _review_records(name: str, label: str) -> list[dict[str, str]]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [{"text": t, "label": label} for t in dict.fromkeys(lines) if t != "一般般吧，还可以。"]


def test_sentiment_baselines_on_fixture():
    pos = _review_records("reviews_pos_sample.txt", "positive")
    neg = _review_records("reviews_neg_sample.txt", "negative")
    train = pos[:-4] + neg[:-4]
    dev = pos[-4:-2] + neg[-4:-2]
    test = pos[-2:] + neg[-2:]
    lr = sentiment_tfidf_lr(train, dev, test, cs=(1.0, 10.0))
    assert lr["C"] in (1.0, 10.0) and 0.0 <= lr["dev_accuracy"] <= 1.0
    assert len(lr["predictions"]) == 4 and set(lr["predictions"]) <= {"positive", "negative"}
    # the model must at least fit its own training data
    lr_train = sentiment_tfidf_lr(train, dev, train, cs=(10.0,))
    assert accuracy([r["label"] for r in train], lr_train["predictions"]) >= 0.9
    snow = sentiment_snownlp(["这本书写得很好，值得一读，非常满意。", "质量太差了，很失望，再也不买了。"])
    assert snow == ["positive", "negative"]


def test_run_baselines_on_tiny_prepared_sets(tmp_path):
    from ernie_zoo.data.labelled import write_jsonl

    root = tmp_path / "datasets"
    poems = [
        "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。",
        "春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。",
    ]
    write_jsonl(root / "poetry" / "train.jsonl", [{"title": "", "author": "", "text": t} for t in poems * 3])
    write_jsonl(root / "poetry" / "dev.jsonl", [{"title": "", "author": "", "text": poems[0]}])
    write_jsonl(
        root / "poetry" / "test.jsonl", [{"title": "", "author": "", "text": "明月松间照，清泉石上流。"}]
    )
    gold = [{"start": 0, "end": 3, "type": "PER"}, {"start": 6, "end": 8, "type": "LOC"}]
    write_jsonl(root / "ner" / "test.jsonl", [{"text": NER_SENTENCE, "entities": gold}])
    results = run_baselines(root, tasks=("poetry", "ner"), progress=False)
    poetry = results["poetry"]
    assert poetry["test_chars"] == 12 and poetry["test_format_rates"]["is_regulated"] == 0.0
    ppl = {k: v["test_perplexity"] for k, v in poetry["systems"].items()}
    assert set(ppl) == {"char_2gram_kn", "char_3gram_kn", "char_4gram_kn"} and all(
        p > 1 for p in ppl.values()
    )
    ner = results["ner"]
    assert ner["sentences"] == 1 and set(ner["systems"]) == {"lac", "jieba_posseg"}
    assert ner["systems"]["lac"]["micro"]["recall"] > 0
    json.dumps(results)  # serialisable


def test_recorded_baselines_file_has_all_numbers():
    path = Path(__file__).parents[1] / "bench" / "results" / "baselines.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    assert results["command"].startswith("python -m ernie_zoo.evaluation.baselines")
    assert set(results["ner"]["systems"]) == {"lac", "jieba_posseg"}
    assert results["ner"]["sentences"] == 5000
    for system in results["ner"]["systems"].values():
        assert 0 < system["micro"]["f1"] < 1 and set(system["per_type"]) == {"PER", "LOC", "ORG"}
    assert set(results["sentiment"]["systems"]) == {"snownlp_bundled", "tfidf_char13_logreg"}
    assert all(1 < s["test_perplexity"] for s in results["poetry"]["systems"].values())


def test_both_command_lines_run_the_typed_function(tmp_path, capsys):
    """`ernie-zoo baselines` and `python -m ernie_zoo.evaluation.baselines` parse the same `Args` (documented
    flags: --tasks A B, --out, --no-progress) and call `run` with it: no argv handed to a second parser."""
    from ernie_zoo.cli import main as zoo_main
    from ernie_zoo.data.labelled import write_jsonl
    from ernie_zoo.evaluation.baselines import main

    root = tmp_path / "datasets"
    poem = {"title": "", "author": "", "text": "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。"}
    for split in ("train", "dev", "test"):
        write_jsonl(root / "poetry" / f"{split}.jsonl", [poem] * 2)
    argv = ["--datasets", str(root), "--tasks", "poetry", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "a.json")]) == 0
    assert zoo_main(["baselines", *argv, "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text(encoding="utf-8")) for n in "ab")
    assert a["command"].startswith("python -m ernie_zoo.evaluation.baselines --datasets")
    assert a["command"].endswith("a.json") and b["command"].endswith("b.json")
    assert set(a) == set(b) >= {"poetry", "versions"} and "ner" not in a
    assert a["poetry"]["systems"].keys() == b["poetry"]["systems"].keys()
    assert zoo_main(["baselines", "--task", "ner"]) == 2  # unknown option: one line naming the valid ones
    assert "--tasks" in capsys.readouterr().err

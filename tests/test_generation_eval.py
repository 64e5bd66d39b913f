"""Generator scores (ernie_zoo.evaluation.generation): per-character perplexity, explanation metrics, verse form."""

from __future__ import annotations

import pytest
import torch

from ernie_zoo.evaluation.generation import (
    char_f1,
    char_perplexity,
    explanation_scores,
    looks_like_verse,
    retrieval_baseline,
    rouge_l,
)


class _UniformLM(torch.nn.Module):
    """Every token equally likely: per-token perplexity is the vocabulary size."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.zeros(*input_ids.shape, self.vocab) + self.w
        return type("Out", (), {"logits": logits})()


class _CharTokenizer:
    bos_token_id, cls_token_id, pad_token_id = 1, None, 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[2 + (ord(c) % 5) for c in t] for t in texts]}


def test_char_perplexity_of_a_uniform_model_is_its_vocabulary():
    assert char_perplexity(_UniformLM(10), _CharTokenizer(), ["今天天气很好", "好"]) == pytest.approx(10.0)


def test_char_perplexity_normalises_by_characters_not_tokens():
    class Pairs(_CharTokenizer):  # one token per two characters
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[2] * (len(t) // 2) for t in texts]}

    assert char_perplexity(_UniformLM(16), Pairs(), ["今天天气"]) == pytest.approx(4.0)


def test_char_perplexity_errors():
    tok = _CharTokenizer()
    with pytest.raises(ValueError, match="non-empty"):
        char_perplexity(_UniformLM(4), tok, ["", ""])
    tok.bos_token_id = None
    with pytest.raises(ValueError, match="bos_token"):
        char_perplexity(_UniformLM(4), tok, ["好"])


def test_explanation_metrics():
    assert char_f1("比喻做多余的事", "比喻做多余的事") == 1.0
    assert char_f1("", "事") == 0.0 and rouge_l("甲", "") == 0.0
    assert rouge_l("比喻多余", "比喻做多余的事") == pytest.approx(2 * 1 * (4 / 7) / (1 + 4 / 7))
    assert rouge_l("余多喻比", "比喻多余") == pytest.approx(0.25)  # order matters for ROUGE-L ...
    assert char_f1("余多喻比", "比喻多余") == 1.0  # ... not for the bag of characters
    scores = explanation_scores(["比喻", "无关"], ["比喻", "比喻"])
    assert scores["n"] == 2 and scores["char_f1"] == 0.5
    with pytest.raises(ValueError, match="as many"):
        explanation_scores(["a"], [])


def test_retrieval_baseline_picks_the_idiom_sharing_most_characters():
    train = [{"word": "一帆风顺", "explanation": "顺利"}, {"word": "画龙点睛", "explanation": "关键"}]
    assert retrieval_baseline(train, ["画蛇添足", "风平浪静", "完全无关"]) == ["关键", "顺利", "顺利"]


@pytest.mark.parametrize(
    ("text", "verse"),
    [
        ("白日依山尽，黄河入海流。欲穷千里目，", True),
        ("春眠不觉晓,处处闻啼鸟。夜来", True),
        ("今天天气很好，我们一起去公园散步吧。", False),
        ("这家酒店的服务很好，", False),  # one clause is not a form
        ("床前明月光", False),
    ],
)
def test_looks_like_verse(text, verse):
    assert looks_like_verse(text) is verse

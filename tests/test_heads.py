"""The one head signature (`ernie_zoo.models.heads`): every registered head names the shared inputs in the signature
transformers and peft inspect, and computes what its parts compute by hand."""

from __future__ import annotations

import inspect

import pytest
import torch

import ernie_zoo  # noqa: F401  (registers every head)
from ernie_zoo.models import (
    ErnieZooEnsembleForTokenClassificationCRF,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForSpanExtraction,
    ErnieZooForSpellingCorrection,
    ErnieZooForTokenClassification,
    ErnieZooForTokenClassificationCRF,
    ErnieZooModel,
)
from ernie_zoo.models.crf_tagger import default_crf_mask, viterbi_predictions
from ernie_zoo.models.heads import SHARED_PARAMETERS, HeadInputs, head_forward
from ernie_zoo.models.registry import MODEL_CLASSES

#: what each head names beyond the shared inputs
OWN = {
    ErnieZooForMaskedLM: (),
    ErnieZooForSequenceClassification: (),
    ErnieZooForTokenClassification: (),
    ErnieZooForCausalLM: (),
    ErnieZooForSpellingCorrection: ("logits_mask",),
    ErnieZooForTokenClassificationCRF: ("crf_mask",),
    ErnieZooEnsembleForTokenClassificationCRF: ("crf_mask",),
    ErnieZooForSpanExtraction: (),
}
HEADS = sorted(
    (c for c in MODEL_CLASSES.values() if c.__module__.startswith("ernie_zoo.") and c is not ErnieZooModel),
    key=lambda c: c.__name__,
)


def test_the_registry_holds_the_heads_listed_here():
    assert set(HEADS) == set(OWN), "a new head: add it to OWN (and to the reference tests below)"


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_every_registered_head_names_the_shared_inputs(cls):
    params = list(inspect.signature(cls.forward).parameters.values())
    assert params[0].name == "self"
    shared = inspect.signature(HeadInputs).parameters
    assert [p.name for p in params[1 : len(shared) + 1]] == list(SHARED_PARAMETERS)
    assert [p.kind for p in params[1 : len(shared) + 1]] == [p.kind for p in shared.values()]
    own = params[len(shared) + 1 : -1]
    assert [p.name for p in own] == list(OWN[cls])
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in own)
    assert params[-1].kind is params[-1].VAR_KEYWORD
    assert {"pinyin_ids", "lexicon_ids", "labels"} <= set(SHARED_PARAMETERS)
    # the encoder itself names its inputs and pinyin_ids (no labels, no lexicon: those are a head's)
    encoder = inspect.signature(ErnieZooModel.forward).parameters
    assert [n for n in SHARED_PARAMETERS if n in encoder] == [
        n for n in SHARED_PARAMETERS if n not in ("labels", "lexicon_ids")
    ]


def _random(model: torch.nn.Module, tokenizer) -> torch.nn.Module:
    """Random char-feature and lexicon weights (they start at zero, where a dropped input would go unnoticed)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "char_features" in name or "lexicon_proj" in name or "crf." in name:
                p.normal_(std=0.2)
    model.load_char_tables(tokenizer)
    return model.eval()


def _build(cls, make_config, **fields):
    if cls is ErnieZooEnsembleForTokenClassificationCRF:
        fields["ensemble_size"] = 2
    return cls(make_config(num_labels=3, **fields))


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_trainer_and_peft_keep_every_named_column(cls, make_config, tiny_tokenizer, tmp_path):
    import datasets
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    enc = dict(tiny_tokenizer(["今天天气很好", "长城"], padding=True))
    zeros = [[0] * len(row) for row in enc["input_ids"]]
    columns = enc | {"lexicon_ids": zeros, "labels": zeros, "crf_mask": zeros, "logits_mask": zeros}
    data = datasets.Dataset.from_dict(columns | {"text": ["今天天气很好", "长城"]})
    args = TrainingArguments(str(tmp_path), report_to=[], use_cpu=True)
    named = {
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "pinyin_ids",
        "lexicon_ids",
        "labels",
        *OWN[cls],
    }
    model = _build(cls, make_config)
    assert set(Trainer(model=model, args=args)._remove_unused_columns(data).column_names) == named
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["query", "value"]))
    assert set(Trainer(model=lora, args=args)._remove_unused_columns(data).column_names) == named


def _bits(lexicon_ids: torch.Tensor, n: int) -> torch.Tensor:
    return torch.stack([(lexicon_ids >> k) & 1 for k in range(n)], -1).float()  # (B, T, n)


def _hidden(model, enc, lexicon_ids=None):
    """The encoder's output of `enc` computed from the model's parts: lexicon bits added to the embeddings by hand."""
    if lexicon_ids is None:
        return model.ernie(**enc)
    embeds = model.ernie.embeddings.embed_tokens(enc["input_ids"], enc["pinyin_ids"])
    embeds = embeds + model.lexicon_proj(_bits(lexicon_ids, model.lexicon_proj.in_features))
    rest = {k: v for k, v in enc.items() if k not in ("input_ids", "pinyin_ids")}
    return model.ernie(inputs_embeds=embeds, **rest)


@pytest.fixture
def batch(tiny_tokenizer):
    enc = dict(tiny_tokenizer(["银行行长在北京", "长城很长"], padding=True, return_tensors="pt"))
    lexicon_ids = torch.randint(0, 64, enc["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    return enc, lexicon_ids


@torch.no_grad()
def test_plain_heads_compute_their_parts(make_config, tiny_tokenizer, batch):
    enc, _ = batch
    for cls in (ErnieZooForMaskedLM, ErnieZooForCausalLM):
        model = _random(cls(make_config()), tiny_tokenizer)
        expected = model.cls(_hidden(model, enc).last_hidden_state)
        assert torch.equal(model(**enc).logits, expected)
        assert torch.equal(
            model(enc["input_ids"], enc["attention_mask"]).logits,
            model.cls(
                model.ernie(
                    input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]
                ).last_hidden_state
            ),
        )
    model = _random(ErnieZooForTokenClassification(make_config(num_labels=3)), tiny_tokenizer)
    assert torch.equal(model(**enc).logits, model.classifier(_hidden(model, enc).last_hidden_state))
    labels = enc["input_ids"] % 3
    loss = torch.nn.functional.cross_entropy(model(**enc).logits.flatten(0, 1), labels.flatten())
    torch.testing.assert_close(model(**enc, labels=labels).loss, loss)


@torch.no_grad()
def test_lexicon_heads_add_the_bits_before_the_encoder(make_config, tiny_tokenizer, batch):
    enc, lexicon_ids = batch
    classifier = ErnieZooForSequenceClassification(
        make_config(num_labels=2, sentiment_features=["POS", "NEG", "NEGATION"])
    )
    classifier = _random(classifier, tiny_tokenizer)
    lex = lexicon_ids % 8
    expected = classifier.classifier(_hidden(classifier, enc, lex).pooler_output)
    assert torch.equal(classifier(**enc, lexicon_ids=lex).logits, expected)
    assert not torch.allclose(classifier(**enc, lexicon_ids=lex).logits, classifier(**enc).logits)

    tagger = _random(
        ErnieZooForTokenClassificationCRF(make_config(num_labels=3, lexicon_types=["PER", "LOC"])),
        tiny_tokenizer,
    )
    emissions = tagger.classifier(_hidden(tagger, enc, lexicon_ids).last_hidden_state)
    out = tagger(**enc, lexicon_ids=lexicon_ids)
    assert torch.equal(out.logits, emissions)
    crf_mask = default_crf_mask(enc["attention_mask"])
    assert torch.equal(out.predictions, viterbi_predictions(tagger.crf, emissions, crf_mask))
    assert torch.equal(tagger.encode(**enc, lexicon_ids=lexicon_ids)[0], emissions)  # the ONNX export's call
    narrow = torch.zeros_like(crf_mask)
    narrow[:, 1:3] = True
    predictions = tagger(**enc, lexicon_ids=lexicon_ids, crf_mask=narrow).predictions
    assert torch.equal(predictions, viterbi_predictions(tagger.crf, emissions, narrow))
    assert (predictions[:, 3:] == -100).all()


@torch.no_grad()
def test_ensemble_decodes_the_mean_of_its_members(make_config, tiny_tokenizer, batch):
    enc, lexicon_ids = batch
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        member = ErnieZooForTokenClassificationCRF(make_config(num_labels=3, lexicon_types=["PER", "LOC"]))
        members.append(_random(member, tiny_tokenizer))
    ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_members(members).eval()
    emissions = torch.stack([m(**enc, lexicon_ids=lexicon_ids).logits for m in members]).mean(0)
    out = ensemble(**enc, lexicon_ids=lexicon_ids, return_dict=False)
    assert torch.equal(out.logits, emissions)
    crf_mask = default_crf_mask(enc["attention_mask"])
    assert torch.equal(out.predictions, viterbi_predictions(ensemble.crf, emissions, crf_mask))


@torch.no_grad()
def test_spelling_corrector_names_its_logits_mask(make_config, tiny_tokenizer, batch):
    enc, _ = batch
    model = _random(ErnieZooForSpellingCorrection(make_config()), tiny_tokenizer)
    hidden = _hidden(model, enc).last_hidden_state
    keep = enc["attention_mask"].bool()
    out = model(**enc, logits_mask=keep)
    assert torch.equal(out.detection_logits, model.detector(hidden).squeeze(-1))
    assert torch.equal(out.logits, model.cls(hidden[keep]))


class _Probe(torch.nn.Module):
    @head_forward
    def forward(self, inputs: HeadInputs, extra=None, **kwargs):
        return inputs, extra, kwargs


@torch.no_grad()
def test_span_extractor_computes_its_parts_and_its_loss(make_config, tiny_tokenizer, batch):
    enc, _ = batch
    model = _random(ErnieZooForSpanExtraction(make_config()), tiny_tokenizer)
    logits = model.classifier(_hidden(model, enc).last_hidden_state)  # (B, T, 2)
    labels = torch.full(enc["input_ids"].shape, -100)
    labels[0, 1:4] = torch.tensor([1, 0, 2])  # a span from token 1 to token 3
    labels[1, 1:3] = torch.tensor([3, 0])  # a one-token span
    out = model(**enc, labels=labels)
    assert torch.equal(out.start_logits, logits[..., 0]) and torch.equal(out.end_logits, logits[..., 1])
    kept = labels != -100
    target = torch.stack([(labels[kept] & 1) > 0, (labels[kept] & 2) > 0]).float()
    by_hand = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.stack([logits[..., 0][kept], logits[..., 1][kept]]), target
    )
    assert torch.allclose(out.loss, by_hand)


def test_head_forward_binds_as_its_signature_says():
    probe = _Probe()
    inputs, extra, kwargs = probe(1, 2, 3, 4, 5, 6, 7, pinyin_ids=8, extra=9, return_dict=False)
    assert (inputs.input_ids, inputs.labels, inputs.pinyin_ids, inputs.lexicon_ids) == (1, 7, 8, None)
    assert extra == 9 and kwargs == {"return_dict": False}
    with pytest.raises(TypeError, match="takes 7 positional inputs"):
        probe(1, 2, 3, 4, 5, 6, 7, 8)
    with pytest.raises(TypeError, match="multiple values for argument 'input_ids'"):
        probe(1, input_ids=2)
    with pytest.raises(TypeError, match="clash: \\['labels'\\]"):

        @head_forward
        def forward(self, inputs, labels=None):
            pass

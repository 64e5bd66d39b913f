"""Int8 weight storage (ernie_zoo.models.int8) and the mean-emission ensemble of CRF taggers
(ErnieZooEnsembleForTokenClassificationCRF): what they compute, saving and loading as one directory, Taskflow, and
clear errors for members that cannot be averaged."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from ernie_zoo.models.crf_tagger import LEXICON_FILE, ErnieZooForTokenClassificationCRF
from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF as Ensemble
from ernie_zoo.models.int8 import (
    dequantize_state_dict,
    int8_weights_file,
    quantize_rows,
    quantize_state_dict,
    save_int8_weights,
)
from ernie_zoo.text.lexicon import EntityLexicon

TYPES = ["PER", "LOC", "ORG"]
TAGS = ["O", "B-PER", "E-PER", "B-LOC", "E-LOC"]
TEXTS = ["王小明在北京工作。", "新华社记者报道北京的消息"]


def _tagger(make_config, tokenizer, seed: int, lexicon: EntityLexicon | None = None, **overrides):
    torch.manual_seed(seed)
    fields = dict(
        num_labels=len(TAGS), id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)}
    )
    if lexicon is not None:
        fields["lexicon_types"] = list(lexicon.types)
    model = ErnieZooForTokenClassificationCRF(make_config(**{**fields, **overrides}))
    with torch.no_grad():
        for p in model.crf.parameters():
            p.normal_()
        if model.lexicon_proj is not None:
            model.lexicon_proj.weight.normal_(std=0.5)
    model.load_char_tables(tokenizer)
    model.set_entity_lexicon(lexicon)
    return model.eval()


@pytest.fixture
def lexicon():
    return EntityLexicon({"北京": {"LOC"}, "王小明": {"PER"}, "新华社": {"ORG"}}, TYPES)


def _inputs(tokenizer, lexicon=None):
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    offsets = enc.pop("offset_mapping").tolist()
    if lexicon is not None:
        enc["lexicon_ids"] = torch.tensor([lexicon.token_features(t, o) for t, o in zip(TEXTS, offsets)])
    return enc


# ------------------------------------------------------------------------------------------------- int8 storage
def test_rowwise_int8_rounds_each_value_within_half_a_step_of_its_row():
    torch.manual_seed(0)
    w = torch.randn(64, 96) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different magnitude
    w[5] = 0.0
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and scale.shape == (64,)
    assert int(q.abs().max()) == 127  # every non-zero row uses the full range
    back = q.float() * scale[:, None]
    err = (back - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())
    assert not back[5].any()  # a zero row stays zero
    # the step is per row: the smallest row keeps its relative precision
    assert float(err[0].max() / w[0].abs().max()) < 1 / 250
    with pytest.raises(ValueError, match="2-D float"):
        quantize_rows(torch.ones(3))


def test_only_large_matrices_are_stored_as_int8_and_bad_files_fail_clearly():
    sd = {
        "emb.weight": torch.randn(128, 64),
        "small.weight": torch.randn(4, 8),
        "ln.bias": torch.randn(64),
        "table": torch.arange(10),
    }
    stored = quantize_state_dict(sd, min_elements=4096, other_dtype=torch.float16)
    assert set(stored) == {"emb.weight.int8", "emb.weight.int8_scale", "small.weight", "ln.bias", "table"}
    assert stored["small.weight"].dtype == torch.float16 and stored["table"].dtype == torch.int64
    back = dequantize_state_dict(stored)
    assert set(back) == set(sd) and back["emb.weight"].dtype == torch.float32
    torch.testing.assert_close(back["emb.weight"], sd["emb.weight"], atol=0.03, rtol=0)
    del stored["emb.weight.int8_scale"]
    with pytest.raises(ValueError, match="'emb.weight.int8' has no scales"):
        dequantize_state_dict(stored)
    with pytest.raises(ValueError, match="reserves"):
        quantize_state_dict({"x.int8": torch.zeros(2)})


def test_an_int8_directory_loads_to_the_same_tagging(tiny_tokenizer, make_config, lexicon, tmp_path):
    model = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    enc = _inputs(tiny_tokenizer, lexicon)
    model.save_pretrained(tmp_path)
    assert int8_weights_file(tmp_path) is None  # save_pretrained writes plain safetensors
    save_int8_weights(model, tmp_path, min_elements=1024)
    assert int8_weights_file(tmp_path) == tmp_path / "model.safetensors"
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    word = "ernie.embeddings.word_embeddings.weight"
    # the stored matrices are under other names: a loader that does not know the format finds them missing
    assert word not in keys and {word + ".int8", word + ".int8_scale"} <= keys
    reloaded = ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert reloaded.entity_lexicon is not None and reloaded.entity_lexicon.same_as(lexicon)
    for key, value in model.state_dict().items():
        got = reloaded.state_dict()[key]
        assert got.dtype == value.dtype, key
        if value.is_floating_point():
            torch.testing.assert_close(got, value, atol=0.02 * float(value.abs().max()) + 1e-3, rtol=0)
    with torch.no_grad():
        before, after = model(**enc), reloaded(**enc)
    torch.testing.assert_close(after.logits, before.logits, atol=0.05, rtol=0)
    assert torch.equal(after.predictions, before.predictions)


def test_int8_storage_stores_tied_weights_once_and_refuses_other_shared_tensors(make_config, tmp_path):
    from ernie_zoo.models import ErnieZooForMaskedLM

    model = ErnieZooForMaskedLM(make_config(tie_word_embeddings=True))
    word, decoder = "ernie.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"
    assert model.cls.predictions.decoder.weight is model.ernie.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    save_int8_weights(model, tmp_path, min_elements=1024)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert word + ".int8" in keys and not any(k.startswith(decoder) for k in keys)  # stored once
    reloaded = ErnieZooForMaskedLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert (
        reloaded.cls.predictions.decoder.weight is reloaded.ernie.embeddings.word_embeddings.weight
    )  # tied again
    torch.testing.assert_close(reloaded.state_dict()[decoder], model.state_dict()[word], atol=0.02, rtol=0)
    # a tensor shared by keys the model does not tie again on load: refused, nothing written
    layers = model.ernie.encoder.layer
    layers[1].attention.self.query.weight = layers[0].attention.self.query.weight
    with pytest.raises(ValueError, match="tied weights"):
        save_int8_weights(model, tmp_path / "shared")
    assert not (tmp_path / "shared" / "model.safetensors").exists()


# ------------------------------------------------------------------------------------------------- the ensemble
def test_the_ensemble_decodes_the_mean_emissions_with_the_mean_transitions(
    tiny_tokenizer, make_config, lexicon
):
    a = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    b = _tagger(make_config, tiny_tokenizer, 1, lexicon)
    enc = _inputs(tiny_tokenizer, lexicon)
    with torch.no_grad():
        out_a, out_b = a(**enc), b(**enc)
        same = Ensemble.from_members([a, a]).eval()(**enc)
        mixed_model = Ensemble.from_members([a, b]).eval()
        mixed = mixed_model(**enc)
    # two copies of a tagger are that tagger
    torch.testing.assert_close(same.logits, out_a.logits)
    assert torch.equal(same.predictions, out_a.predictions)
    # two taggers: mean emissions, mean transitions, Viterbi over them
    torch.testing.assert_close(mixed.logits, (out_a.logits + out_b.logits) / 2)
    torch.testing.assert_close(mixed_model.crf.transitions, (a.crf.transitions + b.crf.transitions) / 2)
    from ernie_zoo.models.crf_tagger import default_crf_mask, viterbi_predictions

    mask = default_crf_mask(enc["attention_mask"])
    assert torch.equal(mixed.predictions, viterbi_predictions(mixed_model.crf, mixed.logits, mask))
    # members are copies: changing the ensemble leaves the taggers it was built from alone
    with torch.no_grad():
        mixed_model.members[0].classifier.weight.zero_()
    assert a.classifier.weight.abs().sum() > 0
    # with labels: the CRF negative log-likelihood of the mean emissions under the mean transitions
    labels = torch.where(mask, torch.zeros_like(enc["input_ids"]), torch.full_like(enc["input_ids"], -100))
    mixed_model.train()
    loss = mixed_model(**enc, labels=labels).loss
    assert loss is not None and loss.requires_grad and float(loss.detach()) > 0


def test_the_ensemble_saves_and_loads_as_one_directory(tiny_tokenizer, make_config, lexicon, tmp_path):
    a = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    b = _tagger(make_config, tiny_tokenizer, 1, lexicon)
    model = Ensemble.from_members([a, b]).eval()
    enc = _inputs(tiny_tokenizer, lexicon)
    model.save_pretrained(tmp_path / "fp32")
    assert (tmp_path / "fp32" / LEXICON_FILE).is_file()
    reloaded = Ensemble.from_pretrained(tmp_path / "fp32").eval()
    assert reloaded.config.ensemble_size == 2 and reloaded.config.architectures == [Ensemble.__name__]
    assert all(m.entity_lexicon.same_as(lexicon) for m in reloaded.members)
    with torch.no_grad():
        expected = model(**enc)
        torch.testing.assert_close(reloaded(**enc).logits, expected.logits)
    # int8 storage of the whole ensemble: a smaller file, the same tagging
    model.save_pretrained(tmp_path / "int8")
    save_int8_weights(model, tmp_path / "int8", min_elements=1024)
    sizes = [(tmp_path / d / "model.safetensors").stat().st_size for d in ("fp32", "int8")]
    assert sizes[1] < sizes[0] / 2.5
    small = Ensemble.from_pretrained(tmp_path / "int8", dtype=torch.float32).eval()
    with torch.no_grad():
        got = small(**enc)
    torch.testing.assert_close(got.logits, expected.logits, atol=0.05, rtol=0)
    assert torch.equal(got.predictions, expected.predictions)
    # a member taken out is a plain tagger again
    one = reloaded.member(1)
    assert type(one) is ErnieZooForTokenClassificationCRF and not hasattr(one.config, "ensemble_size")
    assert one.entity_lexicon.same_as(lexicon)
    with torch.no_grad():
        torch.testing.assert_close(one(**enc).logits, b(**enc).logits)
    # another class would find none of its weights: refused by name instead of loading random weights
    from transformers import AutoModelForTokenClassification

    with pytest.raises(ValueError, match="holds an ensemble of taggers"):
        AutoModelForTokenClassification.from_pretrained(tmp_path / "int8")
    with pytest.raises(ValueError, match="ErnieZooForTokenClassificationCRF cannot load it"):
        ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path / "fp32")
    # finetune's loader (distillation teachers, the ensemble script) picks the class from config.architectures
    from ernie_zoo.finetune import load_finetuned

    tiny_tokenizer.save_pretrained(tmp_path / "int8")
    loaded, _ = load_finetuned(tmp_path / "int8")
    assert type(loaded) is Ensemble


def test_members_that_cannot_be_averaged_are_refused(tiny_tokenizer, make_config, lexicon):
    a = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    with pytest.raises(ValueError, match="at least two"):
        Ensemble.from_members([a])
    other_labels = _tagger(make_config, tiny_tokenizer, 1, lexicon, id2label=dict(enumerate(reversed(TAGS))))
    with pytest.raises(ValueError, match="member 1's config differs from member 0's in .*id2label"):
        Ensemble.from_members([a, other_labels])
    other_lexicon = _tagger(make_config, tiny_tokenizer, 1, EntityLexicon({"上海": {"LOC"}}, TYPES))
    with pytest.raises(ValueError, match="member 1's entity lexicon is not member 0's"):
        Ensemble.from_members([a, other_lexicon])
    wider = _tagger(make_config, tiny_tokenizer, 1, lexicon, intermediate_size=128)
    with pytest.raises(ValueError, match="intermediate_size"):
        Ensemble.from_members([a, wider])
    # training-only fields may differ
    dropout = _tagger(make_config, tiny_tokenizer, 1, lexicon, hidden_dropout_prob=0.3)
    assert Ensemble.from_members([a, dropout]).config.ensemble_size == 2
    with pytest.raises(ValueError, match="ensemble_size must be an integer >= 2"):
        Ensemble(make_config(num_labels=3))


def test_taskflow_tags_with_an_ensemble_directory(tiny_tokenizer, make_config, lexicon, tmp_path):
    from ernie_zoo import Taskflow

    a = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    b = _tagger(make_config, tiny_tokenizer, 1, lexicon)
    model = Ensemble.from_members([a, b]).eval()
    results = {}
    for kind in ("fp32", "int8"):
        model.save_pretrained(tmp_path / kind)
        if kind == "int8":
            save_int8_weights(model, tmp_path / kind, min_elements=1024)
        tiny_tokenizer.save_pretrained(tmp_path / kind)
        flow = Taskflow("ner", task_path=str(tmp_path / kind))
        assert type(flow._task.model) is Ensemble and flow._task.lexicon.same_as(lexicon)
        results[kind] = [[(e["text"], e["type"]) for e in r["entities"]] for r in flow(TEXTS)]
    assert any(results["fp32"]) and results["int8"] == results["fp32"]


def test_the_pairs_scan_scores_what_the_ensemble_computes(tiny_tokenizer, make_config, lexicon):
    """recipes/experiments/ner_ensemble.py --pairs replays each member's recorded emissions; a pair scored that way is
    the ensemble of the two."""
    path = Path(__file__).parents[1] / "recipes" / "experiments" / "ner_ensemble.py"
    spec = importlib.util.spec_from_file_location("ner_ensemble", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = _tagger(make_config, tiny_tokenizer, 0, lexicon)
    b = _tagger(make_config, tiny_tokenizer, 1, lexicon)
    enc = _inputs(tiny_tokenizer, lexicon)
    ra, rb = module.Replay(a), module.Replay(b)
    with torch.no_grad():
        ra(**enc), rb(**enc)  # the recording pass
        replayed = module.MeanOfReplays([ra, rb])(**enc)
        expected = Ensemble.from_members([a, b]).eval()(**enc)
    torch.testing.assert_close(replayed.logits, expected.logits)
    assert torch.equal(replayed.predictions, expected.predictions)


def test_the_cli_builds_an_ensemble_directory_and_names_bad_taggers(
    tiny_tokenizer, make_config, lexicon, tmp_path, capsys
):
    from ernie_zoo import Taskflow
    from ernie_zoo.finetune.bottleneck import CONFIG_NAME
    from ernie_zoo.finetune.cli import main
    from ernie_zoo.models import ErnieZooForTokenClassification

    dirs = []
    for seed in (0, 1):
        path = tmp_path / f"tagger{seed}"
        _tagger(make_config, tiny_tokenizer, seed, lexicon).save_pretrained(path)
        tiny_tokenizer.save_pretrained(path)
        dirs.append(str(path))
    out = tmp_path / "pair"
    assert main(["ensemble", str(out), *dirs, "--int8"]) == 0
    assert "ensemble of 2 taggers written to" in capsys.readouterr().out
    assert int8_weights_file(out) is not None and (out / LEXICON_FILE).is_file()
    flow = Taskflow("ner", task_path=str(out))
    assert type(flow._task.model) is Ensemble and flow._task.model.config.ensemble_size == 2
    # bad input: a clear error naming the directory, nothing written
    other = tmp_path / "other-labels"
    _tagger(
        make_config, tiny_tokenizer, 2, lexicon, id2label=dict(enumerate(reversed(TAGS)))
    ).save_pretrained(other)
    tiny_tokenizer.save_pretrained(other)
    plain = tmp_path / "plain"
    ErnieZooForTokenClassification(make_config(num_labels=len(TAGS))).save_pretrained(plain)
    tiny_tokenizer.save_pretrained(plain)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / CONFIG_NAME).write_text("{}", encoding="utf-8")
    for bad, message in (
        ([dirs[0]], "an ensemble needs at least two tagger directories"),
        (
            [dirs[0], str(other)],
            f"member 1's config differs from member 0's in .*id2label.*member 1 = {other}",
        ),
        (
            [dirs[0], str(plain)],
            f"{plain} holds a ErnieZooForTokenClassification; an ensemble takes CRF taggers",
        ),
        ([dirs[0], str(adapter)], f"{adapter} holds an adapter: merge it first"),
    ):
        assert main(["ensemble", str(tmp_path / "bad"), *bad]) == 2
        assert re.search(message, capsys.readouterr().err), message
        assert not (tmp_path / "bad").exists()

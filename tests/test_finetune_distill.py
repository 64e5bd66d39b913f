"""Knowledge distillation (train.distill_from): the loss, that a student learns what only its teachers know, and
clear errors for teachers that cannot teach it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_finetune_loop import QUIET, SMALL, _ner_args, _ner_files, _split_sentiment

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.distill import Teachers
from ernie_zoo.text.lexicon import EntityLexicon


def _teachers(alpha=0.5, temperature=2.0) -> Teachers:
    t = Teachers.__new__(Teachers)  # the loss alone, without loading models
    t.alpha, t.temperature, t.models = alpha, temperature, []
    return t


def test_the_loss_is_zero_at_the_teachers_logits_and_counts_labelled_tokens_only():
    torch.manual_seed(0)
    t = _teachers(temperature=2.0)
    teacher = torch.randn(2, 5, 4)
    labels = torch.tensor([[-100, 1, 2, 0, -100], [-100, 3, -100, -100, -100]])
    assert t.kd_loss(teacher.clone(), teacher, labels).item() == pytest.approx(0.0, abs=1e-6)
    student = torch.randn(2, 5, 4, requires_grad=True)
    loss = t.kd_loss(student, teacher, labels)
    keep = labels != -100
    p = torch.softmax(teacher[keep] / 2, -1)
    expected = (p * (p.log() - torch.log_softmax(student[keep] / 2, -1))).sum(-1).mean() * 4
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5) and loss.item() > 0
    loss.backward()
    assert student.grad[~keep].abs().sum() == 0 and student.grad[keep].abs().sum() > 0
    # sequence classification: every row counts; the total mixes the task loss in by alpha
    rows = torch.randn(3, 2)
    kd = t.kd_loss(rows + 1.0, rows, None)  # a constant shift leaves the softmax unchanged
    assert kd.item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        t.kd_loss(torch.randn(3, 3), rows, None)


def _strip_entities(src: str, dst: Path) -> str:
    rows = [json.loads(line) for line in Path(src).read_text(encoding="utf-8").splitlines()]
    dst.write_text(
        "".join(json.dumps({**r, "entities": []}, ensure_ascii=False) + "\n" for r in rows), "utf-8"
    )
    return str(dst)


def test_a_student_learns_from_its_teacher_what_its_own_labels_lack(tmp_path):
    """The student's training file has no entities at all: alone it learns to tag nothing; with
    distill_alpha 1 it learns the teacher's tagging and finds the dev entities. The teachers are the tagger and an
    ensemble directory (ErnieZooEnsembleForTokenClassificationCRF) of two copies of it: a teacher like any other."""
    paths = _ner_files(tmp_path)
    teacher = run_finetune(_ner_args(tmp_path, "teacher", paths["train"], paths["dev"], token_dropout=0.1))
    assert teacher["dev"]["f1"] > 0.8, teacher["dev"]
    blank = _strip_entities(paths["train"], tmp_path / "blank.jsonl")
    tok = str(tmp_path / "teacher")
    from ernie_zoo.finetune import ErnieZooEnsembleForTokenClassificationCRF, load_finetuned

    tagger, tagger_tokenizer = load_finetuned(tok)
    ErnieZooEnsembleForTokenClassificationCRF.from_members([tagger, tagger]).save_pretrained(
        tmp_path / "pair"
    )
    tagger_tokenizer.save_pretrained(tmp_path / "pair")
    alone = run_finetune(_ner_args(tmp_path, "alone", blank, paths["dev"], tokenizer=tok))
    taught = run_finetune(
        _ner_args(
            tmp_path,
            "taught",
            blank,
            paths["dev"],
            tokenizer=tok,
            distill_from=[tok, str(tmp_path / "pair")],
            distill_alpha=1.0,
            token_dropout=0.1,
        )
    )
    print("dev F1 teacher / alone / taught:", teacher["dev"]["f1"], alone["dev"]["f1"], taught["dev"]["f1"])
    assert alone["dev"]["f1"] == 0.0
    assert taught["dev"]["f1"] > 0.7
    assert (tmp_path / "taught" / "finetune_args.yaml").read_text(encoding="utf-8").count(tok) >= 1


def test_sequence_classification_distillation_and_clear_errors(tmp_path, tiny_tokenizer):
    paths = _split_sentiment(tmp_path)

    def args(out, tokenizer=None, **train):
        return build_args(
            {
                "task": "sequence_classification",
                "data": {"train_file": paths["train"], "dev_file": paths["dev"], "max_length": 32},
                "model": {"vocab_size": 500, "config_overrides": SMALL, "tokenizer": tokenizer},
                "method": {"method": "lora", "lora_r": 4},
                "train": {
                    "output_dir": str(tmp_path / out),
                    "max_steps": 8,
                    "batch_size": 8,
                    "learning_rate": 1e-2,
                    "tensorboard": False,
                    **QUIET,
                    **train,
                },
            }
        )

    run_finetune(args("teacher"))
    teacher = str(tmp_path / "teacher")
    # a LoRA student distils from a LoRA teacher (its merged export) and the teachers get no gradient
    student = run_finetune(
        args("student", tokenizer=teacher, distill_from=[teacher, teacher], distill_temperature=2)
    )
    assert student["steps"] == 8

    with pytest.raises(ValueError, match="another vocabulary"):
        tiny_tokenizer.save_pretrained(str(tmp_path / "other-tokenizer"))
        run_finetune(args("other-vocab", tokenizer=str(tmp_path / "other-tokenizer"), distill_from=[teacher]))
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        run_finetune(args("missing", tokenizer=teacher, distill_from=[str(tmp_path / "nowhere")]))
    ner = _ner_files(tmp_path)
    with pytest.raises(ValueError, match="predicts labels"):
        run_finetune(
            _ner_args(
                tmp_path, "ner-student", ner["train"], ner["dev"], tokenizer=teacher, distill_from=[teacher]
            )
        )


def test_a_lexicon_teacher_needs_the_students_lexicon(tmp_path):
    paths = _ner_files(tmp_path)
    lexicon = tmp_path / "lexicon.txt"
    EntityLexicon({"北京": {"LOC"}, "新华社": {"ORG"}}, ["PER", "LOC", "ORG"]).save(lexicon)
    run_finetune(
        _ner_args(tmp_path, "teacher", paths["train"], paths["dev"], lexicon=str(lexicon), max_steps=4)
    )
    teacher = str(tmp_path / "teacher")
    other = tmp_path / "other.txt"
    EntityLexicon({"上海": {"LOC"}}, ["PER", "LOC", "ORG"]).save(other)

    for out, student_lexicon in (("plain", None), ("other", str(other))):  # no lexicon, another lexicon
        with pytest.raises(ValueError, match="reads a lexicon that is not the student's"):
            run_finetune(
                _ner_args(
                    tmp_path,
                    out,
                    paths["train"],
                    paths["dev"],
                    teacher,
                    student_lexicon,
                    distill_from=[teacher],
                )
            )
    same = run_finetune(
        _ner_args(
            tmp_path,
            "same",
            paths["train"],
            paths["dev"],
            teacher,
            str(lexicon),
            distill_from=[teacher],
            max_steps=4,
        )
    )
    assert same["steps"] == 4


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        ({"task": "generation", "train": {"distill_from": ["t"]}}, "distillation supports"),
        ({"data": {"multi_label": True}, "train": {"distill_from": ["t"]}}, "multi_label"),
        ({"train": {"distill_alpha": 0.0}}, "train.distill_alpha"),
        ({"train": {"distill_temperature": -1.0}}, "train.distill_temperature"),
    ],
)
def test_bad_distillation_settings_name_the_key(recipe, message):
    base = {"data": {"train_file": "x.jsonl"}}
    merged = {**base, **recipe, "data": {**base["data"], **recipe.get("data", {})}}
    with pytest.raises(ValueError, match=message):
        build_args(merged)

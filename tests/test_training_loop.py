"""The one training loop (`training.loop.TrainLoop`): a toy task with gradient accumulation trains exactly as a
hand-rolled loop does, the cadences (log, eval, save, early stop, after the last step) fall where they should, a
non-finite loss stops the run, and `ernie-pretrain` and `ernie-finetune` both run on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ernie_zoo.training.core import adamw, warmup_decay
from ernie_zoo.training.engine import PlainEngine
from ernie_zoo.training.loop import TrainLoop

REPO = Path(__file__).resolve().parents[1]
ACCUM, STEPS, ROWS = 3, 5, 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(ROWS, 6, generator=g), torch.randn(ROWS, 1, generator=g)) for _ in range(ACCUM * STEPS)
    ]


def _optim(model):
    optimizer = adamw(model, 1e-2, 0.01)
    return optimizer, warmup_decay(optimizer, warmup_steps=2, total_steps=STEPS, decay="linear")


class ToyTask:
    """A regression task on the loop; records every call the loop makes."""

    def __init__(self, model, stop_at: int | None = None, nan_at: int | None = None):
        self.model, self.data, self.calls, self.losses = model, _batches(), [], []
        self.stop_at, self.nan_at = stop_at, nan_at

    def micro_batches(self, step):
        for i in range(ACCUM):
            yield self.data[step * ACCUM + i], i == ACCUM - 1

    def loss(self, batch):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        return (
            loss * float("nan") if self.nan_at is not None and len(self.losses) + 1 == self.nan_at else loss
        )

    def step_sums(self):
        return {"rows": ACCUM * ROWS}

    def end_step(self, step, loss, grad_norm, sums, seconds):
        assert sums == {"rows": ACCUM * ROWS}
        self.losses.append(loss)

    def log(self, step):
        self.calls.append(("log", step))
        return {"loss": f"{self.losses[-1]:.4f}"}

    def run_eval(self, step):
        self.calls.append(("eval", step))
        return step == self.stop_at

    def save(self, step):
        self.calls.append(("save", step))


def test_a_toy_task_with_accumulation_trains_as_a_hand_rolled_loop():
    reference = _model()
    optimizer, scheduler = _optim(reference)
    batches, ref_losses = _batches(), []
    for step in range(STEPS):
        total = 0.0
        for x, y in batches[step * ACCUM : (step + 1) * ACCUM]:
            loss = torch.nn.functional.mse_loss(reference(x), y)
            (loss / ACCUM).backward()
            total += float(loss.detach()) / ACCUM
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        ref_losses.append(total)

    model = _model()
    task = ToyTask(model)
    engine = PlainEngine(model, *_optim(model), max_grad_norm=1.0, device=torch.device("cpu"))
    loop = TrainLoop(
        total_steps=STEPS, grad_accum=ACCUM, log_every=2, eval_every=2, save_every=3, progress=False
    )
    assert loop.run(engine, task) == STEPS
    assert task.losses == ref_losses
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    # log every 2 and at the last step; eval every 2, save every 3; after the last step eval and save once
    assert task.calls == [
        ("log", 2),
        ("eval", 2),
        ("save", 3),
        ("log", 4),
        ("eval", 4),
        ("log", 5),
        ("eval", 5),
        ("save", 5),
    ]


def test_early_stop_resume_point_and_non_finite_loss():
    model = _model()
    task = ToyTask(model, stop_at=2)
    engine = PlainEngine(model, *_optim(model), max_grad_norm=0.0, device=torch.device("cpu"))
    loop = TrainLoop(total_steps=STEPS, grad_accum=ACCUM, eval_every=2, save_every=2, progress=False)
    assert loop.run(engine, task) == 2  # evaluated, saved, stopped
    assert [c for c in task.calls if c[0] != "log"] == [("eval", 2), ("save", 2)]

    # resumed from a checkpoint of the last step that was evaluated: nothing left to do
    task.calls.clear()
    assert loop.run(engine, task, start_step=STEPS, resumed=True, last_eval=STEPS) == STEPS
    assert task.calls == []

    task = ToyTask(model, nan_at=2)
    with pytest.raises(FloatingPointError, match="loss is nan at step 2: lower the learning rate"):
        loop.run(engine, task)
    assert ("save", 2) not in task.calls  # nothing is saved after a non-finite step


def test_pretraining_and_fine_tuning_run_on_the_one_loop(tmp_path, monkeypatch):
    from ernie_zoo.finetune import build_args, run_finetune
    from ernie_zoo.recipe_cli import load_recipe
    from ernie_zoo.training.pretrain import Pretraining, pretrain
    from ernie_zoo.training.recipe import PretrainRecipe
    from ernie_zoo.training.supervised import SupervisedTraining

    seen = []
    run = TrainLoop.run

    def record(self, engine, task, *args, **kwargs):
        seen.append(type(task))
        return run(self, engine, task, *args, **kwargs)

    monkeypatch.setattr(TrainLoop, "run", record)
    recipe = load_recipe(
        REPO / "recipes/pretrain/tiny-cpu.yaml",
        {
            "output_dir": str(tmp_path / "pt"),
            "data.files": [str(REPO / "tests/data/zh_sentences.txt")],
            "max_steps": 2,
            "logging.progress_bar": False,
        },
        cls=PretrainRecipe,
    )
    assert pretrain(recipe)["steps"] == 2

    data = REPO / "tests/data/finetune/sentiment.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["label"] == "positive"][:8] + [r for r in rows if r["label"] != "positive"][
        :8
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    args = build_args(
        {
            "data": {"train_file": str(train)},
            "model": {"vocab_size": 300, "config_overrides": {"hidden_size": 32, "num_hidden_layers": 1}},
            "method": {"method": "full"},
            "train": {"output_dir": str(tmp_path / "ft"), "max_steps": 2, "progress": False},
        }
    )
    assert run_finetune(args)["steps"] == 2
    assert seen == [Pretraining, SupervisedTraining]

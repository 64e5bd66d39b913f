"""Ship a zoo task model trained as a LoRA adapter on a shipped base (issue #46: every e5 default is a shipped e5
base, `ernie-zoo-e5-small-zh-pieces` or `ernie-zoo-e5-small-zh`, plus an adapter of a few MB, so the package carries
each base once).

    python recipes/zoo/ship_adapter.py ernie-zoo-e5-sentiment
    python recipes/zoo/ship_adapter.py ernie-zoo-e5-ie

For a model of `ADAPTERS` this
1. loads its run's unmerged adapter (`<run>/adapter`, written by `ernie-finetune`) onto the *shipped* base and checks
   that it computes what the run's own merged model computes (the run trained on a fresh conversion of the same
   source; a base that drifted would be caught here, not by users). A spec with `extract_rank` names a *full*
   fine-tuning run instead: its difference from the shipped base becomes a LoRA adapter of that rank
   (`ernie_zoo.finetune.lora_extract`), and the dev scores of the full model and of the adapter (the recipe's dev
   set, the task's own metric) go to training.json's `extracted`, which is how the rank is chosen;
2. for a classifier, fits a temperature on the named dev file (`ernie_zoo.evaluation.calibration`: NLL, golden
   section on log T) and folds it into the classifier the adapter carries, so Taskflow, peft and transformers'
   pipeline all give the calibrated probabilities; the dev NLL and ECE before and after go to training.json;
3. writes `ernie_zoo/zoo/<name>/`: adapter_config.json (base_model_name_or_path: the shipped base's name),
   adapter_model.safetensors, ernie_zoo_finetune.json (base, head, label fields), the base's tokenizer, training.json
   (recipe, steps, time, dev scores, calibration) and manifest.json, into a temporary sibling renamed into place.
Then `ernie-zoo eval` measures the shipped copy (test scores: once, after this).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from ship import SHIPPED, seal_model_dir  # recipes/zoo/ship.py, beside this script

from ernie_zoo.evaluation.calibration import classification_ece, fit_temperature, fold_temperature, nll
from ernie_zoo.finetune.export import CONFIG_NAME, META_NAME, load_adapter, load_base_model
from ernie_zoo.utils import atomic_directory, atomic_write_json
from ernie_zoo.zoo import shipped_model_dir, weights_sha256

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# name -> run directory (its adapter/), the shipped base, the recipe, the dev file the temperature is fitted on
# (sequence classifiers), and what the card says about the data.
ADAPTERS = {
    "ernie-zoo-e5-sentiment": {
        "run": "runs/zoo/sentiment-e5p-frames",
        "base": "ernie-zoo-e5-small-zh-pieces",
        "recipe": "recipes/zoo/sentiment-e5p-frames.yaml",
        "calibrate_on": "data/eval/sentiment_multidomain/dev.jsonl",
        "replaces": "ernie-zoo-e5-sentiment",
        "why": "the first release read Chinese one character at a time on the character base, not in the "
        "sentencepiece pieces e5 was trained on; the same recipe on the pieces base: multi-domain dev accuracy "
        "0.8212 -> 0.8709 (the first release replaced ernie-zoo-mini-sentiment, which read everyday good news as "
        "negative with 0.80-0.99 confidence, issue #46)",
    },
    "ernie-zoo-e5-ie": {
        "run": "runs/zoo/ie-e5-stage2",
        "base": "ernie-zoo-e5-small-zh",
        "recipe": "recipes/zoo/ie-e5-stage2.yaml",
        "calibrate_on": None,
        "replaces": "ernie-zoo-e5-ie",
        # the run started from the shipped release it replaces (the recipe's model_name_or_path)
        "continues": "ernie-zoo-e5-ie",
        "extract_rank": 96,
        "why": "the first release (recipes/zoo/ie-e5.yaml, 1,500 steps: a quarter of a pass over the mix, dev still "
        "rising) reached 84.5% of the NER default's MSRA F1 against the 90% of issue #48; this one continues it for "
        "2,000 more steps on the same mix",
    },
}

# (prompt, text) pairs the span extractor's adapter is checked on
SPAN_PROBE = [
    ("人物", "李明毕业于北京大学，现任京东总裁。"),
    ("地点", "京东在成都开设了新的物流中心。"),
    ("时间", "1998年3月5日上午，会议在北京召开。"),
    ("李明的职务", "国务院总理李明说，Python 3.12 发布了。"),
]


def _batches(tokenizer, texts: list[str], max_length: int, size: int = 32):
    for i in range(0, len(texts), size):
        enc = tokenizer(
            texts[i : i + size], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        )
        yield {
            k: v
            for k, v in enc.items()
            if k in ("input_ids", "attention_mask", "token_type_ids", "pinyin_ids")
        }


@torch.no_grad()
def _logits(model, tokenizer, texts: list[str], max_length: int) -> torch.Tensor:
    return torch.cat([model(**b).logits.float() for b in _batches(tokenizer, texts, max_length)])


@torch.no_grad()
def _probe_outputs(model, tokenizer, max_length: int) -> torch.Tensor:
    """What the model computes on a few fixed inputs: a classifier's logits on four texts, a span extractor's
    start and end logits on `SPAN_PROBE` (one padded batch)."""
    if _is_span_extractor(model):
        enc = tokenizer(
            [p for p, _ in SPAN_PROBE],
            [t for _, t in SPAN_PROBE],
            truncation="only_second",
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        keep = ("input_ids", "attention_mask", "token_type_ids", "pinyin_ids")
        out = model(**{k: v for k, v in enc.items() if k in keep})
        return torch.cat([out.start_logits.float(), out.end_logits.float()], dim=-1)
    probe = [
        "这家餐厅的服务非常棒！",
        "快递太慢了，一周才到。",
        "京东在成都开设了新的物流中心。",
        "Python 3.12 发布了",
    ]
    return _logits(model, tokenizer, probe, max_length)


def _is_span_extractor(model) -> bool:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(inner).__name__ == "ErnieZooForSpanExtraction"


def _classifier(model) -> torch.nn.Linear:
    """The classifier Linear the adapter trains (peft's modules_to_save copy)."""
    wrapper = model.get_submodule("base_model.model.classifier")
    return wrapper.modules_to_save["default"]


def ship_adapter(name: str, out_root: Path = SHIPPED) -> Path:
    spec = ADAPTERS[name]
    run = Path(spec["run"])
    args = json.loads((run / "eval_results.json").read_text(encoding="utf-8"))
    max_length = int(json.loads(json.dumps(_recipe_value(spec["recipe"], "data", "max_length", 128))))
    base_dir = shipped_model_dir(spec["base"])
    base_tok = _tokenizer(base_dir)
    from ernie_zoo.finetune.export import load_finetuned

    merged, run_tok = load_finetuned(run)
    extraction = None
    if spec.get("extract_rank"):
        # a full fine-tune: its differences from the shipped base as a LoRA adapter, the rank checked on dev
        model, meta, extraction = _extracted(spec, run, merged, base_dir, base_tok)
    else:
        src = run / "adapter"
        meta = json.loads((src / META_NAME).read_text(encoding="utf-8"))
        model = load_adapter(load_base_model(base_dir, meta["architecture"], meta["config_updates"]), src)
    model.eval()
    # 1. the adapter on the shipped base = the run's merged model (trained on a fresh conversion)
    a = _probe_outputs(model, base_tok, max_length)
    b = _probe_outputs(merged, run_tok, max_length)
    if extraction is not None:
        extraction["probe_max_abs_logit_diff"] = round(float((a - b).abs().max()), 4)
        print(f"{name}: extracted adapter vs the full model: {extraction}")
    elif a.shape != b.shape or not torch.allclose(a, b, atol=1e-3, rtol=1e-3):
        raise SystemExit(
            f"{name}: the adapter on the shipped base {spec['base']} differs from the run's merged model "
            f"(max |diff| {float((a - b).abs().max()) if a.shape == b.shape else a.shape}): the base drifted"
        )
    calibration = None
    if spec["calibrate_on"]:
        rows = [
            json.loads(x) for x in Path(spec["calibrate_on"]).read_text(encoding="utf-8").splitlines() if x
        ]
        label2id = {v: int(k) for k, v in meta["config_updates"]["id2label"].items()}
        labels = torch.tensor([label2id[r["label"]] for r in rows])
        logits = _logits(model, base_tok, [r["text"] for r in rows], max_length)
        t = fit_temperature(logits, labels)
        calibration = {
            "method": "temperature scaling (Guo et al. 2017), folded into the classifier",
            "fitted_on": spec["calibrate_on"],
            "examples": len(rows),
            "temperature": round(t, 4),
            "dev_nll": {
                "before": round(nll(logits, labels, 1.0), 4),
                "after": round(nll(logits, labels, t), 4),
            },
            "dev_ece": {
                "before": round(classification_ece(logits, labels), 4),
                "after": round(classification_ece(logits, labels, t), 4),
            },
        }
        fold_temperature(_classifier(model), t)
        check = _logits(model, base_tok, [r["text"] for r in rows[:8]], max_length)
        assert torch.allclose(check, logits[:8] / t, atol=1e-4), (
            "folding the temperature changed more than the scale"
        )
        print(f"{name}: temperature {t:.3f} on {len(rows)} dev texts; {calibration}")

    target = out_root / name
    with atomic_directory(target) as tmp:
        model.save_pretrained(str(tmp), save_embedding_layers=False)  # the base holds them
        _to_fp16(tmp / "adapter_model.safetensors")  # as every shipped model: fp16 on disk, fp32 when loaded
        config = json.loads((tmp / CONFIG_NAME).read_text(encoding="utf-8"))
        config["base_model_name_or_path"] = spec["base"]
        if isinstance(config.get("target_modules"), list):  # peft writes its set in hash order: one order per run
            config["target_modules"] = sorted(config["target_modules"])
        atomic_write_json(tmp / CONFIG_NAME, config, sort_keys=True)
        atomic_write_json(tmp / META_NAME, {**meta, "base_model": spec["base"]})
        for f in TOKENIZER_FILES:
            shutil.copyfile(base_dir / f, tmp / f)
        info = {
            "base_model": spec["base"],
            "recipe": spec["recipe"],
            "command": f"ernie-finetune {spec['recipe']}; python recipes/zoo/ship_adapter.py {name}",
            "method": args.get("method"),
            "trainable_params": args.get("trainable_params"),
            "steps": args.get("steps"),
            "best_step": args.get("best_step"),
            "stopped_early": args.get("stopped_early"),
            "train_seconds": round(float(args.get("train_seconds", 0.0)), 1),
            "metric": args.get("metric"),
            "dev": {k: v for k, v in (args.get("dev") or {}).items() if not isinstance(v, dict)},
            "calibration": calibration,
            "extracted": extraction,
            "previous_release": _previous_release(spec),
            "continued_from": _continued_from(spec),
            "machine": "x86_64 CPU, 2 cores, shared with other jobs",
        }
        atomic_write_json(tmp / "training.json", info)
        size = seal_model_dir(tmp, name)
    print(f"{name}: adapter on {spec['base']} -> {target} ({size / 1e6:.1f} MB)")
    return target


def _extracted(spec: dict, run: Path, tuned, base_dir: Path, tokenizer):
    """(the LoRA adapter model extracted from the full run `tuned` at spec["extract_rank"], its meta, a record of
    the extraction with the dev scores of both models on the recipe's dev set: the rank is chosen on dev)."""
    from ernie_zoo.finetune import build_args
    from ernie_zoo.finetune.lora_extract import lora_from_difference
    from ernie_zoo.finetune.objectives import make_objective

    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    architecture = config["architectures"][0]
    updates = {k: config[k] for k in ("taskflow_max_seq_len", "id2label", "label2id") if k in config}
    recipe = build_args(spec["recipe"]).resolved()
    meta = {
        "task": recipe.task,
        "method": "lora",
        "architecture": architecture,
        "base_model": spec["base"],
        "config_updates": updates,
    }
    base = load_base_model(base_dir, architecture, updates)
    model, errors = lora_from_difference(base, tuned, spec["extract_rank"])
    objective = make_objective(recipe)
    objective.read()
    examples = objective.splits["dev"]
    features = objective.encode(examples, tokenizer)
    dev = {
        label: objective.evaluate(m, features, examples, tokenizer, 64, torch.device("cpu"))
        for label, m in (("full", tuned), ("adapter", model))
    }
    record = {
        "from": "full fine-tuning (the run's model), as LoRA on the shipped base (ernie_zoo.finetune.lora_extract)",
        "rank": spec["extract_rank"],
        "relative_error": {
            "mean": round(sum(errors.values()) / len(errors), 4),
            "max": round(max(errors.values()), 4),
        },
        "dev": {k: {m: round(v[m], 4) for m in ("precision", "recall", "f1")} for k, v in dev.items()},
        "dev_examples": len(examples),
    }
    return model, meta, record


def _to_fp16(path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file({k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}, str(path), metadata)


def _previous_release(spec: dict) -> dict | None:
    """training.json's `previous_release` (read by the card): the replaced model's weights, recipe and test scores
    as bench/results/zoo_eval.json recorded them."""
    name = spec.get("replaces")
    if not name:
        return None
    from ernie_zoo.evaluation.cards import release_scores

    r = json.loads(Path("bench/results/zoo_eval.json").read_text(encoding="utf-8"))["models"][name]
    scores = release_scores(r)
    training = r.get("training") or {}
    recipe = training.get("recipe") or (training.get("stages") or [{}])[-1].get("recipe", "n/a")
    return {
        "weights": f"{name} {r.get('weights_sha256', '')[:8]}",
        "recipe": recipe,
        "why": spec["why"],
        "scores": scores,
    }


def _continued_from(spec: dict) -> dict | None:
    """training.json's `continued_from`: the shipped model the run started from (spec["continues"]), its weights
    and how it was trained (its own training.json), so the record names every stage; None for a run from the base."""
    name = spec.get("continues")
    if not name:
        return None
    shipped = SHIPPED / name
    training = json.loads((shipped / "training.json").read_text(encoding="utf-8"))
    keep = ("recipe", "command", "method", "steps", "train_seconds", "dev", "extracted", "continued_from")
    return {"weights": f"{name} {(weights_sha256(shipped) or '')[:8]}", **{k: training.get(k) for k in keep}}


def _tokenizer(directory: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def _recipe_value(recipe: str, section: str, key: str, default):
    import yaml

    data = yaml.safe_load(Path(recipe).read_text(encoding="utf-8")) or {}
    return (data.get(section) or {}).get(key, default)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", choices=sorted(ADAPTERS))
    ap.add_argument("--out", type=Path, default=SHIPPED)
    args = ap.parse_args(argv)
    for name in args.names:
        ship_adapter(name, args.out)


if __name__ == "__main__":
    sys.exit(main())

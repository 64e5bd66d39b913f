"""Taskflow on torch fp32 against ONNX Runtime fp32 and int8, and torch int8, one thread.

For each shipped encoder head (sentiment, NER accurate and fast, fill-mask, feature extraction, CSC) the model is
exported (`ernie_zoo.taskflow.onnx.export_onnx`) into a temporary directory, and the same texts (the test-suite's
sentences, reviews and NER sentences, their pairs and halves: 250+ texts of 5 to 90 characters) go through
`Taskflow(task, model)` and `Taskflow(task, task_path=EXPORTED, backend="onnxruntime")` in one call each,
interleaved over --rounds rounds (median reported). Results are ratios: torch fp32 time / backend time (> 1: the
backend is faster), and whether the results agree (fp32: labels, entities, corrections identical and scores within
1e-4 of torch fp32; int8: ONNX Runtime int8 against torch int8, labels / entities / corrections identical).

    OMP_NUM_THREADS=1 python bench/onnx_speed.py               # ~3 min on one idle core
    OMP_NUM_THREADS=1 python bench/onnx_speed.py --rounds 1 --out /tmp/onnx_speed.json
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
OUT = REPO / "bench/results/onnx_speed.json"


def _timed(flow, texts) -> tuple[float, list]:
    start = time.perf_counter()
    out = flow(texts)
    return time.perf_counter() - start, out


def _same_labels(a: list, b: list) -> bool:
    """Labels, entities, corrections and candidate tokens identical (scores ignored: int8 rounds differently)."""

    def strip(x):
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                if not isinstance(v, float) and k not in ("score", "probability")
            }
        if isinstance(x, list):
            return [strip(v) for v in x if not isinstance(v, float)]
        return x

    return strip(a) == strip(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.disable(logging.WARNING)

    import onnxruntime
    from test_onnx import HEADS, ZOO, _close, _inputs

    from ernie_zoo.taskflow import Taskflow
    from ernie_zoo.taskflow.onnx import export_onnx

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task, model, options in HEADS:
            texts = _inputs(task)
            path = export_onnx(ZOO / model, Path(tmp) / f"{task}-{model}", task=task)
            flows = {
                "torch_fp32": Taskflow(task, model, **{**options, "precision": "fp32"}),
                "ort_fp32": Taskflow(task, task_path=path, backend="onnxruntime", precision="fp32"),
                "torch_int8": Taskflow(task, model, precision="int8"),
                "ort_int8": Taskflow(task, task_path=path, backend="onnxruntime", precision="int8"),
            }
            times: dict[str, list[float]] = {name: [] for name in flows}
            outputs = {}
            for flow in flows.values():
                flow(texts[:8])  # warm-up
            for _ in range(args.rounds):
                for name, flow in flows.items():
                    seconds, outputs[name] = _timed(flow, texts)
                    times[name].append(seconds)
            median = {name: statistics.median(t) for name, t in times.items()}
            try:
                tol = 2e-4 if task == "text_correction" else 1e-4
                _close(outputs["torch_fp32"], outputs["ort_fp32"], task, tol=tol)
                agree = True
            except AssertionError:
                agree = False
            row = {
                "task": task,
                "model": model,
                "texts": len(texts),
                "torch_fp32_s": round(median["torch_fp32"], 3),
                "ort_fp32_speedup": round(median["torch_fp32"] / median["ort_fp32"], 2),
                "ort_fp32_same_results": agree,
            }
            row["torch_int8_speedup"] = round(median["torch_fp32"] / median["torch_int8"], 2)
            row["ort_int8_speedup"] = round(median["torch_fp32"] / median["ort_int8"], 2)
            row["ort_int8_vs_torch_int8"] = round(median["torch_int8"] / median["ort_int8"], 2)
            row["ort_int8_same_labels_as_torch_int8"] = _same_labels(
                outputs["torch_int8"], outputs["ort_int8"]
            )
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    result = {
        "what": "Taskflow time on torch fp32 / time on the backend (> 1: faster), one thread, median of rounds",
        "command": "OMP_NUM_THREADS=1 python bench/onnx_speed.py " + " ".join(sys.argv[1:]),
        "rounds": args.rounds,
        "threads": 1,
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        "machine": platform.machine(),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

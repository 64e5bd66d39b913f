"""What the shipped NER ensemble costs: `Taskflow("ner")` on ernie-zoo-mini-ner (two taggers, mean emissions)
against the same Taskflow on one of its taggers alone, and the load time of the int8 directory against an fp16 one.

The single tagger is taken out of the shipped ensemble (`model.member(0)`, tagger A, saved as a plain fp16
directory with the same tokenizer and lexicon), so both systems read the same inputs the same way; only the number
of encoders differs. Texts: the first --texts sentences of MSRA test, in --batch-size calls. The two run
interleaved over --rounds rounds (median reported), so drifting background load hits them alike. Reported:
texts/s of each, the ensemble's time per text relative to one tagger, entity F1 of each on these sentences, and
load seconds (a fresh process-level cache each time).

    python bench/bench_ner_ensemble.py                    # about 3 min on 2 CPU cores
    python bench/bench_ner_ensemble.py --texts 200 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NER_TEST = Path.home() / ".cache/ernie_zoo/datasets/ner/test.jsonl"
SHIPPED = REPO / "ernie_zoo/zoo/ernie-zoo-mini-ner"
OUT = REPO / "bench/results/ner_ensemble.json"


def _f1(results, records) -> float:
    gold = {(i, e["start"], e["end"], e["type"]) for i, r in enumerate(records) for e in r["entities"]}
    pred = {(i, e["start"], e["end"], e["type"]) for i, r in enumerate(results) for e in r["entities"]}
    tp = len(gold & pred)
    return 2 * tp / max(len(gold) + len(pred), 1)


def _load(path: Path):
    from ernie_zoo import Taskflow
    from ernie_zoo.taskflow.models import clear_model_cache

    clear_model_cache()
    t0 = time.perf_counter()
    flow = Taskflow("ner", task_path=str(path), entity_only=True)
    return flow, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    import torch

    from ernie_zoo.models.ensemble import ErnieZooEnsembleForTokenClassificationCRF
    from ernie_zoo.utils import atomic_write_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    records = [json.loads(line) for line in NER_TEST.read_text(encoding="utf-8").splitlines()[: args.texts]]
    texts = [r["text"] for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        ensemble = ErnieZooEnsembleForTokenClassificationCRF.from_pretrained(SHIPPED, dtype=torch.float32)
        single_dir = Path(tmp) / "tagger-a"
        ensemble.member(0).half().save_pretrained(single_dir)
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(SHIPPED)).save_pretrained(single_dir)
        systems = {"ensemble (2 taggers, int8 on disk)": SHIPPED, "tagger A alone (fp16 on disk)": single_dir}
        flows, loads = {}, {name: [] for name in systems}
        for name, path in systems.items():
            for _ in range(2):  # the second load is the one timed (file cache warm)
                flows[name], seconds = _load(path)
            loads[name].append(seconds)
        times: dict[str, list[float]] = {name: [] for name in systems}
        outputs = {}
        flows[next(iter(systems))](texts[: args.batch_size])  # warm-up
        for _ in range(args.rounds):
            for name, flow in flows.items():
                t0 = time.perf_counter()
                outputs[name] = [
                    r
                    for i in range(0, len(texts), args.batch_size)
                    for r in flow(texts[i : i + args.batch_size])
                ]
                times[name].append(time.perf_counter() - t0)
    rows = {}
    for name in systems:
        seconds = statistics.median(times[name])
        rows[name] = {
            "texts_per_s": round(len(texts) / seconds, 1),
            "seconds_median": round(seconds, 2),
            "seconds_all_rounds": [round(t, 2) for t in times[name]],
            "entity_f1_on_these_texts": round(_f1(outputs[name], records), 4),
            "load_seconds": round(loads[name][-1], 2),
        }
    ens, one = (rows[n] for n in systems)
    result = {
        "what": "Taskflow('ner') on the shipped ensemble vs one of its taggers alone, same inputs and settings",
        "texts": f"first {len(texts)} sentences of MSRA test ({sum(map(len, texts)):,} characters)",
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "torch_threads": args.threads,
        "machine": f"{platform.machine()} CPU, {platform.python_version()}, torch {torch.__version__}",
        "systems": rows,
        "ensemble_time_per_text_vs_one_tagger": round(one["texts_per_s"] / ens["texts_per_s"], 2),
        "command": "python bench/bench_ner_ensemble.py "
        + f"--texts {args.texts} --batch-size {args.batch_size} --rounds {args.rounds} --threads {args.threads}",
    }
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

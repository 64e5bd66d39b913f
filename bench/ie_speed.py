"""Information-extraction speed beside the NER task, and over text length (issue #48).

Systems, on the same texts in the same process, interleaved over --rounds rounds (median reported, so drifting
background load hits them alike; one warm-up call each first), each given the whole list in one call:

- `Taskflow("information_extraction", schema=["人物", "地点", "机构"])` (the default model, or --model), fp32 and
  int8: three prompts per text, so three encoder passes per chunk;
- `Taskflow("ner")` (ernie-zoo-mini-ner, its default precision) and `Taskflow("ner", mode="fast")`: one pass, the
  three types at once. The ratio is what a user pays for asking types by name instead of a fixed tag set.

Workloads: `sentences`, the first --texts sentences of MSRA test; `length`, one document per length of --lengths
characters (consecutive MSRA test sentences joined, cut at the length), timed alone: characters per second should
stay flat if chunking is linear in the text's length.

    python bench/ie_speed.py                           # about 10 min on 2 idle CPU cores
    python bench/ie_speed.py --texts 40 --lengths 500 2000 --rounds 1 --out /tmp/ie_speed.json   # a smoke run
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
OUT = REPO / "bench/results/ie_speed.json"
SCHEMA = ["人物", "地点", "机构"]


def _timed(fn, texts) -> float:
    t0 = time.perf_counter()
    fn(texts)
    return time.perf_counter() - t0


def _document(texts: list[str], length: int) -> str:
    out, i = "", 0
    while len(out) < length:
        out += texts[i % len(texts)]
        i += 1
    return out[:length]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="IE model directory (default: the task's default model)"
    )
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--lengths", type=int, nargs="+", default=[500, 2000, 8000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from ernie_zoo import Taskflow
    from ernie_zoo.data.labelled import DEFAULT_DATASETS, load_split
    from ernie_zoo.utils import atomic_write_json

    texts = [r["text"] for r in load_split("ner", "test", DEFAULT_DATASETS)]
    sentences = texts[: args.texts]
    where = {"task_path": args.model} if args.model else {}
    systems = {
        "ie fp32": Taskflow("information_extraction", schema=SCHEMA, precision="fp32", **where),
        "ie int8": Taskflow("information_extraction", schema=SCHEMA, precision="int8", **where),
        "ner (default)": Taskflow("ner"),
        "ner fast (default)": Taskflow("ner", mode="fast"),
    }
    for flow in systems.values():
        flow(sentences[:4])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, flow in systems.items():
            times[name].append(_timed(flow, sentences))
    chars = sum(map(len, sentences))
    rows = {
        name: {
            "seconds_median": round(statistics.median(t), 3),
            "texts_per_s": round(len(sentences) / statistics.median(t), 2),
            "chars_per_s": round(chars / statistics.median(t), 1),
        }
        for name, t in times.items()
    }
    reference = rows["ner (default)"]["texts_per_s"]
    for row in rows.values():
        row["vs_ner_default"] = round(row["texts_per_s"] / reference, 3)

    ie = systems["ie fp32"]
    length_rows = []
    for length in args.lengths:
        doc = _document(texts, length)
        ie([doc[:200]])
        seconds = statistics.median(_timed(ie, [doc]) for _ in range(args.rounds))
        length_rows.append(
            {"chars": length, "seconds_median": round(seconds, 3), "chars_per_s": round(length / seconds, 1)}
        )
    first = length_rows[0]["chars_per_s"]
    for row in length_rows:
        row["chars_per_s_vs_shortest"] = round(row["chars_per_s"] / first, 3)

    result = {
        "command": "python bench/ie_speed.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v if not isinstance(v, list) else ' '.join(map(str, v))}"
            for k, v in vars(args).items()
            if k != "out" and v is not None
        ),
        "schema": SCHEMA,
        "model": args.model or "the information_extraction default",
        "texts": len(sentences),
        "threads": args.threads,
        "rounds": args.rounds,
        "sentences": rows,
        "length": length_rows,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, shared with other jobs",
        "torch": torch.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

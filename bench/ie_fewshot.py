"""Few-shot relation extraction on the hand-labelled relation set (data/eval/relations, issue #48): a learning
curve of triple F1 and entity F1 against the number of training sentences.

For each point n of --points: the first n sentences of the set's non-test pool (``dev.jsonl``: the old dev split
plus the train pool, never the test split), in a seeded order (``blake2b(f"{seed}\\0{text}")``), are written as a
doccano file and fine-tuned with ``ernie-finetune --task information_extraction`` from --base (LoRA, the method
docs/information_extraction.md recommends; its learning rate from the method registry; no dev split, the model
after the last step is kept), then scored on the test split with ``ernie_zoo.evaluation.relations`` (the same
Taskflow decoding and schema as ``python -m ernie_zoo.evaluation.relations --model DIR --splits test``).

A 0-shot row (--zero-shot) scores the information_extraction task's shipped default model (ernie-zoo-e5-ie).

Budget: on the shared 2-core machine (one torch thread, nice 10) a step of 8 prompt examples took 2.5-5 s, so
10 epochs do not fit: points run with --max-steps (recorded with the passes it allowed). Runs of 2026-12 on
ernie-zoo-mini-zh (bench/results/ie_fewshot.json): LoRA at its default rate (1e-3) for 48 steps of 32, and at 5e-3
(the rate the task's tests train at) for 240 steps of 8, both found nothing on test at n=25: every pointer stays
below position_prob. bench/ie_pointer_probe.py shows why: the 5e-3 run collapsed the encoder (every token the same
hidden state), the 1e-3 run nearly so (gold starts still rank above other tokens, AUC 0.68, at probability 0.014).

Each point runs in its own subprocess; its record (n, seed, epochs, steps, minutes, triple P/R/F1, entity F1,
base) is merged into --out after it finishes (temp file + rename), so an interrupted run keeps its points and a
second run with the same settings redoes only the missing ones. Timings are wall minutes on whatever machine ran
it (with the thread count recorded): compare only rows of one run.

    nice -n 10 python bench/ie_fewshot.py --base ernie-zoo-mini-zh --points 25 50 100 200 --threads 1 \
        --max-steps 240 --batch-size 8
    python bench/ie_fewshot.py --points 25 --epochs 1 --out /tmp/ie_fewshot_smoke.json     # a smoke run
    python bench/ie_fewshot.py --table                  # the results as the table in docs/information_extraction.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ernie_zoo.data.labelled import load_jsonl, write_jsonl  # noqa: E402
from ernie_zoo.evaluation.relations import RELATIONS_DIR  # noqa: E402

OUT = REPO / "bench" / "results" / "ie_fewshot.json"


def pool_order(records: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The non-test pool in the seeded order the points take their first n from."""
    return sorted(
        records, key=lambda r: hashlib.blake2b(f"{seed}\0{r['text']}".encode(), digest_size=16).digest()
    )


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def _score(model_dir: str, data_dir: Path, threads: int) -> dict[str, Any]:
    """evaluate_relations on the test split, in a subprocess with ``threads`` torch threads."""
    code = (
        "import json,sys,torch;torch.set_num_threads(int(sys.argv[3]));"
        "from ernie_zoo.evaluation.relations import evaluate_relations as e;"
        "print('SCORES'+json.dumps(e(sys.argv[1],('test',),sys.argv[2])['test'],ensure_ascii=False))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, model_dir, str(data_dir), str(threads)],
        capture_output=True,
        text=True,
        env=_env(threads),
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"scoring {model_dir} failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("SCORES"))
    return json.loads(line[len("SCORES") :])


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _row(scores: dict[str, Any]) -> dict[str, Any]:
    t, e = scores["triples"], scores["entities"]
    return {
        "triple_precision": round(t["precision"], 4),
        "triple_recall": round(t["recall"], 4),
        "triple_f1": round(t["f1"], 4),
        "triple_counts": {k: t[k] for k in ("tp", "pred", "gold")},
        "entity_precision": round(e["precision"], 4),
        "entity_recall": round(e["recall"], 4),
        "entity_f1": round(e["f1"], 4),
        "triple_f1_per_relation": {k: round(v["f1"], 4) for k, v in t["per_type"].items()},
        "entity_f1_per_type": {k: round(v["f1"], 4) for k, v in e["per_type"].items()},
    }


def run_point(n: int, pool: list[dict[str, Any]], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    if n > len(pool):
        raise SystemExit(f"--points {n}: the non-test pool has only {len(pool)} sentences")
    train = work / f"train_{n}.jsonl"
    sha = write_jsonl(train, pool[:n])
    out_dir = work / f"model_{n}"
    cmd = [
        sys.executable, "-m", "ernie_zoo.finetune.cli",
        "--task", "information_extraction",
        "--train_file", str(train),
        "--model_name_or_path", args.base,
        "--output_dir", str(out_dir),
        "--method.method", args.method,
        "--train.epochs", str(args.epochs),
        "--train.seed", str(args.seed),
        "--data.dev_fraction", "0",
        "--train.num_threads", str(args.threads),
    ]  # fmt: skip
    if args.max_steps:
        cmd += ["--train.max_steps", str(args.max_steps)]
    if args.batch_size:
        cmd += ["--train.batch_size", str(args.batch_size)]
    if args.lr:
        cmd += ["--train.learning_rate", str(args.lr)]
    print(f"[n={n}] {' '.join(cmd[2:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(args.threads), check=False)
    train_min = (time.perf_counter() - t0) / 60
    if proc.returncode:
        raise RuntimeError(f"fine-tuning n={n} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout[proc.stdout.index("{") : proc.stdout.rindex("}") + 1])
    counted = re.search(r"prompt examples: \{'train': (\d+)", proc.stderr)  # the objective's log line
    examples = int(counted.group(1)) if counted else None
    t1 = time.perf_counter()
    scores = _score(str(out_dir), args.data_dir, args.threads)
    return {
        "n": n,
        "base": args.base,
        "base_sha256": args.base_sha256,
        "seed": args.seed,
        "method": args.method,
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "steps": summary["steps"],
        "prompt_examples": examples,
        "passes": round(summary["steps"] * (args.batch_size or 32) / examples, 2) if examples else None,
        "trainable_fraction": summary.get("trainable_fraction"),
        "train_minutes": round(train_min, 2),
        "eval_minutes": round((time.perf_counter() - t1) / 60, 2),
        "train_sha256": sha,
        "command": "python bench/ie_fewshot.py " + " ".join(sys.argv[1:]),
        **_row(scores),
    }


def _key(r: dict[str, Any]) -> tuple:
    """What makes two points the same run (a rerun with these settings skips it)."""
    fields = ("base", "base_sha256", "n", "seed", "method", "epochs", "max_steps", "batch_size", "learning_rate")
    return tuple(r.get(k) for k in fields)


def table(result: dict[str, Any]) -> str:
    """The learning curve as the markdown table docs/information_extraction.md shows."""
    lines = [
        "| n | base | method, batch, lr | steps (passes) | train min | triple P / R / F1 | entity F1 |",
        "|---|---|---|---|---|---|---|",
    ]
    zero = result.get("zero_shot")
    if zero:
        if "triple_f1" in zero:
            lines.append(
                f"| 0 | {zero['default_model']} ({(zero.get('weights_sha256') or 'unknown')[:8]}, the task's default) | - | - | - | {zero['triple_precision']:.3f} / "
                f"{zero['triple_recall']:.3f} / {zero['triple_f1']:.3f} | {zero['entity_f1']:.3f} |"
            )
        else:
            lines.append("| 0 | none: the task ships no default model | - | - | - | - | - |")
    for r in result.get("points", []):
        lr = r.get("learning_rate") or "method default"
        passes = f" ({r['passes']})" if r.get("passes") else ""
        lines.append(
            f"| {r['n']} | {r['base']} ({(r.get('base_sha256') or 'unknown')[:8]}) | {r['method']}, {r.get('batch_size') or 32}, {lr} | {r['steps']}{passes} | "
            f"{r['train_minutes']} | {r['triple_precision']:.3f} / {r['triple_recall']:.3f} / "
            f"{r['triple_f1']:.3f} | {r['entity_f1']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--base", default="ernie-zoo-mini-zh", help="the encoder to fine-tune (a shipped name or dir)"
    )
    p.add_argument("--points", type=int, nargs="+", default=[25, 50, 100, 200], help="training sentences")
    p.add_argument("--seed", type=int, default=42, help="pool order and training seed")
    p.add_argument("--method", default="lora", help="ernie-finetune method (lora: the docs' recommendation)")
    p.add_argument("--epochs", type=float, default=10.0, help="passes over the n sentences' prompt examples")
    p.add_argument("--max-steps", type=int, default=None, help="cap on optimizer steps (wins over --epochs)")
    p.add_argument(
        "--batch-size", type=int, default=None, help="prompt examples per step (default: the recipe's 32)"
    )
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the method's)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (training and scoring)")
    p.add_argument("--data-dir", type=Path, default=RELATIONS_DIR, help="the relation set's directory")
    p.add_argument("--zero-shot", action="store_true", help="also score the task's shipped default model")
    p.add_argument("--work-dir", type=Path, default=None, help="where training files and models go (temp)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--table", action="store_true", help="print --out as a markdown table and stop")
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(args.out.read_text(encoding="utf-8"))))
        return 0
    from ernie_zoo.zoo import resolve_model_source, weights_sha256  # noqa: PLC0415

    source = resolve_model_source(args.base)
    # which release of the base the points are measured from: a new release of a shipped model is another run
    args.base_sha256 = weights_sha256(source.location) if source.kind != "hub" else None

    pool = pool_order(load_jsonl(args.data_dir / "dev.jsonl"), args.seed)
    test_sha = hashlib.sha256((args.data_dir / "test.jsonl").read_bytes()).hexdigest()
    result = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    if result.get("test_sha256") not in (None, test_sha):
        raise SystemExit(f"{args.out} was scored on another test split; use another --out")
    result.update(
        {
            "what": "few-shot relation extraction on data/eval/relations: train on the first n sentences of the "
            "seeded non-test pool (dev.jsonl), score triples and entities on test.jsonl",
            "command": "python bench/ie_fewshot.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "pool_sentences": len(pool),
            "test_sha256": test_sha,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), torch threads {args.threads}",
        }
    )
    points = {_key(r): r for r in result.get("points", [])}

    if args.zero_shot:
        import ernie_zoo.taskflow  # noqa: F401, PLC0415  (registers the tasks)
        from ernie_zoo.taskflow.task import get_task  # noqa: PLC0415

        default = get_task("information_extraction").default_model
        result["zero_shot"] = {"default_model": default}
        if default is None:
            result["zero_shot"]["note"] = "none: the information_extraction task ships no default model yet"
        else:
            location = resolve_model_source(default).location  # the shipped directory
            result["zero_shot"]["weights_sha256"] = weights_sha256(location)
            result["zero_shot"].update(_row(_score(location, args.data_dir, args.threads)))
        _write_json(args.out, result)

    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        for n in args.points:
            key = _key({"n": n, **vars(args), "batch_size": args.batch_size, "learning_rate": args.lr})
            if key in points:
                print(f"[n={n}] done before: triple F1 {points[key]['triple_f1']}", flush=True)
                continue
            rec = run_point(n, pool, args, Path(tmp))
            points[key] = rec
            result["points"] = sorted(points.values(), key=lambda r: (r["base"], r["n"], r["seed"]))
            _write_json(args.out, result)
            print(
                f"[n={n}] steps {rec['steps']}, {rec['train_minutes']} min: triple F1 {rec['triple_f1']} "
                f"(P {rec['triple_precision']} R {rec['triple_recall']}), entity F1 {rec['entity_f1']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

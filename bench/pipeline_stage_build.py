"""Peak memory of building a pipeline stage alone vs the whole model (`distributed.backend: pipeline`).

Each measurement runs in its own process (peak RSS is per process): the `1b` encoder preset (1.3B parameters,
vocabulary 40,000) built whole, as one process does, and one of 8 pipeline stages built as a pipeline rank does
(meta device, `prune_to_stages`, `models.seeded_init.materialize`), first and last stage. The stage's weights are
the whole model's there (tests/test_seeded_init.py); what this measures is what a rank allocates to get them.

    python bench/pipeline_stage_build.py            # writes bench/results/pipeline_stage_build.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "pipeline_stage_build.json"
PRESET, VOCAB, STAGES = "1b", 40_000, 8


def _measure(mode: str, stage: int) -> dict:
    import torch

    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.models.seeded_init import materialize
    from ernie_zoo.parallel.pipeline import ENCODER_SPLIT, prune_to_stages
    from ernie_zoo.training.build import build_model

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    config = preset_config(PRESET, vocab_size=VOCAB)
    tables = {
        k: torch.zeros(VOCAB, dtype=torch.long)
        for k in ("default_pinyin_ids", "radical_ids", "stroke_counts")
    }
    tables["stroke_seqs"] = torch.zeros(VOCAB, 32, dtype=torch.long)
    start = time.perf_counter()
    model = build_model(config, tables, seed=0, meta=mode == "stage")
    if mode == "stage":
        prune_to_stages(model, ENCODER_SPLIT, [stage], STAGES)
        materialize(model, seed=0)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "build": mode if mode == "whole" else f"stage {stage} of {STAGES}",
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak / 1024),
        "rss_before_build_mib": round(before / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("MODE", "STAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_measure(args.one[0], int(args.one[1]))))
        return
    rows = []
    for mode, stage in (("whole", 0), ("stage", 0), ("stage", STAGES - 1)):
        out = subprocess.run(
            [sys.executable, __file__, "--one", mode, str(stage)], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1])
    RESULTS.write_text(
        json.dumps({"preset": PRESET, "vocab_size": VOCAB, "rows": rows}, indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

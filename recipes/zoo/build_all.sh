#!/usr/bin/env bash
# Rebuild the zoo from scratch, step by step (each step is idempotent and resumable):
#   1. fetch + clean the offline corpora and the labelled splits      -> ~/.cache/ernie_zoo/{corpora,datasets}
#   2. mix the pretraining corpus under per-source budgets             -> runs/zoo/data/pretrain-mix.txt
#   3. pretrain ernie-zoo-mini-zh (resumes from runs/zoo/pretrain)     -> runs/zoo/pretrain/checkpoint-*
# Fine-tuning (sentiment, NER, poetry), evaluation against the baselines and the model cards are the next steps
# of issue #7 and are added here as they land.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}

echo "== 1. corpora and labelled splits"
$PY scripts/prepare_corpora.py

echo "== 2. pretraining mixture"
$PY - <<'PYEOF'
import json
from pathlib import Path

from ernie_zoo.data.mix import mix_corpus

cfg = json.loads(Path("recipes/zoo/corpus.json").read_text(encoding="utf-8"))
manifest = mix_corpus(
    Path.home() / ".cache/ernie_zoo/corpora", cfg["budgets"], "runs/zoo/data/pretrain-mix.txt", seed=cfg["seed"]
)
print(f"mixture: {manifest['lines']:,} lines, {manifest['chars']:,} chars, sha256 {manifest['sha256'][:16]}")
PYEOF

echo "== 3. pretrain ernie-zoo-mini-zh"
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini.yaml "$@"

#!/usr/bin/env bash
# Rebuild every shipped zoo model from scratch, step by step (each step is idempotent and resumable: rerun the
# script after a crash and finished steps are skipped, interrupted runs resume from their last checkpoint):
#   1. fetch + clean the offline corpora and the labelled splits      -> ~/.cache/ernie_zoo/{corpora,datasets}
#   2. mix the pretraining corpus under per-source budgets             -> runs/zoo/data/pretrain-mix.txt
#   3. pretrain ernie-zoo-mini-zh, stages 1, 2 (packed), 3, 4, 5, 6, 7 -> runs/zoo/pretrain{,2,3,4,5,6,7}/checkpoint-*
#   4. fine-tune sentiment (from stage 7, with the permissive sentiment lexicon), the two NER taggers of the
#      shipped ensemble (A from stage 5, B from stage 7, both with the entity lexicon; B's last stage distilled)
#      and train the poetry LM                                          -> runs/zoo/{sentiment-permissive-seed7,ner-lex-3,ner-s7-kd,poetry-s5}
#      and pretrain the general generator (a decoder, from scratch)      -> runs/zoo/generator
#   5. copy them into the package as fp16 (the NER ensemble: int8) + manifest -> ernie_zoo/zoo/<name>; then
#      distil the fast NER tagger (1 layer) from the shipped ensemble, ship it (int8) -> ernie_zoo/zoo/ernie-zoo-mini-ner-fast
#   6. ablation (masking, char features) for the base model's card    -> bench/results/zoo_ablation.json
#   7. evaluate the shipped copies next to the baselines; write cards  -> bench/results/zoo_eval.json, model_cards/
# On a machine that has the shipped models but not runs/zoo/, `python recipes/zoo/restore_shipped.py` writes the shipped
# base back to its checkpoint directory (fp32), so that recipes that start from it run without steps 2-3.
# Seeds are fixed in the recipes. On 2 CPU cores, one step after another, the whole build takes about 10 hours.
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
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini.yaml
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage2.yaml
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage3.yaml
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage4.yaml
# Stage 5 is the start of NER tagger A and poetry; stage 7 is the shipped ernie-zoo-mini-zh and the start of
# sentiment, CSC and NER tagger B.
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage5.yaml
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage6.yaml
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-mini-stage7.yaml

echo "== 4. fine-tune"
$PY recipes/zoo/poetry_prompts.py
$PY -m ernie_zoo.data.lexicon --out runs/zoo/data/entity_lexicon.txt
# NER tagger A (ner-s5 ... ner-lex-3), tagger B (ner-s7-lex ... ner-s7-kd); ner-kd, a student of A and B's second
# stage, is a teacher of B's last stage. The pair was picked by dev entity F1 among 10 lexicon taggers
# (recipes/experiments/ner_ensemble.py --pairs); this rebuilds the picked pair.
for recipe in ner-s5 ner-s5-stage2 ner-lex ner-lex-2 ner-lex-3 \
    ner-s7-lex ner-s7-lex-stage2 ner-s7-lex-stage3 ner-kd ner-s7-kd poetry-s5; do
    $PY -m ernie_zoo.finetune.cli "recipes/zoo/$recipe.yaml"
done

# Spelling correction (ernie-zoo-mini-csc): synthetic errors put into clean offline text, then three fine-tuning
# stages from the shipped encoder. Stage 1 was stopped at step 1200 of its 2,400 when this model was built (its
# newest checkpoint is what csc_stage1.py exports); a rebuild that runs it to the end starts stage 2 further on.
C=runs/zoo/data/corpora_csc
$PY scripts/prepare_corpora.py --sources msra reviews xinhua fortunes manpages libreoffice --out $C --no-progress
$PY -m ernie_zoo.data.spelling --corpus $C/{msra,reviews,xinhua,fortunes,manpages,libreoffice}.txt \
    --tokenizer ernie_zoo/zoo/ernie-zoo-mini-zh --out ~/.cache/ernie_zoo/csc --train 200000 --dev 3000 \
    --max-per-corpus 80000
$PY -m ernie_zoo.finetune.cli recipes/zoo/csc.yaml
$PY recipes/zoo/csc_stage1.py --checkpoint "$(ls -d runs/zoo/csc/checkpoints/checkpoint-* | tail -1)"
$PY -m ernie_zoo.data.spelling --corpus $C/{msra,reviews,xinhua,fortunes,manpages,libreoffice}.txt \
    --tokenizer ernie_zoo/zoo/ernie-zoo-mini-zh --out ~/.cache/ernie_zoo/csc --train 200000 --dev 3000 \
    --max-per-corpus 80000 --train-error-counts 0.1 0.3 0.3 0.2 0.1
for recipe in csc-stage2 csc-stage3; do
    $PY -m ernie_zoo.finetune.cli "recipes/zoo/$recipe.yaml"
done
$PY -m ernie_zoo.evaluation.correction --baseline --out bench/results/correction_baselines.json

# Sentiment (ernie-zoo-mini-sentiment): the default (permissive) sentiment lexicon; the cleaned corpora above less
# every held-out text as the silver sentences' pools; fine-tuning from stage 7 on the review train split + silver
# general-domain sentences the lexicon labels, the lexicon also given as input bits (data.lexicon). The previous
# release's SKEP stage on the full lexicon is recipes/experiments/pretrain-skep-s7.yaml.
$PY -m ernie_zoo.data.sentiment_lexicon
$PY recipes/zoo/skep_mix.py --src $C
$PY recipes/zoo/sentiment_silver.py --out ~/.cache/ernie_zoo/datasets/sentiment_silver3 --frames 3000
$PY -m ernie_zoo.finetune.cli recipes/zoo/sentiment-permissive-seed7.yaml

# The general generator (ernie-zoo-mini-generator, an ERNIE 4.5 decoder pretrained from scratch): its mixture
# (idiom question/answer pairs, THUCNews headlines, the other modern sources, poetry one domain among several) and
# held-out prefixes/text, then causal-LM pretraining (1,000 steps, ~70-90 min on 2 cores).
$PY recipes/zoo/generator_data.py
$PY -m ernie_zoo.training.pretrain recipes/zoo/pretrain-generator.yaml

echo "== 5. ship"
# The generator's decoding default (repetition_penalty), chosen on dev idioms and dev prefixes.
$PY recipes/zoo/generator_decoding.py --model runs/zoo/generator/checkpoint-1000
$PY recipes/zoo/ship.py ernie-zoo-mini-generator
# The poetry model's decoding defaults (generation_config.json), chosen on dev titles.
$PY recipes/zoo/poetry_decoding.py --model runs/zoo/poetry-s5
$PY recipes/zoo/ship.py ernie-zoo-mini-zh ernie-zoo-mini-sentiment ernie-zoo-mini-ner ernie-zoo-mini-poetry \
    ernie-zoo-mini-csc
# The correction model's fused decoding (its weights are stored int8, ship.py INT8_STORED, to leave room for the
# LM): the character n-gram LM and the weights chosen on the synthetic dev split (the shipped model's own scores,
# the LM, jieba's word frequencies). The LM is fitted on the clean training text and every other sentence of the
# same six corpora (less the dev and SIGHAN-2015 sentences); its order and pruning are chosen among the variants
# whose file leaves the model directory under 24.5 MB (the directory without the LM: 9.85 MB; the LM's file in
# format version 2, varint streams, ernie_zoo/models/ngram.py). Then that LM and the weights are shipped with the
# model (ngram_lm.safetensors, config.json's correction_fusion).
$PY bench/csc_fusion.py --lm-text train$(printf '+%s' $C/{msra,reviews,xinhua,fortunes,manpages,libreoffice}.txt) \
    --order 3 4 --min-count 1 2 3 4 --prune-from-order 2 3 4 --max-lm-bytes 14600000
$PY -m ernie_zoo.evaluation.correction --attach-lm ernie_zoo/zoo/ernie-zoo-mini-csc --fusion bench/results/csc_fusion.json
# The fast NER tagger (Taskflow("ner", mode="fast")): tagger A cut to its first layer, distilled from the shipped
# ensemble (its teacher, so it comes after the ensemble is shipped). recipes/experiments/ner-fast.yaml and
# ner-fast3.yaml (2 and 3 layers) are the other points of bench/results/ner_fast_frontier.json.
[ -d runs/zoo/ner-fast-init-a0 ] ||
    $PY recipes/zoo/ner_fast_init.py --member 0 --layers 0 --out runs/zoo/ner-fast-init-a0
$PY -m ernie_zoo.finetune.cli recipes/zoo/ner-fast1.yaml
$PY recipes/zoo/ship.py ernie-zoo-mini-ner-fast

echo "== 6. ablation"
$PY recipes/zoo/ablation.py

echo "== 7. evaluate and write the cards"
$PY -m ernie_zoo.cli eval --out bench/results/zoo_eval.json --cards model_cards

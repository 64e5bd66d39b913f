#!/usr/bin/env bash
# Multi-node pretraining with torchrun's c10d rendezvous: run this same command on every node (by hand,
# pdsh, or your scheduler); the nodes find each other through MASTER_ADDR:MASTER_PORT. NUM_NODES=1 with
# MASTER_ADDR=127.0.0.1 runs one node the same way (same restarts).
#
#   NUM_NODES=64 MASTER_ADDR=gpu-node-001 recipes/launch/torchrun_rendezvous.sh RECIPE.yaml [--key value ...]
#
# Environment: NUM_NODES (required), MASTER_ADDR (required: a host every node can reach, usually the first
# node), MASTER_PORT (29500), GPUS_PER_NODE (8), RDZV_ID (a job id shared by all nodes; default ernie-zoo),
# MAX_RESTARTS (3: torchrun restarts every rank after one fails, and the run resumes from its newest valid
# checkpoint; see common.sh), NCCL_* and friends (see common.sh, docs/scale.md), DRY_RUN=1 to print, not run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"

[[ $# -ge 1 ]] || usage_error "usage: NUM_NODES=N MASTER_ADDR=HOST $0 RECIPE.yaml [--key value ...]"
recipe="$1"
shift
[[ -n "${NUM_NODES:-}" ]] || usage_error "set NUM_NODES (nodes in the job)"
[[ -n "${MASTER_ADDR:-}" ]] || usage_error "set MASTER_ADDR (the rendezvous host)"
[[ "${DRY_RUN:-0}" == "1" || -f "$recipe" ]] || usage_error "recipe $recipe not found"

run torchrun --nnodes "$NUM_NODES" --nproc-per-node "$GPUS_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "${RDZV_ID:-ernie-zoo}" \
  --max-restarts "$MAX_RESTARTS" \
  -m "$ERNIE_ZOO_MODULE" "$recipe" "$@"

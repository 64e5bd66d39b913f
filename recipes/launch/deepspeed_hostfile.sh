#!/usr/bin/env bash
# Multi-node pretraining with the DeepSpeed launcher: it ssh-es (pdsh) into every host of a hostfile and
# starts GPUS_PER_NODE ranks on each. Run it once, on the first host.
#
#   recipes/launch/deepspeed_hostfile.sh HOSTFILE RECIPE.yaml [--key value ...]
#   DRY_RUN=1 recipes/launch/deepspeed_hostfile.sh recipes/launch/hostfile.example recipes/pretrain/ernie-100b.yaml
#
# The DeepSpeed launcher does not restart failed ranks: a failure ends the job, and running this again resumes
# from the newest valid checkpoint. For automatic restarts use torchrun_rendezvous.sh or slurm.sbatch.
# HOSTFILE: one `hostname slots=8` line per node (see hostfile.example); passwordless ssh between hosts.
# Environment: NUM_NODES (default: hosts in HOSTFILE), GPUS_PER_NODE (8), MASTER_ADDR (default: first host),
# MASTER_PORT (29500), NCCL_* and friends (see common.sh, docs/scale.md), DRY_RUN=1 to print, not run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"

[[ $# -ge 2 ]] || usage_error "usage: $0 HOSTFILE RECIPE.yaml [--key value ...]"
hostfile="$1"
recipe="$2"
shift 2
[[ -f "$hostfile" ]] || usage_error "hostfile $hostfile not found"
[[ "${DRY_RUN:-0}" == "1" || -f "$recipe" ]] || usage_error "recipe $recipe not found"

hosts=$(awk '$1 !~ /^#/ && NF {print $1}' "$hostfile")
[[ -n "$hosts" ]] || usage_error "hostfile $hostfile lists no hosts"
NUM_NODES="${NUM_NODES:-$(wc -l <<<"$hosts" | tr -d ' ')}"
MASTER_ADDR="${MASTER_ADDR:-$(head -n 1 <<<"$hosts")}"

# The launcher forwards NCCL_* itself; everything in ERNIE_ZOO_ENV_VARS goes through its env file
# (DS_ENV_FILE), which it reads on the launch host and exports on every worker.
export DS_ENV_FILE="${DS_ENV_FILE:-$PWD/.deepspeed_env}"
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  echo "# $DS_ENV_FILE:"
  print_env | sed 's/^/# /'
else
  print_env >"$DS_ENV_FILE.tmp" && mv "$DS_ENV_FILE.tmp" "$DS_ENV_FILE"
fi

# --no_local_rank: ranks read LOCAL_RANK from the environment; the recipe CLI takes no --local_rank flag.
run deepspeed --hostfile "$hostfile" --num_nodes "$NUM_NODES" --num_gpus "$GPUS_PER_NODE" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --no_local_rank \
  --module "$ERNIE_ZOO_MODULE" "$recipe" "$@"

# Shared by the launch scripts in this directory (sourced, not run).
#
# Environment for multi-node NCCL runs. Every value can be overridden by exporting it before the launch;
# docs/scale.md explains each one. Site-specific values (InfiniBand HCAs, the socket interface) are only
# set when you give them: a wrong guess there is worse than NCCL's own detection.

export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"                 # INFO to see rings/trees, transports and HCAs chosen
export NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-0}"          # 0: use InfiniBand/RoCE when present (never TCP by mistake)
if [[ -n "${NCCL_IB_HCA:-}" ]]; then export NCCL_IB_HCA; fi                 # e.g. mlx5_0,mlx5_1,... (one per GPU)
if [[ -n "${NCCL_SOCKET_IFNAME:-}" ]]; then export NCCL_SOCKET_IFNAME; fi   # bootstrap/TCP interface, e.g. eth0 or ^lo,docker
if [[ -n "${CUDA_DEVICE_MAX_CONNECTIONS:-}" ]]; then export CUDA_DEVICE_MAX_CONNECTIONS; fi  # 1 only for Megatron-style TP overlap
# DeepSpeed JIT-compiles C++/CUDA ops on first use; a fixed directory compiles them once per machine image.
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HOME/.cache/ernie_zoo/torch_extensions}"
export MASTER_PORT="${MASTER_PORT:-29500}"
export GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
# torchrun's elastic agent restarts the whole worker group this many times after a rank fails (a crash, a
# SIGKILL, a collective that timed out after distributed.timeout_s); each restart resumes from the newest
# valid checkpoint. 0: the first failure ends the job. docs/scale.md, "Failures and restarts".
export MAX_RESTARTS="${MAX_RESTARTS:-3}"
# torchrun shares its rendezvous TCPStore with the ranks by default; after a restart the new ranks then read
# the dead ranks' addresses from it and cannot connect (pytorch/pytorch#135712). 1: a fresh store per restart.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE="${TORCH_DISABLE_SHARE_RDZV_TCP_STORE:-1}"

# Variables forwarded to every rank (the DeepSpeed launcher writes them to its env file).
ERNIE_ZOO_ENV_VARS=(NCCL_DEBUG NCCL_IB_DISABLE NCCL_IB_HCA NCCL_SOCKET_IFNAME CUDA_DEVICE_MAX_CONNECTIONS
  TORCH_EXTENSIONS_DIR)

# The training entry point every rank runs: `python -m ernie_zoo.training.pretrain RECIPE [--key value ...]`.
ERNIE_ZOO_MODULE="ernie_zoo.training.pretrain"

usage_error() {
  echo "error: $*" >&2
  exit 2
}

# run CMD...: print the command (shell-quoted, one line) when DRY_RUN=1, else run it.
run() {
  if [[ "${DRY_RUN:-0}" == "1" ]]; then
    printf '%q ' "$@" | sed 's/ $//'
    printf '\n'
  else
    "$@"
  fi
}

# print_env: the forwarded variables that are set, as KEY=VALUE lines.
print_env() {
  local name
  for name in "${ERNIE_ZOO_ENV_VARS[@]}"; do
    if [[ -n "${!name:-}" ]]; then printf '%s=%s\n' "$name" "${!name}"; fi
  done
}

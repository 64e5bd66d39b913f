"""Per-GPU memory, communication and step-time plan for pretraining an ErnieZoo model (an encoder, or an ERNIE 4.5
dense or MoE decoder) on a GPU cluster.

First-order formulas, each from the paper that introduced it:

- Model states, mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", sec. 3.1 and 5): 2 bytes of bf16
  parameters + 2 bytes of bf16 gradients + K = 12 bytes of fp32 optimizer state (master weights, Adam m and v)
  per parameter. ZeRO stage 1 partitions the 12 optimizer bytes over the data-parallel (DP) ranks, stage 2
  also the gradients, stage 3 also the parameters. Tensor parallelism (TP) splits the sharded layers first;
  the parameters the TP plan leaves replicated (embeddings, LayerNorms, MLM head) are counted whole on every
  TP rank, so the split is exact rather than "everything / t".
- Activations per transformer layer, 16-bit (Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", Table 2), s = sequence, b = micro-batch, h = hidden, a = heads, t = TP size:
    no recompute, TP without sequence parallel:  s*b*h*(10 + 24/t + 5*a*s/(h*t))   (t = 1: s*b*h*(34 + 5as/h))
    no recompute, TP with sequence parallel:     s*b*h/t*(34 + 5*a*s/h)
    selective recompute (attention core):        s*b*h*(10 + 24/t)   or with sequence parallel s*b*h*34/t
    full recompute (layer inputs only):          2*s*b*h             or with sequence parallel 2*s*b*h/t
  plus the working set of what is recomputed, alive during one layer's backward pass: with full recompute one
  layer's activations (the no-recompute formula), with selective recompute one layer's attention core,
  5*a*s^2*b/t bytes. With flash attention (`flash_attention=True`) the 5*a*s/h term (scores, softmax, dropout
  mask and output) is not stored, and selective recompute saves nothing more (it keeps q, k, v where the kernel
  kept them). Selective recompute is what the engines run (`models.recompute`, `distributed.recompute:
  selective`): the attention core (QK^T, softmax, dropout, .V) checkpointed, its inputs q, k, v and everything
  else kept as without recompute, so the kept bytes are the no-recompute formula less the 5*a*s/h term
  (tests/test_recompute.py checks on the built models that selective keeps no per-head s x s tensor and no more
  of the rest; bench/recompute.py measures the three).
  Not in the paper, added here: the output layer, bf16 logits kept in the model output plus the fp32
  log-softmax saved for backward and its fp32 gradient, ~10 bytes per token per vocabulary entry.
- Model FLOPs per token, forward + backward (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT `estimate_mfu`):
  6*N + 12*L*h*s, N the matmul parameters a token passes through (`ModelShape.matmul_params`: the layers, the
  output head at the positions it runs on -- the MLM head at the masked 15% --, not the embedding lookups). MFU = model FLOPs per second / (GPUs x peak). Recompute adds hardware FLOPs, not model
  FLOPs: full recompute one more forward pass of the encoder (2*N_layers + 4*L*h*s per token), selective
  recompute the attention core forward (4*L*h*s per token).
- Communication per GPU, ring collectives over n ranks: all-reduce of X bytes sends 2*X*(n-1)/n, all-gather
  or reduce-scatter X*(n-1)/n. ZeRO-3 all-gathers the bf16 parameters in forward and again in backward and
  reduce-scatters the gradients: 3 x 2*N' bytes per micro-batch (ZeRO paper sec. 7.2: 1.5x plain DP's 2x).
  ZeRO-0/1 all-reduce the gradients once per step; ZeRO-2 reduce-scatters them every micro-batch and
  all-gathers the updated parameters once per step. TP: one all-reduce of s*b*h bf16 values per block in
  forward and one in backward, 4 per layer per micro-batch, 6 with full recompute (Korthikanti sec. 4.2).

Fine-tuning (`trainable_fraction` f < 1, e.g. LoRA, counted by `ernie_zoo.finetune.plan`): frozen parameters
carry no gradients and no optimizer state, so the gradient and optimizer bytes, the gradient reduction and
ZeRO-2's all-gather of updated parameters scale by f, while ZeRO-3 still all-gathers every parameter. Backward
computes input gradients everywhere but weight gradients only for what trains: (4 + 2f) N instead of 6N model
FLOPs per token (+ 12*L*h*s).

ERNIE 4.5 decoders (`ModelShape.from_config` of an `Ernie4_5Config` / `Ernie4_5_MoeConfig`): TP splits what
transformers' `tp_plan` of the model splits (attention, MLPs, shared experts, embedding, lm_head). A MoE model's
routed experts are split by expert parallelism (EP, Lepikhin et al. 2020 "GShard") instead, over ep ranks of the
whole cluster with no TP inside an expert (Megatron-Core's "parallel folding", expert-TP 1): each GPU holds E/ep of
every MoE layer's experts and ZeRO shards their states over the world/ep ranks holding the same experts. Model
FLOPs count the parameters a token uses (the active ones: top-k of the routed experts) and the attention width
heads x head_dim. Every MoE layer sends each token's hidden state to its k experts and back (GShard's dispatch and
combine), each TP rank its 1/t of its group's tokens: per micro-batch 2 all-to-alls forward and 2 backward (+2 with
full recompute) of f*(s*b/t)*k*h bf16 values per GPU (f the capacity factor, 1 without one). With uniform routing
1/ep of them stay on the GPU; EP groups are consecutive GPUs, so of a group's ep members `ep_node_peers` share the
node: (peers-1)/ep of the bytes ride NVLink and (ep-peers)/ep InfiniBand, both links at once (the slower sets the
time), on the critical path unless `ep_overlap` (DualPipe, Megatron-Core's EP overlap; not ernie-zoo's engines)
hides them under another micro-batch's compute. EP beyond a node thus pays InfiniBand for (ep-gpus_per_node)/ep of
its traffic. The capacity factor (`distributed.moe_capacity_factor`, Lepikhin et al. 2020; Fedus et al. 2021,
"Switch Transformers", sec. 2.2) caps each expert at f x its uniform share of the (token, expert) pairs: the plan
sizes expert compute, dispatch traffic and expert activations at f (the padded buffers of GShard / DeepSpeed-MoE /
Megatron-Core's pad-to-capacity; ernie-zoo's engine drops without padding, and f x the share is the most its
busiest expert, which the all-to-all waits for, can take), and at f < 1 counts 1 - f of the pairs dropped: they do
no expert work and are not in the model FLOPs. Activations use the per-layer formula above with the model's
hidden size (its MLP term standing for the shared experts; a first-order estimate: SwiGLU and GQA are not modelled
separately) plus, per MoE layer, the routed experts' pairs at capacity, `expert_pair_bytes` each.

Offload (DeepSpeed `offload_optimizer` / `offload_param`, the recipe's `distributed.offload_*`): ZeRO-Offload
(Ren et al. 2021, "ZeRO-Offload", sec. 4) keeps the fp32 master weights and Adam moments (12 bytes per trainable
parameter) and the fp32 gradient partition (4 bytes) in host memory and runs Adam there: the GPU keeps no
optimizer state and no gradient partition, only the reduce buckets. Each micro-batch the GPU sends its bf16
gradient partition to the host (2 bytes per trainable parameter / DP) and after the step receives the updated
bf16 parameters (2 bytes / DP), over PCIe. ZeRO-Infinity (Rajbhandari et al. 2021, "ZeRO-Infinity", sec. 5)
also keeps each rank's ZeRO-3 bf16 parameter partition there (2 bytes / DP): fetched to the GPU for forward and
for backward, 2 x 2 bytes / DP per micro-batch. nvme puts the same bytes in files: the optimizer states are read
and written back every step (2 x 12 bytes per trainable parameter / DP), the parameters read on every fetch.
Gradient offload and parameter fetches overlap compute (DeepSpeed's overlap and prefetch); the CPU Adam step, the
upload of the updated parameters and the NVMe swap of the optimizer states do not (no delayed parameter update).

Time model (assumptions printed with every plan): compute runs at `efficiency` x peak bf16 dense FLOPS;
ZeRO/DP communication overlaps compute (DeepSpeed `overlap_comm`) so only what exceeds compute is exposed;
TP all-reduces sit on the critical path and are not overlapped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from ernie_zoo.models.recompute import RECOMPUTE

logger = logging.getLogger(__name__)

GIB = 1024**3
BYTES_PARAM = 2  # bf16
BYTES_GRAD = 2  # bf16
BYTES_OPTIM = 12  # fp32 master weights + Adam m + v (ZeRO's K = 12)
OFFLOAD = ("none", "cpu", "nvme")
BYTES_GRAD_FP32 = 4  # ZeRO-Offload's fp32 gradient partition on the host
# DeepSpeed's PipelineEngine asserts zero_optimization_stage < 2 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline
# parallelism"); Megatron-LM pairs pipelines with its distributed optimizer, which is ZeRO-1.
PP_MAX_ZERO = 1
#: Pipeline schedules the planner models (`pipeline_bubble`): 1f1b is Megatron-LM's 1F1B, interleaved when
#: virtual_stages > 1 (the recipe's pp_schedule 1f1b / interleaved); zero_bubble and zbv as the recipe names them.
PLAN_SCHEDULES = ("1f1b", "zero_bubble", "zbv")
SCHEDULE_NAMES = {"1f1b": "1F1B", "zero_bubble": "zero bubble", "zbv": "ZB-V"}


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator model: memory as `nvidia-smi` reports `memory.total`, bf16 dense peak, links per GPU."""

    name: str
    memory_gib: float
    peak_tflops: float  # bf16 dense tensor-core peak, no sparsity (vendor datasheet)
    nvlink_gbyte_s: float  # NVLink bandwidth per GPU, one direction, GB/s
    nic_gbit_s: float  # InfiniBand per GPU in a DGX/HGX node (one NIC per GPU), Gbit/s
    pcie_gbyte_s: float = 32.0  # host link per GPU, one direction, GB/s (PCIe 4 x16: 32; PCIe 5 x16: 64)


# Datasheet numbers: A100 SXM4 312 TFLOPS, 600 GB/s NVLink (both directions), HDR 200 Gb/s per GPU in DGX A100;
# H100 SXM5 989 TFLOPS, 900 GB/s NVLink, NDR 400 Gb/s per GPU in DGX H100; H200 SXM: H100's compute and links
# with 141 GB HBM3e. memory.total: 40960 MiB (A100 40GB), 81920 MiB (A100 80GB), 81559 MiB (H100 80GB),
# 143771 MiB (H200). Host link: A100 PCIe Gen4 x16 (32 GB/s per direction), H100/H200 PCIe Gen5 x16 (64 GB/s).
# H800 SXM5 (the export H100): H100's compute, memory and NICs, NVLink cut to 400 GB/s (both directions); DeepSeek-V3's
# cluster (its technical report, sec. 3.1 and 3.2.2: "IB (50 GB/s)" per GPU, 8 GPUs per node).
GPUS: dict[str, GPUSpec] = {
    "a100-40gb": GPUSpec("a100-40gb", 40960 / 1024, 312.0, 300.0, 200.0, 32.0),
    "a100-80gb": GPUSpec("a100-80gb", 81920 / 1024, 312.0, 300.0, 200.0, 32.0),
    "h100-80gb": GPUSpec("h100-80gb", 81559 / 1024, 989.0, 450.0, 400.0, 64.0),
    "h200-141gb": GPUSpec("h200-141gb", 143771 / 1024, 989.0, 450.0, 400.0, 64.0),
    "h800-80gb": GPUSpec("h800-80gb", 81559 / 1024, 989.0, 200.0, 400.0, 64.0),
}
GPU_ALIASES = {"a100": "a100-80gb", "h100": "h100-80gb", "h200": "h200-141gb", "h800": "h800-80gb"}


GPU_FIELDS = ("memory_gib", "peak_tflops", "nvlink_gbyte_s", "nic_gbit_s", "pcie_gbyte_s")
#: Upper bounds far above any machine built (an NVL576 domain, 288 GB HBM, 2.5 PFLOPS dense bf16, 1.6 Tbit/s NICs)
#: that still catch a slip of the keyboard: `nodes=1000000000` planned a billion nodes, `nic_gbit_s=inf` hid all
#: communication, and `memory_gib=-5` or `nan` ended in "needs 5.5 GiB > -5.0 GiB ... add nodes".
CLUSTER_LIMITS = {
    "nodes": 100_000,
    "gpus_per_node": 1_024,
    "memory_gib": 4_096,
    "peak_tflops": 100_000,
    "nvlink_gbyte_s": 100_000,
    "nic_gbit_s": 100_000,
    "pcie_gbyte_s": 10_000,
}


@dataclass(frozen=True)
class Cluster:
    """Homogeneous nodes of `gpus_per_node` GPUs each; TP groups stay inside a node when they fit."""

    nodes: int
    gpus_per_node: int
    gpu: GPUSpec

    def __post_init__(self) -> None:
        for name, value in (("nodes", self.nodes), ("gpus_per_node", self.gpus_per_node)):
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not 1 <= value <= CLUSTER_LIMITS[name]
            ):
                raise ValueError(
                    f"cluster field {name} must be an integer from 1 to {CLUSTER_LIMITS[name]:,}, got {value!r}"
                )
        for name in GPU_FIELDS:
            value = getattr(self.gpu, name)
            if not (
                isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= CLUSTER_LIMITS[name]
            ):
                raise ValueError(
                    f"cluster field {name} must be a finite number > 0 and <= {CLUSTER_LIMITS[name]:,}, got {value!r}"
                )

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def parse_cluster(text: str) -> Cluster:
    """Parse `nodes=64,gpus_per_node=8,gpu=h100-80gb` (optional: `nvlink_gbyte_s=`, `nic_gbit_s=`, `memory_gib=`,
    `peak_tflops=`, `pcie_gbyte_s=`)."""
    fields: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ValueError(f"cluster item {item!r} is not KEY=VALUE (in {text!r})")
        fields[key.strip()] = value.strip()
    known = {"nodes", "gpus_per_node", "gpu", *GPU_FIELDS}
    unknown = set(fields) - known
    if unknown:
        raise ValueError(f"unknown cluster field(s) {sorted(unknown)}; known: {sorted(known)}")
    gpu_name = GPU_ALIASES.get(fields.get("gpu", "h100-80gb"), fields.get("gpu", "h100-80gb"))
    if gpu_name not in GPUS:
        raise ValueError(
            f"unknown gpu {gpu_name!r}; choose one of {sorted(GPUS)} (or aliases {sorted(GPU_ALIASES)})"
        )
    gpu = GPUS[gpu_name]
    overrides = {}
    for k in GPU_FIELDS:
        if k in fields:
            try:
                overrides[k] = float(fields[k])
            except ValueError:
                raise ValueError(
                    f"cluster field {k} must be a number, got {fields[k]!r} (in {text!r})"
                ) from None
    if overrides:
        gpu = dataclasses.replace(gpu, **overrides)
    counts = {}
    for k, default in (("nodes", "1"), ("gpus_per_node", "8")):
        try:
            counts[k] = int(fields.get(k, default))
        except ValueError:
            raise ValueError(
                f"cluster field {k} must be an integer, got {fields[k]!r} (in {text!r})"
            ) from None
    return Cluster(counts["nodes"], counts["gpus_per_node"], gpu)


@dataclass(frozen=True)
class ModelShape:
    """What the formulas need from a model: exact parameter counts (from the meta device) and dimensions."""

    n_params: int  # all parameters, tied weights once
    n_sharded: int  # parameters the TP plan splits
    n_replicated: int  # parameters every TP rank holds whole
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    name: str = "model"
    # ERNIE 4.5 decoders; the defaults describe an encoder (every parameter active, no experts, MHA)
    kv_heads: int | None = None  # key/value heads (GQA); TP must divide them
    attn_width: int | None = None  # heads x head_dim, the width of Q K^T and A V (default hidden)
    n_expert: int = 0  # routed-expert parameters: EP splits them; not in n_sharded or n_replicated
    n_active: int | None = None  # parameters one token uses (MoE: top-k routed experts); default n_params
    n_block_active: int | None = (
        None  # the active ones inside the transformer layers (what recompute re-runs)
    )
    experts: int = 0  # routed experts per MoE layer
    top_k: int = 0  # experts per token
    moe_layers: int = 0
    expert_ffn: int = 0  # a routed expert's SwiGLU width (moe_intermediate_size); 0: from n_expert
    shared_experts: int = 0  # experts of that width every token passes through (no routing, no capacity)
    # Pipeline stages (`stage_counts`): the parameters outside the transformer layers, by the stage that holds
    # them (embeddings on the first, final norm + output head on the last; a tied word embedding on both, as
    # Megatron-LM keeps a copy on the last stage), and those inside the layers (routed experts apart), each split
    # into what TP shards and what it replicates. All 0 (a hand-built shape): every parameter counts as a layer's.
    first_sharded: int = 0
    first_replicated: int = 0
    last_sharded: int = 0
    last_replicated: int = 0
    layer_sharded: int = 0
    layer_replicated: int = 0

    @property
    def active(self) -> int:
        return self.n_params if self.n_active is None else self.n_active

    @property
    def expert_active(self) -> float:
        """Routed-expert parameters one token passes through (top_k of each MoE layer's experts)."""
        return self.n_expert * self.top_k / self.experts if self.experts else 0.0

    @property
    def expert_width(self) -> float:
        """A routed expert's SwiGLU width: `expert_ffn`, else from the counts (gate, up and down: 3 x h x width)."""
        if self.expert_ffn or not self.moe_layers:
            return float(self.expert_ffn)
        return self.n_expert / (self.moe_layers * self.experts * 3 * self.hidden)

    def layer_and_head_params(self, tp: int) -> tuple[float, float]:
        """Parameters one TP rank holds in (all transformer layers, the output head + final norm), routed experts
        apart; a hand-built shape without the stage split counts everything as layers."""
        if not (self.layer_sharded or self.layer_replicated):
            return self.n_sharded / tp + self.n_replicated, 0.0
        return (
            self.layer_sharded / tp + self.layer_replicated,
            self.last_sharded / tp + self.last_replicated,
        )

    def matmul_params(self, head_fraction: float = 1.0) -> float:
        """The parameters a token's forward pass multiplies by, the N of the model FLOPs: its transformer layers
        (a MoE layer's top-k routed experts) and the output head at the fraction of positions it runs on (the MLM
        head: the masked ones). Embeddings are lookups. The hardware FLOPs count the same matmuls (plus recompute
        and what TP replicates), so MFU cannot exceed the assumed efficiency; with N = all parameters, the 15%-
        head MLM of `mini` (58% of it embeddings) showed "MFU 100.4%". A hand-built shape: every active one."""
        if not (self.layer_sharded or self.layer_replicated):
            return float(self.active)
        layers, head = self.layer_and_head_params(1)
        return layers + head_fraction * head + self.expert_active

    def stage_params(self, tp: int, pp: int) -> tuple[float, float]:
        """Parameters one GPU holds (routed experts apart) on the (first, last) pipeline stage, at TP `tp`: the
        ceil(L/pp) layers of the fullest stage plus that stage's own embeddings or head. pp 1: the whole model."""
        whole = self.n_sharded / tp + self.n_replicated
        if pp == 1:
            return whole, whole
        layers, _ = self.layer_and_head_params(tp)
        share = layers * _ceil_div(self.layers, pp) / self.layers
        if not (
            self.layer_sharded or self.layer_replicated
        ):  # no stage split known: every parameter is a layer's
            return share, share
        return (
            share + self.first_sharded / tp + self.first_replicated,
            share + self.last_sharded / tp + self.last_replicated,
        )

    @classmethod
    def from_config(cls, config: Any, name: str = "model") -> ModelShape:
        """Count parameters of `ErnieZooForMaskedLM(config)` (or of an ERNIE 4.5 decoder's causal LM) on the meta
        device and split them by the TP plan."""
        import torch

        from ernie_zoo.models.decoder import is_decoder_config

        dims = dict(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            heads=config.num_attention_heads,
            ffn=config.intermediate_size,
            vocab=config.vocab_size,
            name=name,
        )
        if is_decoder_config(config):
            return cls._from_decoder_config(config, dims)

        from ernie_zoo.models.modeling import ErnieZooForMaskedLM
        from ernie_zoo.models.presets import count_parameters

        from .tp_plan import parameter_split, tp_plan_for

        with torch.device("meta"):
            model = ErnieZooForMaskedLM(config)
        sharded, replicated = parameter_split(model)
        total = count_parameters(config)
        if sharded + replicated != total:  # both de-duplicate tied weights; a mismatch is a bug
            raise AssertionError(f"TP split {sharded} + {replicated} != parameter count {total}")
        return cls(
            n_params=total,
            n_sharded=sharded,
            n_replicated=replicated,
            **dims,
            **stage_counts(model, tp_plan_for(model)),
        )

    @classmethod
    def _from_decoder_config(cls, config: Any, dims: dict[str, Any]) -> ModelShape:
        """An ERNIE 4.5 decoder on the meta device, split by transformers' own TP plan of the model (routed experts
        left to expert parallelism)."""
        from ernie_zoo.models.decoder import build_decoder, decoder_counts, moe_blocks

        from .tp_plan import parameter_split

        model = build_decoder(config, "meta")
        counts = decoder_counts(model)
        plan = {key: style for key, style in model.tp_plan.items() if "mlp.experts" not in key}
        sharded, unsplit = parameter_split(model, plan)  # the routed experts fall in `unsplit`
        if sharded + unsplit != counts["total"]:
            raise AssertionError(f"TP split {sharded} + {unsplit} != parameter count {counts['total']}")
        embeddings = {id(p): p.numel() for p in (model.get_input_embeddings().weight, model.lm_head.weight)}
        blocks = moe_blocks(model)
        return cls(
            n_params=counts["total"],
            n_sharded=sharded,
            n_replicated=unsplit - counts["experts"],
            **dims,
            kv_heads=config.num_key_value_heads,
            attn_width=config.num_attention_heads * model.model.layers[0].self_attn.head_dim,
            n_expert=counts["experts"],
            n_active=counts["active"],
            n_block_active=counts["active"] - sum(embeddings.values()),
            experts=blocks[0].num_experts if blocks else 0,
            top_k=blocks[0].top_k if blocks else 0,
            moe_layers=counts["moe_layers"],
            expert_ffn=getattr(config, "moe_intermediate_size", 0) if blocks else 0,
            shared_experts=getattr(config, "moe_num_shared_experts", 0) or 0 if blocks else 0,
            **stage_counts(model, plan),
        )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_counts(model: Any, plan: dict[str, str]) -> dict[str, int]:
    """`ModelShape`'s pipeline fields from a (meta-device) model's parameter names: a parameter under a numbered
    layer (`...layer.3.`, `...layers.3.`) belongs to a layer (routed experts, `mlp.experts`, are left to EP), one
    whose name says `embed` to the first stage, the rest (final norm, MLM head / lm_head) to the last. Tied weights
    are listed under every name, so a tied word embedding counts on the first and on the last stage."""
    import re

    from .tp_plan import is_sharded

    layer = re.compile(r"(^|\.)layers?\.\d+\.")
    out = dict.fromkeys(
        (
            "first_sharded",
            "first_replicated",
            "last_sharded",
            "last_replicated",
            "layer_sharded",
            "layer_replicated",
        ),
        0,
    )
    for name, p in model.named_parameters(remove_duplicate=False):
        if "mlp.experts" in name:
            continue
        where = "layer" if layer.search(name) else "first" if "embed" in name else "last"
        out[f"{where}_{'sharded' if is_sharded(name, plan) else 'replicated'}"] += p.numel()
    return out


@dataclass(frozen=True)
class ParallelSettings:
    """How the job runs: TP size, ZeRO stage, batch shape, recompute, and the assumptions of the time model."""

    tp: int = 1
    pp: int = 1  # pipeline-parallel size: stages of consecutive layers
    virtual_stages: int = 1  # layer chunks per GPU (Megatron-LM's v): 1F1B interleaved when > 1; zbv: 2
    schedule: str = "1f1b"  # pipeline schedule, one of PLAN_SCHEDULES (its bubble: `pipeline_bubble`)
    ep: int = 1  # expert-parallel size (MoE): each GPU holds experts/ep of each MoE layer's routed experts
    zero_stage: int = 3
    micro_batch: int = 1
    seq_len: int = 2048
    global_batch: int | None = (
        None  # sequences per optimizer step; default micro_batch x DP x grad_accum_steps
    )
    grad_accum_steps: int | None = None  # alternative to global_batch (what a recipe states); default 1
    recompute: str = "full"
    sequence_parallel: bool = False
    flash_attention: bool = False
    efficiency: float = 0.5  # achieved fraction of peak bf16 FLOPS while computing
    comm_efficiency: float = 0.7  # achieved fraction of link bandwidth in collectives
    reserve_gib: float = 2.0  # CUDA context, NCCL buffers, allocator fragmentation
    head_fraction: float = (
        1.0  # positions the MLM head computes logits for (ernie-pretrain: masked ones only)
    )
    trainable_fraction: float = (
        1.0  # parameters that train (fine-tuning: LoRA factors + head); the rest are frozen
    )
    zero3_max_live_parameters: float = 1e9  # DeepSpeed stage3_max_live_parameters (elements)
    reduce_bucket_size: float = 5e8  # DeepSpeed reduce_bucket_size (elements)
    allgather_bucket_size: float = 5e8  # DeepSpeed allgather_bucket_size, stages 1-2 (elements)
    offload_optimizer: str = "none"  # none, cpu or nvme: optimizer states + gradient partition off the GPU
    offload_param: str = "none"  # none, cpu or nvme: the ZeRO-3 parameter partition off the GPU
    nvme_gbyte_s: float = 3.0  # NVMe bandwidth per GPU (its share of the node's drives), GB/s
    host_adam_params_per_s: float = (
        1e9  # parameters DeepSpeed's CPU Adam steps per second per GPU (its cores)
    )
    # MoE (a model with routed experts): the recipe's distributed.moe_capacity_factor f: each expert takes at most
    # f x its uniform share of the (token, expert) pairs; the plan sizes expert compute, dispatch traffic and
    # expert activations at f (padded to capacity) and counts 1 - f of the pairs dropped when f < 1. None: no cap.
    moe_capacity_factor: float | None = None
    # MoE all-to-alls hidden under another micro-batch's compute (DeepSeek-V3's DualPipe, Megatron-Core's EP
    # communication overlap); ernie-zoo's engines do not overlap them (False)
    ep_overlap: bool = False

    def validate(self) -> None:
        for name in ("tp", "pp", "virtual_stages", "ep", "micro_batch", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {RECOMPUTE}, got {self.recompute!r}")
        if not 0 < self.efficiency <= 1 or not 0 < self.comm_efficiency <= 1:
            raise ValueError(
                f"efficiency and comm_efficiency must be in (0, 1], got {self.efficiency}, {self.comm_efficiency}"
            )
        if self.reserve_gib < 0:
            raise ValueError(f"reserve_gib must be >= 0, got {self.reserve_gib}")
        if not 0 < self.head_fraction <= 1:
            raise ValueError(f"head_fraction must be in (0, 1], got {self.head_fraction}")
        if not 0 < self.trainable_fraction <= 1:
            raise ValueError(f"trainable_fraction must be in (0, 1], got {self.trainable_fraction}")
        for key in ("offload_optimizer", "offload_param"):
            if getattr(self, key) not in OFFLOAD:
                raise ValueError(f"{key} must be one of {OFFLOAD}, got {getattr(self, key)!r}")
        if self.offload_param != "none" and self.zero_stage != 3:
            raise ValueError(f"offload_param needs ZeRO stage 3, got zero_stage={self.zero_stage}")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise ValueError("offload_optimizer needs ZeRO stage 1-3, got zero_stage=0")
        if self.offload_optimizer == "nvme" and self.zero_stage != 3:
            raise ValueError(f"offload_optimizer nvme needs ZeRO stage 3, got zero_stage={self.zero_stage}")
        if self.nvme_gbyte_s <= 0 or self.host_adam_params_per_s <= 0:
            raise ValueError("nvme_gbyte_s and host_adam_params_per_s must be > 0")
        f = self.moe_capacity_factor
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 64):
            raise ValueError(f"moe_capacity_factor must be a number in (0, 64] or None (no cap), got {f!r}")
        if self.global_batch is not None and self.grad_accum_steps is not None:
            raise ValueError("give global_batch or grad_accum_steps, not both")
        if self.grad_accum_steps is not None and self.grad_accum_steps < 1:
            raise ValueError(f"grad_accum_steps must be >= 1, got {self.grad_accum_steps}")
        if self.virtual_stages > 1 and self.pp == 1:
            raise ValueError(f"virtual_stages={self.virtual_stages} (interleaved 1F1B) needs pp > 1")
        if self.schedule not in PLAN_SCHEDULES:
            raise ValueError(f"schedule must be one of {PLAN_SCHEDULES}, got {self.schedule!r}")
        if self.schedule != "1f1b" and self.pp == 1:
            raise ValueError(f"schedule {self.schedule} needs pp > 1")
        if self.schedule == "zbv" and self.virtual_stages != 2:
            raise ValueError(f"schedule zbv runs 2 chunks per GPU, got virtual_stages={self.virtual_stages}")
        if self.pp > 1 and self.zero_stage > PP_MAX_ZERO:
            raise ValueError(
                f"pipeline parallelism (pp={self.pp}) runs with ZeRO stage 0-{PP_MAX_ZERO}, got zero_stage="
                f"{self.zero_stage}: DeepSpeed's pipeline engine refuses ZeRO-2 and -3 (gradients and parameters are "
                "partitioned per micro-batch, while a pipeline accumulates them over the step); use --zero 1"
            )
        if self.pp > 1 and self.offload_param != "none":
            raise ValueError("offload_param (ZeRO-3) does not combine with pipeline parallelism (pp > 1)")


# ── formulas (pure arithmetic, tested against hand-computed numbers) ──────────────────────────────────────


def model_state_bytes(
    params_per_rank: float, zero_stage: int, dp: int, trainable_fraction: float = 1.0
) -> dict[str, float]:
    """Bytes per GPU of bf16 parameters, bf16 gradients and fp32 Adam states under ZeRO (Rajbhandari et al.).

    `params_per_rank` is what one TP rank holds before ZeRO (sharded/t + replicated); gradients and Adam states
    exist for the `trainable_fraction` of them only (fine-tuning: frozen weights have neither).
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if dp < 1:
        raise ValueError(f"dp must be >= 1, got {dp}")
    n, trained = params_per_rank, params_per_rank * trainable_fraction
    return {
        "parameters": BYTES_PARAM * n / (dp if zero_stage >= 3 else 1),
        "gradients": BYTES_GRAD * trained / (dp if zero_stage >= 2 else 1),
        "optimizer": BYTES_OPTIM * trained / (dp if zero_stage >= 1 else 1),
    }


def offload_states(
    states: dict[str, float], trained_share: float, settings: ParallelSettings, host: dict[str, float]
) -> dict[str, float]:
    """`states` (`model_state_bytes`) left on the GPU under the settings' offload; what moves is added to `host`
    (keys say where: host memory or NVMe). `trained_share`: trainable parameters in this GPU's ZeRO partition.

    Optimizer offload moves the Adam states and the gradients (kept on the host as an fp32 partition, 4 bytes
    per trainable parameter, ZeRO-Offload sec. 4.1); parameter offload moves the ZeRO-3 bf16 partition."""
    out = dict(states)
    opt, param = settings.offload_optimizer, settings.offload_param
    if opt != "none":
        where = "NVMe" if opt == "nvme" else "host memory"
        key = f"optimizer: fp32 master + Adam m, v [{where}]"
        host[key] = host.get(key, 0.0) + states["optimizer"]
        key = "gradients: fp32 partition [host memory]"
        host[key] = host.get(key, 0.0) + BYTES_GRAD_FP32 * trained_share
        out["optimizer"] = out["gradients"] = 0.0
    if param != "none":
        key = f"parameters: bf16 ZeRO-3 partition [{'NVMe' if param == 'nvme' else 'host memory'}]"
        host[key] = host.get(key, 0.0) + states["parameters"]
        out["parameters"] = 0.0
    return out


def activation_bytes_per_layer(
    seq: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    tp: int = 1,
    recompute: str = "none",
    sequence_parallel: bool = False,
    flash_attention: bool = False,
) -> float:
    """Activation bytes one transformer layer keeps for backward (Korthikanti et al. 2022, Table 2)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    s, b, h, a, t = seq, micro_batch, hidden, heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    attention = 0.0 if (flash_attention or recompute == "selective") else 5 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + attention)
    return sbh * (10 + 24 / t + attention / t)


def mlp_activation_bytes(
    seq: int,
    micro_batch: int,
    hidden: int,
    tp: int = 1,
    recompute: str = "none",
    sequence_parallel: bool = False,
) -> float:
    """The MLP's share of `activation_bytes_per_layer` (Korthikanti et al. 2022, sec. 4.1: its input 2sbh, the two
    4h-wide activations 16sbh/t, the dropout mask sbh); nothing under full recompute. A MoE layer has no such MLP:
    its experts are counted per (token, expert) pair instead (`expert_pair_bytes`)."""
    if recompute == "full":
        return 0.0
    sbh = seq * micro_batch * hidden
    return 19 * sbh / tp if sequence_parallel else sbh * (3 + 16 / tp)


def recompute_working_set(seq: int, micro_batch: int, heads: int, tp: int = 1) -> float:
    """Selective recompute's transient: one layer's attention core rematerialised in its backward pass, the
    scores, softmax, dropout mask and output of its heads / t heads, 5*a*s^2*b/t bytes (16-bit; the mask 1 byte)."""
    return 5 * heads * seq * seq * micro_batch / tp


def logits_bytes(seq: int, micro_batch: int, vocab: int) -> float:
    """Output layer: bf16 logits (2) + fp32 log-softmax saved for backward (4) + its fp32 gradient (4)."""
    return 10 * seq * micro_batch * vocab


def model_flops_per_token(
    n_params: int, layers: int, hidden: int, seq: int, trainable_fraction: float = 1.0
) -> float:
    """Forward + backward model FLOPs per token: 6N + 12*L*h*s (PaLM appendix B); with only a fraction f of
    the parameters training, (4 + 2f) N + 12*L*h*s (no weight gradients for frozen ones)."""
    return (4 + 2 * trainable_fraction) * n_params + 12 * layers * hidden * seq


def pipeline_bubble(pp: int, micro_batches: int, virtual_stages: int = 1, schedule: str = "1f1b") -> float:
    """Idle fraction of a pipeline step's time, p = pp stages, m micro-batches, v chunks per GPU.

    1f1b (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
    sec. 2.2): with forward + backward time t_f + t_b per micro-batch and stage the bubble lasts (p-1)(t_f + t_b)
    against m(t_f + t_b) of work, the paper's bubble time fraction (p-1)/m, i.e. (p-1)/(m+p-1) of the whole;
    interleaved over v chunks the bubble shrinks to (p-1)(t_f + t_b)/v (sec. 2.2.2): (p-1)/(v m+p-1).
    zero_bubble (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", sec. 2.1, ZB-H1; torch's
    ScheduleInterleavedZeroBubble): the backward split into B (input gradient) and W (weight gradient), the Ws
    deferred into the cool-down; with T_F = T_B = T_W the bubble is (p-1)(T_F + T_B - T_W) = a third of 1F1B's,
    (p-1)/(3m) of the work (the paper's table), over v chunks (p-1)/(3 v m+p-1) of the whole.
    zbv (ibid., sec. 6; torch's ScheduleZBVZeroBubble, 2 chunks in a V): (p-1)/(6m+p-1), the warm-up's p-1
    chunk forwards (the paper's 0 counts each GPU from its own first pass), for m >= 2p-1.
    Each fraction is what torch 2.13's schedule of that name leaves idle on its own action lists at those costs
    (`parallel.pipeline.idle_fraction`; tests/test_planner_search.py, tests/test_pipeline_parallel.py)."""
    if pp < 1 or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(
            f"pp, micro_batches and virtual_stages must be >= 1, got {pp}, {micro_batches}, {virtual_stages}"
        )
    if schedule not in PLAN_SCHEDULES:
        raise ValueError(f"schedule must be one of {PLAN_SCHEDULES}, got {schedule!r}")
    if schedule == "zbv" and virtual_stages != 2:
        raise ValueError(f"schedule zbv runs 2 chunks per GPU, got virtual_stages={virtual_stages}")
    work = {"1f1b": 1, "zero_bubble": 3, "zbv": 3}[schedule] * virtual_stages * micro_batches
    return (pp - 1) / (work + pp - 1)


def ring_bytes(collective: str, size_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring collective over `n` ranks of a `size_bytes` buffer (all-to-all: the
    `size_bytes` a rank holds, of which (n-1)/n go to other ranks)."""
    if n <= 1:
        return 0.0
    factor = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1}[collective]
    return factor * size_bytes * (n - 1) / n


def ep_node_peers(ep: int, gpus_per_node: int) -> float:
    """Members of a GPU's expert-parallel group on its own node (itself included), averaged over the GPUs, for EP
    groups of `ep` consecutive ranks (Megatron-Core's rank order: TP, then EP, folded; PP outermost): ep when a
    node holds whole groups, gpus_per_node when a group spans whole nodes."""
    if ep < 1 or gpus_per_node < 1:
        raise ValueError(f"ep and gpus_per_node must be >= 1, got {ep}, {gpus_per_node}")
    span = math.lcm(ep, gpus_per_node)  # the pattern of groups against nodes repeats every lcm ranks
    return (
        sum(
            min((r // ep + 1) * ep, (r // gpus_per_node + 1) * gpus_per_node)
            - max(r // ep * ep, r // gpus_per_node * gpus_per_node)
            for r in range(span)
        )
        / span
    )


def all_to_all_split(size_bytes: float, ep: int, gpus_per_node: int) -> tuple[float, float]:
    """(bytes over NVLink, bytes over InfiniBand) one GPU sends in an all-to-all of the `size_bytes` it holds over
    an EP group of `ep` (uniform routing: 1/ep of it stays on the GPU, (peers-1)/ep goes to the other GPUs of its
    node, (ep-peers)/ep leaves the node)."""
    peers = ep_node_peers(ep, gpus_per_node)
    return size_bytes * (peers - 1) / ep, size_bytes * (ep - peers) / ep


def expert_pair_bytes(hidden: int, expert_ffn: float) -> float:
    """Activation bytes a routed expert keeps for backward per (token, expert) pair it processes, 16-bit: the
    dispatched input (h), its gate and up projections (2 x ffn), SiLU(gate) x up (ffn) and the output returned to
    the token's rank (h, the routing weight multiplies it)."""
    return BYTES_PARAM * (2 * hidden + 3 * expert_ffn)


# ── the plan ───────────────────────────────────────────────────────────────────────────────────────────────


@dataclass
class Plan:
    """Everything `ernie-zoo plan` prints; `fits` is False when per-GPU memory exceeds the GPU's."""

    model: ModelShape
    cluster: Cluster
    settings: ParallelSettings
    dp: int
    grad_accum: int
    global_batch: int
    memory: dict[str, float]  # bytes per GPU by component
    comm: dict[str, float]  # bytes sent per GPU per optimizer step
    times: dict[str, float]  # seconds per optimizer step
    tokens_per_s: float
    mfu: float
    notes: list[str] = field(default_factory=list)
    host: dict[str, float] = field(default_factory=dict)  # bytes per GPU in host memory / on NVMe (offload)
    bubble: float = 0.0  # pipeline bubble: idle fraction of the pipeline time, (p-1)/(v*m+p-1)
    stage_memory: dict[str, float] = field(
        default_factory=dict
    )  # GPU bytes of the first / last pipeline stage

    @property
    def total_bytes(self) -> float:
        return sum(self.memory.values())

    @property
    def capacity_bytes(self) -> float:
        return self.cluster.gpu.memory_gib * GIB

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def pipeline_text(self) -> str:
        """'PP 8 x ', 'PP 8 (2 chunks) x ' when interleaved, 'PP 8 (zero bubble) x ' / 'PP 8 (ZB-V) x ', or ''
        without a pipeline."""
        st = self.settings
        if st.pp == 1:
            return ""
        what = [SCHEDULE_NAMES[st.schedule] if st.schedule != "1f1b" else ""]
        if st.virtual_stages > 1 and st.schedule != "zbv":
            what.append(f"{st.virtual_stages} chunks")
        inside = ", ".join(w for w in what if w)
        return f"PP {st.pp}{f' ({inside})' if inside else ''} x "

    def verdict(self) -> str:
        need, have = self.total_bytes / GIB, self.capacity_bytes / GIB
        if self.fits:
            return f"FITS: {need:.1f} GiB of {have:.1f} GiB per GPU ({have - need:.1f} GiB headroom)"
        return f"DOES NOT FIT: needs {need:.1f} GiB > {have:.1f} GiB per GPU"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": dataclasses.asdict(self.model),
            "cluster": {
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.gpus_per_node,
                "gpu": dataclasses.asdict(self.cluster.gpu),
            },
            "settings": dataclasses.asdict(self.settings),
            "dp": self.dp,
            "grad_accum": self.grad_accum,
            "global_batch": self.global_batch,
            "memory_bytes": self.memory,
            "host_bytes": self.host,
            "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "pipeline_bubble": self.bubble,
            "stage_memory_bytes": self.stage_memory,
            "verdict": self.verdict(),
            "comm_bytes_per_step": self.comm,
            "seconds_per_step": self.times,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def render(self) -> str:
        """The human-readable report."""
        m, c, st = self.model, self.cluster, self.settings
        lines = [
            f"model: {m.name}: {m.n_params:,} parameters ({m.layers} layers, hidden {m.hidden}, {m.heads} heads, "
            f"FFN {m.ffn}, vocab {m.vocab}); TP splits {m.n_sharded:,}, replicates {m.n_replicated:,}",
            *(
                [
                    f"MoE: {m.experts} routed experts, top-{m.top_k}, in {m.moe_layers} layers; {m.active:,} active "
                    f"parameters per token of {m.n_params:,}; routed experts {m.n_expert:,}, EP splits them; "
                    + (
                        f"capacity factor {st.moe_capacity_factor:g}"
                        + (
                            f" ({1 - st.moe_capacity_factor:.0%} of the pairs dropped)"
                            if st.moe_capacity_factor < 1
                            else ""
                        )
                        if st.moe_capacity_factor is not None
                        else "no capacity factor"
                    )
                    + ("; all-to-alls overlapped with compute" if st.ep_overlap else "")
                ]
                if m.moe_layers
                else []
            ),
            f"cluster: {c.nodes} node(s) x {c.gpus_per_node} {c.gpu.name} = {c.world_size} GPUs, "
            f"{c.gpu.memory_gib:.1f} GiB and {c.gpu.peak_tflops:g} TFLOPS bf16 each",
            f"parallel: TP {st.tp} x {self.pipeline_text()}DP {self.dp}{f' (EP {st.ep})' if m.moe_layers else ''}, "
            f"ZeRO-{st.zero_stage}; recompute {st.recompute}; "
            f"offload optimizer {st.offload_optimizer}, parameters {st.offload_param}; "
            f"sequence parallel {'yes' if st.sequence_parallel else 'no'}; "
            f"attention memory {'flash (no s^2 scores)' if st.flash_attention else 'paper (s^2 scores stored)'}",
            f"batch: micro {st.micro_batch} x seq {st.seq_len}, grad accumulation {self.grad_accum} -> "
            f"{self.global_batch} sequences = {self.global_batch * st.seq_len:,} tokens per step",
            "",
        ]
        width = max(len(k) for k in (*self.memory, *self.comm, *self.times, *self.host)) + 2

        def section(title: str, unit: str, rows: dict[str, float], fmt) -> None:
            lines.append(f"{title:<{width}}{unit:>10}")
            for key, value in rows.items():
                lines.append(f"  {key:<{width - 2}}{fmt(value):>10}")

        section("per-GPU memory", "GiB", self.memory, lambda v: f"{v / GIB:.2f}")
        lines.append(f"  {'total':<{width - 2}}{self.total_bytes / GIB:>10.2f}")
        lines.append(self.verdict())
        if st.pp > 1:
            lines.append(
                "per stage: "
                + ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in self.stage_memory.items())
                + f" (above: the {max(self.stage_memory, key=self.stage_memory.__getitem__)} stage); pipeline "
                f"bubble {self.bubble:.1%} (p {st.pp}, m {self.grad_accum}, v {st.virtual_stages}, {st.schedule})"
            )
        if self.host:
            lines.append("")
            section("offloaded, per GPU (host memory / NVMe)", "GiB", self.host, lambda v: f"{v / GIB:.2f}")
        lines.append("")
        section("communication per GPU per step", "GB", self.comm, lambda v: f"{v / 1e9:.2f}")
        lines.append("")
        section("time per step (estimate)", "s", self.times, lambda v: f"{v:.3f}")
        lines.append(f"throughput: {self.tokens_per_s:,.0f} tokens/s; MFU {self.mfu:.1%}")
        lines += ["", "assumptions:"] + [f"  - {note}" for note in self.notes]
        return "\n".join(lines)


def _stage_memory(
    model: ModelShape,
    st: ParallelSettings,
    per_rank: float,
    expert_rank: float,
    layers: int,
    in_flight: float,
    dp: int,
    edp: int,
    which: str,
    pp: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """(GPU memory by component, offloaded bytes) of one GPU of a pipeline stage holding `per_rank` parameters
    (+ `expert_rank` routed-expert ones) and `layers` layers with `in_flight` micro-batches of activations each."""
    s, b, t, ep, f = st.seq_len, st.micro_batch, st.tp, st.ep, st.trainable_fraction
    memory: dict[str, float] = {}
    host: dict[str, float] = {}
    states = offload_states(model_state_bytes(per_rank, st.zero_stage, dp, f), per_rank * f / dp, st, host)
    trained = f", trainable {f:.2%}" if f < 1 else ""
    gone = {
        "parameters": f", offloaded to {st.offload_param}" if st.offload_param != "none" else "",
        "states": f", offloaded to {st.offload_optimizer}" if st.offload_optimizer != "none" else "",
    }
    memory[f"parameters (bf16{', ZeRO-3 shard' if st.zero_stage >= 3 else ''}{gone['parameters']})"] = states[
        "parameters"
    ]
    memory[f"gradients (bf16{', ZeRO shard' if st.zero_stage >= 2 else ''}{trained}{gone['states']})"] = (
        states["gradients"]
    )
    memory[
        f"optimizer: fp32 master + Adam m, v{' (ZeRO shard)' if st.zero_stage >= 1 else ''}{trained}{gone['states']}"
    ] = states["optimizer"]
    if model.moe_layers:
        held = f"{model.experts // ep}/{model.experts} per layer"
        expert_states = model_state_bytes(expert_rank, st.zero_stage, edp, f)
        for key, value in offload_states(expert_states, expert_rank * f / edp, st, host).items():
            memory[f"routed experts: {key} ({held})"] = value
    if st.zero_stage == 3:
        live = min(st.zero3_max_live_parameters, per_rank + expert_rank)
        memory["ZeRO-3 gathered parameters + reduce bucket (bf16)"] = BYTES_PARAM * (
            live + st.reduce_bucket_size
        )
    elif st.zero_stage in (1, 2):
        memory["ZeRO reduce + all-gather buckets (bf16)"] = BYTES_PARAM * (
            st.reduce_bucket_size + st.allgather_bucket_size
        )
    per_layer = activation_bytes_per_layer(
        s, b, model.hidden, model.heads, t, st.recompute, st.sequence_parallel, st.flash_attention
    )
    if pp == 1:
        memory[f"activations: {layers} layers, recompute {st.recompute}"] = layers * per_layer
    else:
        memory[
            f"activations: {which} stage, {layers} layers x {in_flight:.3g} micro-batches, recompute {st.recompute}"
        ] = layers * per_layer * in_flight
    if model.moe_layers:
        # A MoE layer's experts instead of the formula's MLP: each GPU's experts receive, on average, the pairs its
        # tokens send (f x s*b/t x top_k at capacity f), and the shared experts see every token once; full
        # recompute keeps none of them, and rematerialises one layer's in backward.
        cap = st.moe_capacity_factor if st.moe_capacity_factor is not None else 1.0
        pairs = (cap * model.top_k + model.shared_experts) * s * b / t
        pair_bytes = pairs * expert_pair_bytes(model.hidden, model.expert_width)
        at = f"capacity {cap:g}" if st.moe_capacity_factor is not None else "uniform routing, no cap"
        if st.recompute == "full":
            memory[f"recompute working set: 1 MoE layer's expert pairs ({at})"] = pair_bytes
        else:
            moe_here = _ceil_div(model.moe_layers, pp)
            mlp = mlp_activation_bytes(s, b, model.hidden, t, st.recompute, st.sequence_parallel)
            flight = f" x {in_flight:.3g} micro-batches" if pp > 1 else ""
            memory[f"expert activations: {moe_here} MoE layers{flight}, for their MLP term above ({at})"] = (
                moe_here * in_flight * (pair_bytes - mlp)
            )
    if st.recompute == "full":
        memory["recompute working set: 1 layer rematerialised"] = activation_bytes_per_layer(
            s, b, model.hidden, model.heads, t, "none", st.sequence_parallel, st.flash_attention
        )
    elif st.recompute == "selective" and not st.flash_attention:
        memory["recompute working set: 1 attention core rematerialised"] = recompute_working_set(
            s, b, model.heads, t
        )
    if pp == 1 or which == "last":
        head = f"{st.head_fraction:.0%} of positions" if st.head_fraction < 1 else "every position"
        memory[f"output layer: logits + log-softmax, {head}"] = st.head_fraction * logits_bytes(
            s, b, model.vocab
        )
    memory["runtime reserve (CUDA context, NCCL, fragmentation)"] = st.reserve_gib * GIB
    return memory, host


def make_plan(model: ModelShape, cluster: Cluster, settings: ParallelSettings) -> Plan:
    """Compute the memory, communication and time plan; raises ValueError for impossible layouts."""
    settings.validate()
    st, gpu = settings, cluster.gpu
    t, s, b, ep = st.tp, st.seq_len, st.micro_batch, st.ep
    if cluster.world_size % t:
        raise ValueError(f"tp={t} does not divide the {cluster.world_size} GPUs of the cluster")
    for name, value in (
        ("num_attention_heads", model.heads),
        ("num_key_value_heads", model.kv_heads or model.heads),
        ("hidden_size", model.hidden),
        ("intermediate_size", model.ffn),
    ):
        if value % t:
            raise ValueError(f"tensor parallel size {t} must divide {name}={value}")
    p, v = st.pp, st.virtual_stages
    if cluster.world_size % (t * p):
        raise ValueError(f"tp x pp = {t} x {p} does not divide the {cluster.world_size} GPUs of the cluster")
    if model.layers < p * v:
        raise ValueError(
            f"pp x virtual_stages = {p} x {v} exceeds the {model.layers} layers: every stage chunk needs a layer"
        )
    dp = cluster.world_size // (t * p)
    stage_world = cluster.world_size // p  # the GPUs of one pipeline stage
    if ep > 1 and not model.moe_layers:
        raise ValueError(f"ep={ep} needs a mixture-of-experts model; {model.name} has no routed experts")
    if model.moe_layers and (model.experts % ep or stage_world % ep):
        raise ValueError(
            f"expert parallel size {ep} must divide the {model.experts} experts and the "
            f"{stage_world} GPUs of {'a pipeline stage' if p > 1 else 'the cluster'}"
        )
    edp = stage_world // ep  # ranks holding the same experts: ZeRO shards the experts' states over them
    global_batch = st.global_batch if st.global_batch is not None else b * dp * (st.grad_accum_steps or 1)
    if global_batch < 1 or global_batch % (b * dp):
        raise ValueError(
            f"global batch {global_batch} must be a positive multiple of micro_batch x DP = {b} x {dp} = {b * dp}"
        )
    grad_accum = global_batch // (b * dp)
    m = grad_accum  # micro-batches per pipeline per step
    if (v > 1 or st.schedule == "zero_bubble") and m % p:
        raise ValueError(
            f"{'interleaved 1F1B' if st.schedule == '1f1b' else st.schedule} (virtual_stages={v}) needs the "
            f"micro-batches per step ({m}) to be a multiple of pp={p}"
        )
    if p > 1 and m < p:
        raise ValueError(f"a pipeline of pp={p} stages needs at least {p} micro-batches per step, got {m}")
    if st.schedule == "zbv" and m < 2 * p - 1:
        raise ValueError(f"zbv fills its bubble with >= 2pp-1 = {2 * p - 1} micro-batches per step, got {m}")
    notes: list[str] = []

    # ── memory: the fuller of the first and the last pipeline stage (pp 1: the one stage) ──
    first_rank, last_rank = model.stage_params(t, p)  # routed experts apart (n_expert / ep)
    stage_layers = _ceil_div(model.layers, p)  # the fullest stage's layers
    expert_rank = model.n_expert / ep * _ceil_div(model.moe_layers, p) / max(1, model.moe_layers)
    # Activations in flight on the first stage under 1F1B: min(p, m) micro-batches of its layers (Narayanan et al.
    # 2021, sec. 2.2.1); interleaved, x (1 + (p-1)/(p*v)) (Korthikanti et al. 2022, sec. 4.2.3). The last stage
    # holds one micro-batch, plus the output layer's logits.
    # Zero bubble: ZB-H1 and ZB-V keep 1F1B's peak (Qi et al. 2024, sec. 2.1 and 6): a deferred W holds less than
    # the B before it, and a V places the first stage's and the last chunk's micro-batches on one GPU.
    in_flight = min(p, m) * (1 + (p - 1) / (p * v) if v > 1 and st.schedule != "zbv" else 1)
    stage_memory: dict[str, float] = {}
    breakdowns: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    for which, params, flight in (("first", first_rank, in_flight), ("last", last_rank, 1.0)):
        breakdowns[which] = _stage_memory(
            model, st, params, expert_rank, stage_layers, flight, dp, edp, which, p
        )
        stage_memory[which] = sum(breakdowns[which][0].values())
        if p == 1:
            break
    heavy = max(stage_memory, key=stage_memory.__getitem__)
    memory, host = breakdowns[heavy]
    per_rank = first_rank if heavy == "first" else last_rank
    f = st.trainable_fraction
    if f < 1:
        notes.append(
            f"fine-tuning: {f:.3%} of the parameters train; frozen ones have no gradients and no optimizer state"
        )
    if st.zero_stage == 3:
        notes.append(
            f"ZeRO-3 keeps at most stage3_max_live_parameters={st.zero3_max_live_parameters:.3g} gathered "
            f"parameters and a reduce bucket of {st.reduce_bucket_size:.3g} elements"
        )
    if p > 1:
        notes.append(
            f"pipeline: {p} stages of {model.layers / p:g} layers (the fullest {stage_layers}), "
            f"{SCHEDULE_NAMES[st.schedule]}"
            f"{f' interleaved, {v} chunks per GPU' if v > 1 else ''}; per-GPU memory is the {heavy} stage's "
            f"(first {stage_memory['first'] / GIB:.1f} GiB: embeddings + {in_flight:.3g} micro-batches of "
            f"activations; last {stage_memory['last'] / GIB:.1f} GiB: output layer + 1 micro-batch)"
        )

    # ── communication (bytes sent per GPU per optimizer step) ──
    comm = {}

    def zero_traffic(params: float, group: int) -> float:
        """Bytes one GPU sends per step for ZeRO over `group` ranks of its `params` (gradients: what trains)."""
        param_bytes, grad_bytes = BYTES_PARAM * params, BYTES_PARAM * params * f
        if st.zero_stage == 3:
            return grad_accum * (
                2 * ring_bytes("all_gather", param_bytes, group)
                + ring_bytes("reduce_scatter", grad_bytes, group)
            )
        if st.zero_stage == 2:
            return grad_accum * ring_bytes("reduce_scatter", grad_bytes, group) + ring_bytes(
                "all_gather", grad_bytes, group
            )
        return ring_bytes("all_reduce", grad_bytes, group)

    zero_what = {
        3: "2 all-gathers + 1 reduce-scatter per micro-batch",
        2: "reduce-scatter per micro-batch + all-gather per step",
    }.get(st.zero_stage, "gradient all-reduce per step")
    experts_over = f" (experts {edp})" if model.moe_layers else ""
    comm[f"ZeRO-{st.zero_stage}: {zero_what}, DP {dp}{experts_over}"] = zero_traffic(
        per_rank, dp
    ) + zero_traffic(expert_rank, edp)
    tp_allreduces = 6 if st.recompute == "full" else 4
    tp_bytes_micro = (
        stage_layers * tp_allreduces * ring_bytes("all_reduce", BYTES_PARAM * s * b * model.hidden, t)
    )
    comm[f"TP: {tp_allreduces} all-reduces of s*b*h per layer per micro-batch, TP {t}"] = (
        grad_accum * tp_bytes_micro
    )
    # Pipeline point-to-point: per micro-batch and layer chunk a stage receives the s*b*h activations from the
    # stage before and sends them on, and in backward the same size of gradients back: 2 sends of 2*s*b*h bytes,
    # each TP rank its 1/t (Megatron-LM's scatter/gather optimisation, Narayanan et al. 2021 sec. 4.1).
    p2p_bytes_micro = v * 2 * BYTES_PARAM * s * b * model.hidden / t if p > 1 else 0.0
    if p > 1:
        comm[
            f"PP: activations + gradients of s*b*h/t to the next/previous stage per micro-batch, x {v} chunks"
        ] = grad_accum * p2p_bytes_micro
    # MoE: every MoE layer dispatches each token's top-k (token, expert) pairs to the experts' GPUs and combines
    # the outputs back, forward and backward (+ the forward again under full recompute); each TP rank sends its 1/t
    # of the tokens. At capacity factor f the buffers hold f x the uniform share (padded to capacity; with f < 1
    # the dropped pairs are not sent). The all-to-all runs over NVLink to the node's peers and over InfiniBand to
    # the rest of the EP group, both at once.
    cap = st.moe_capacity_factor if st.moe_capacity_factor is not None else 1.0
    kept = min(1.0, cap)  # pairs an expert processes (uniform routing): 1 - f are dropped when f < 1
    a2a_intra_micro = a2a_inter_micro = 0.0
    if model.moe_layers:
        a2a_per_layer = 6 if st.recompute == "full" else 4
        a2a_intra_micro, a2a_inter_micro = (
            _ceil_div(model.moe_layers, p) * a2a_per_layer * part
            for part in all_to_all_split(
                BYTES_PARAM * cap * s * b / t * model.top_k * model.hidden, ep, cluster.gpus_per_node
            )
        )
        what = f"EP {ep}: {a2a_per_layer} all-to-alls of f*s*b*k*h/t per MoE layer per micro-batch"
        comm[f"{what}, within the node"] = grad_accum * a2a_intra_micro
        if a2a_inter_micro:
            comm[f"{what}, between nodes"] = grad_accum * a2a_inter_micro

    # ── offload: PCIe between GPU and host, NVMe behind the host ──
    param_share = per_rank / dp + expert_rank / edp  # this GPU's ZeRO-3 parameter partition (elements)
    trained_share = f * param_share  # its trainable share: the ZeRO (1-3) optimizer partition
    pcie_stream = pcie_step = nvme_stream = nvme_step = 0.0  # bytes: overlapped with compute / on the step
    if st.offload_optimizer != "none":
        pcie_stream += grad_accum * BYTES_GRAD * trained_share  # bf16 gradient partition to the host
        pcie_step += BYTES_PARAM * trained_share  # updated bf16 parameters back
        if st.offload_optimizer == "nvme":
            nvme_step += 2 * BYTES_OPTIM * trained_share  # states read and written back
    if st.offload_param != "none":
        pcie_stream += grad_accum * 2 * BYTES_PARAM * param_share  # fetched for forward and for backward
        if st.offload_param == "nvme":
            nvme_stream += grad_accum * 2 * BYTES_PARAM * param_share
            nvme_step += BYTES_PARAM * trained_share  # the updated trainable parameters written back
    if pcie_stream or pcie_step:
        comm["PCIe: offload traffic between GPU and host"] = pcie_stream + pcie_step
    if nvme_stream or nvme_step:
        comm["NVMe: offload reads + writes"] = nvme_stream + nvme_step

    # ── links ──
    tp_in_node = t <= cluster.gpus_per_node and cluster.gpus_per_node % t == 0
    dp_in_node = cluster.nodes == 1
    nvlink = gpu.nvlink_gbyte_s * 1e9 * st.comm_efficiency
    nic = gpu.nic_gbit_s / 8 * 1e9 * st.comm_efficiency
    tp_bw = nvlink if tp_in_node else nic
    dp_bw = nvlink if dp_in_node else nic
    # Placement: TP innermost; a pipeline's stages on neighbouring GPUs of one node when t x p fits in it (its
    # point-to-point sends then ride NVLink), else one stage per node group, over InfiniBand.
    pp_in_node = t * p <= cluster.gpus_per_node
    pp_bw = nvlink if pp_in_node else nic
    if not tp_in_node and t > 1:
        notes.append(
            f"TP {t} spans nodes: its all-reduces run over InfiniBand, not NVLink (keep TP <= GPUs/node)"
        )
    notes.append(
        f"links: NVLink {gpu.nvlink_gbyte_s:g} GB/s per GPU per direction, InfiniBand {gpu.nic_gbit_s:g} Gbit/s per "
        f"GPU, {st.comm_efficiency:.0%} of it achieved; TP over {'NVLink' if tp_in_node else 'InfiniBand'}, "
        f"DP over {'NVLink' if dp_in_node else 'InfiniBand'}"
        + (f", PP over {'NVLink' if pp_in_node else 'InfiniBand'}" if p > 1 else "")
    )

    # ── FLOPs and time ──
    n_layer_params = model.n_block_active or model.layers * (
        4 * model.hidden * model.hidden + 2 * model.hidden * model.ffn
    )
    width = model.attn_width or model.hidden  # heads x head_dim: the attention matmuls' width
    model_flops_tok = model_flops_per_token(model.matmul_params(st.head_fraction), model.layers, width, s, f)
    # Model FLOPs count the pairs the experts process: with f < 1 the dropped ones do no work.
    if kept < 1:
        model_flops_tok = model_flops_per_token(
            model.matmul_params(st.head_fraction) - (1 - kept) * model.expert_active,
            model.layers,
            width,
            s,
            f,
        )
    # One GPU's work per token of its TP group: split layers / t, replicated parameters in full, and on average
    # top_k / experts of the routed experts for its 1/t of the tokens (EP moves tokens, not work), padded to
    # capacity f: the all-to-all waits for the busiest expert, which the cap lets take f x the uniform share.
    expert_active = model.expert_active * cap
    # Pipeline: the slowest stage (the fuller of first and last) sets the pace; its layers' share of the layer work.
    layer_share = stage_layers / model.layers
    # Matmul parameters: the stage's layers and, on the last stage, the output head at the positions it runs on;
    # the first stage's embeddings are lookups (no FLOPs to speak of).
    layer_rank, head_rank = model.layer_and_head_params(t)
    gpu_flops_tok = (4 + 2 * f) * (
        layer_rank * layer_share + st.head_fraction * head_rank + expert_active / t * layer_share
    ) + 12 * stage_layers * width * s / t
    if st.recompute == "full":
        n_layer_params += model.expert_active * (
            cap - 1
        )  # the recomputed forward runs the experts at capacity
        gpu_flops_tok += (2 * n_layer_params * layer_share + 4 * stage_layers * width * s) / t
    elif st.recompute == "selective":
        gpu_flops_tok += 4 * stage_layers * width * s / t
    tokens_micro = b * s
    # A pipeline runs m micro-batches through p stages in m / (1 - bubble) slots of one micro-batch's forward +
    # backward on one stage: 1F1B m + (p-1)/v (Narayanan et al. 2021, sec. 2.2), zero bubble m + (p-1)/(3v).
    bubble = pipeline_bubble(p, grad_accum, v, st.schedule)
    bubble_slots = grad_accum * bubble / (1 - bubble)
    slots = grad_accum + bubble_slots
    micro_compute_s = tokens_micro * gpu_flops_tok / (gpu.peak_tflops * 1e12 * st.efficiency)
    micro_tp_s = tp_bytes_micro / tp_bw if t > 1 else 0.0
    # NVLink and InfiniBand carry their parts at once; overlapped (ep_overlap), the all-to-alls of one micro-batch
    # hide under another's compute and only what exceeds it is exposed.
    micro_a2a_s = max(a2a_intra_micro / nvlink, a2a_inter_micro / nic)
    micro_ep_s = max(0.0, micro_a2a_s - micro_compute_s) if st.ep_overlap else micro_a2a_s
    micro_p2p_s = p2p_bytes_micro / pp_bw
    compute_s = slots * micro_compute_s
    tp_s, ep_s, p2p_s = slots * micro_tp_s, slots * micro_ep_s, slots * micro_p2p_s
    bubble_s = bubble_slots * (micro_compute_s + micro_tp_s + micro_ep_s + micro_p2p_s)
    dp_comm_bytes = next(iter(comm.values()))
    dp_s = dp_comm_bytes / dp_bw if dp > 1 else 0.0
    # What the ZeRO/DP traffic hides under: ZeRO-2/3 reduce (and gather) every micro-batch, so all of the compute;
    # ZeRO-0/1 reduce once per step, in the last micro-batch's backward (2/3 of its compute); behind a pipeline the
    # reduction waits for the flush (DeepSpeed's and Megatron-LM's pipeline schedules), so nothing.
    if p > 1:
        overlap_s = 0.0
    elif st.zero_stage >= 2:
        overlap_s = compute_s
    else:
        overlap_s = 2 / 3 * micro_compute_s
    pcie_bw = gpu.pcie_gbyte_s * 1e9 * st.comm_efficiency
    nvme_bw = st.nvme_gbyte_s * 1e9
    pcie_stream_s, nvme_stream_s = pcie_stream / pcie_bw, nvme_stream / nvme_bw
    adam_s = trained_share / st.host_adam_params_per_s if st.offload_optimizer != "none" else 0.0
    offload_step_s = pcie_step / pcie_bw + nvme_step / nvme_bw + adam_s
    exposed_dp_s = max(0.0, dp_s - overlap_s)
    step_s = (
        max(compute_s + exposed_dp_s, pcie_stream_s, nvme_stream_s) + tp_s + ep_s + p2p_s + offload_step_s
    )
    times = {
        f"compute ({gpu.peak_tflops:g} TFLOPS x {st.efficiency:.0%} efficiency)": compute_s,
        **(
            {
                f"  of which pipeline bubble ({bubble:.1%} of the pipeline time, {BUBBLE_TEXT[st.schedule]})": (
                    bubble_s
                )
            }
            if p > 1
            else {}
        ),
        "ZeRO/DP communication": dp_s,
        "exposed ZeRO/DP communication": exposed_dp_s,
        "TP communication (not overlapped)": tp_s,
        **({"PP point-to-point (not overlapped)": p2p_s} if p > 1 else {}),
        **(
            {
                "EP all-to-all (NVLink and InfiniBand at once)": slots * micro_a2a_s,
                f"exposed EP all-to-all ({'beyond the overlapping compute' if st.ep_overlap else 'not overlapped'})": (
                    ep_s
                ),
            }
            if model.moe_layers
            else {}
        ),
        **(
            {
                "offload: PCIe gradients out + parameter fetches (overlapped with compute)": pcie_stream_s,
                **(
                    {"offload: NVMe parameter reads (overlapped with compute)": nvme_stream_s}
                    if nvme_stream
                    else {}
                ),
                "exposed offload streaming": max(
                    0.0, max(pcie_stream_s, nvme_stream_s) - compute_s - exposed_dp_s
                ),
                "offload: CPU Adam step (not overlapped)": adam_s,
                f"offload: parameter upload{' + NVMe state swap' if nvme_step else ''} (not overlapped)": (
                    offload_step_s - adam_s
                ),
            }
            if host
            else {}
        ),
        "step": step_s,
    }
    if host:
        notes.append(
            f"offload: PCIe {gpu.pcie_gbyte_s:g} GB/s per GPU per direction x {st.comm_efficiency:.0%}, NVMe "
            f"{st.nvme_gbyte_s:g} GB/s per GPU, CPU Adam {st.host_adam_params_per_s:.3g} parameters/s per GPU; "
            "gradient offload and parameter fetches overlap compute, the CPU Adam step, the parameter upload "
            "and the NVMe state swap do not"
        )
    if model.moe_layers:
        peers = ep_node_peers(ep, cluster.gpus_per_node)
        capacity = (
            f"capacity factor {cap:g}: expert compute, dispatch buffers and expert activations sized at {cap:g} x "
            f"the uniform share (padded to capacity){f', {1 - kept:.0%} of the (token, expert) pairs dropped' if kept < 1 else ''}"
            if st.moe_capacity_factor is not None
            else "no capacity factor: planned at the uniform share, no dropping (an imbalanced router's busiest "
            "expert sets the pace; distributed.moe_capacity_factor bounds it)"
        )
        notes.append(
            f"MoE: routed experts split over EP {ep} (expert-TP 1), their ZeRO over the {edp} ranks holding the "
            f"same experts; uniform routing; EP groups of consecutive GPUs, {peers:g} of {ep} on a GPU's node: "
            f"{(peers - 1) / ep:.0%} of its all-to-all bytes over NVLink, {(ep - peers) / ep:.0%} over InfiniBand; "
            f"{'overlapped with another micro-batch' if st.ep_overlap else 'not overlapped'}; {capacity}"
        )
    tokens_step = global_batch * s
    tokens_per_s = tokens_step / step_s
    mfu = tokens_per_s * model_flops_tok / (cluster.world_size * gpu.peak_tflops * 1e12)
    head_at = f"{st.head_fraction:.0%} of positions" if st.head_fraction < 1 else "every position"
    notes.append(
        f"model FLOPs per token {'6N' if f == 1 else f'(4 + 2 x {f:.4f}) N'} + 12*L*h*s = {model_flops_tok:.4g} "
        f"(N = {model.matmul_params(st.head_fraction):,.0f} matmul parameters a token passes through: the layers"
        f"{', top-k experts' if model.experts else ''}, the output head at {head_at}, no embeddings; "
        f"h = attention width {width}); "
        "hardware FLOPs per GPU per token include "
        f"recompute ({st.recompute}), the parameters TP replicates, and the output head only at the positions it "
        "runs on (embeddings are lookups)"
    )
    notes.append(
        f"compute at {st.efficiency:.0%} of peak; ZeRO-2/3 traffic overlaps compute, ZeRO-0/1's once-a-step "
        "reduction only the last micro-batch's backward, behind a pipeline nothing; TP all-reduces, pipeline "
        "sends and the bubble are on the critical path; data loading and optimizer-step time are not modelled"
    )
    notes.append(
        f"runtime reserve {st.reserve_gib:g} GiB per GPU for the CUDA context, NCCL and fragmentation"
    )
    if t > 1 and not st.sequence_parallel:
        notes.append("no sequence parallelism: LayerNorm/dropout activations are replicated on every TP rank")
    return Plan(
        model=model,
        cluster=cluster,
        settings=settings,
        dp=dp,
        grad_accum=grad_accum,
        global_batch=global_batch,
        memory=memory,
        comm=comm,
        times=times,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        notes=notes,
        host=host,
        bubble=bubble,
        stage_memory=stage_memory,
    )


def largest_micro_batch(
    model: ModelShape, cluster: Cluster, settings: ParallelSettings, limit: int = 1024
) -> int:
    """Largest power-of-two micro-batch whose plan fits in GPU memory (0 if even 1 does not fit)."""
    best = 0
    b = 1
    while b <= limit:
        trial = dataclasses.replace(settings, micro_batch=b, global_batch=None, grad_accum_steps=None)
        if not make_plan(model, cluster, trial).fits:
            break
        best = b
        b *= 2
    return best


# ── the layout search ──────────────────────────────────────────────────────────────────────────────────────

#: ParallelSettings fields the search varies (a caller pins any of them by naming it in `fixed`)
SEARCH_DIMS = ("tp", "pp", "virtual_stages", "schedule", "zero_stage", "micro_batch", "recompute", "ep")
#: each schedule's bubble as `pipeline_bubble` computes it, for the report
BUBBLE_TEXT = {"1f1b": "(p-1)/(v*m+p-1)", "zero_bubble": "(p-1)/(3*v*m+p-1)", "zbv": "(p-1)/(6*m+p-1)"}


@dataclass
class LayoutSearch:
    """What `search_layouts` tried: `plans` are the layouts that fit, fastest first (ties: less memory first)."""

    plans: list[Plan]
    tried: int  # layouts planned
    too_big: int  # planned, but over the GPU's memory
    impossible: int  # refused by make_plan (a size that does not divide, ZeRO-3 under a pipeline, ...)
    fixed: dict[str, Any]  # the dimensions the caller pinned

    @property
    def best(self) -> Plan:
        return self.plans[0]

    def runners_up(self, n: int = 5) -> list[Plan]:
        """The fastest plan of each other (TP, PP, chunks, ZeRO) layout, fastest first."""
        seen = {_layout_key(self.best)}
        out = []
        for plan in self.plans[1:]:
            key = _layout_key(plan)
            if key not in seen:
                seen.add(key)
                out.append(plan)
            if len(out) == n:
                break
        return out

    def explain(self) -> str:
        """Why the search chose its layout: bubble, memory per stage, traffic, and the runners-up."""
        best, st = self.best, self.best.settings
        pinned = ", ".join(f"{k}={v}" for k, v in self.fixed.items()) or "nothing"
        lines = [
            f"layout search: {self.tried} layouts of TP x PP x chunks x schedule x ZeRO x micro-batch x recompute"
            f"{' x EP' if best.model.moe_layers else ''} planned, {len(self.plans)} fit, {self.too_big} too big; "
            f"{self.impossible} impossible (sizes that do not divide, ZeRO-2/3 under a pipeline); pinned: {pinned}",
            f"chosen: {layout_text(best)} -> {best.tokens_per_s:,.0f} tokens/s, MFU {best.mfu:.1%}",
        ]
        why = []
        if st.pp > 1:
            why.append(
                f"pipeline bubble {best.bubble:.1%} = {BUBBLE_TEXT[st.schedule]} ({st.schedule}) with p {st.pp}, "
                f"m {best.grad_accum} micro-batches, v {st.virtual_stages}"
            )
        else:
            why.append("no pipeline: no bubble, every GPU holds all layers")
        stages = best.stage_memory
        why.append(
            "memory per GPU: "
            + (", ".join(f"{k} stage {v / GIB:.1f} GiB" for k, v in stages.items()) if st.pp > 1 else "")
            + ("" if st.pp > 1 else f"{best.total_bytes / GIB:.1f} GiB")
            + f" of {best.capacity_bytes / GIB:.1f} GiB"
        )
        traffic = ", ".join(f"{k.split(':')[0]} {v / 1e9:.1f} GB" for k, v in best.comm.items() if v)
        why.append(f"traffic per GPU per step: {traffic or 'none'}")
        others = self.runners_up()
        if others:
            nxt = others[0]
            why.append(
                f"next best layout, {layout_text(nxt)}, is {1 - nxt.tokens_per_s / best.tokens_per_s:.1%} slower"
            )
        lines += [f"  - {w}" for w in why]
        if others:
            lines += ["", "runners-up (the fastest of each other TP x PP x chunks x schedule x ZeRO layout):"]
            lines.append(layout_table([best, *others]))
        return "\n".join(lines)


def _layout_key(plan: Plan) -> tuple:
    st = plan.settings
    return (st.tp, st.pp, st.virtual_stages, st.schedule, st.zero_stage, st.ep)


def layout_text(plan: Plan) -> str:
    """One line: 'TP 8 x PP 4 x DP 16, ZeRO-1, micro 1 (m 32), recompute full'."""
    st = plan.settings
    ep = f" (EP {st.ep})" if plan.model.moe_layers else ""
    return (
        f"TP {st.tp} x {plan.pipeline_text()}DP {plan.dp}{ep}, ZeRO-{st.zero_stage}, micro {st.micro_batch} "
        f"(m {plan.grad_accum}), recompute {st.recompute}"
    )


def layout_table(plans: list[Plan]) -> str:
    """A short markdown-ish table of layouts: memory, bubble, step time, throughput, MFU, gap to the first."""
    head = "| layout | GiB/GPU | bubble | step s | tokens/s | MFU | vs first |"
    rows = [head, "|" + "---|" * 7]
    top = plans[0].tokens_per_s
    for plan in plans:
        rows.append(
            f"| {layout_text(plan)} | {plan.total_bytes / GIB:.1f} | {plan.bubble:.1%} | {plan.times['step']:.2f} | "
            f"{plan.tokens_per_s:,.0f} | {plan.mfu:.1%} | {plan.tokens_per_s / top - 1:+.1%} |"
        )
    return "\n".join(rows)


def _candidates(
    model: ModelShape, cluster: Cluster, base: ParallelSettings, fixed: dict[str, Any], global_batch: int
):
    """Every combination of the free dimensions (pinned ones as given); make_plan rejects the impossible."""
    pow2 = [2**i for i in range(11)]
    world = cluster.world_size

    def free(name: str, values):
        return [fixed[name]] if name in fixed else list(values)

    tps = free("tp", [t for t in pow2 if t <= cluster.gpus_per_node])  # TP stays inside a node
    for t in tps:  # a pinned size that does not divide is left for make_plan to refuse with its reason
        pps = free("pp", [p for p in range(1, model.layers + 1) if world % (t * p) == 0] or [1])
        for p in pps:
            dp = max(1, world // (t * p))
            chunks = free(
                "virtual_stages", [1] + [v for v in (2, 4) if p > 1 and model.layers % (p * v) == 0]
            )
            zeros = free("zero_stage", range(0, 4 if p == 1 else PP_MAX_ZERO + 1))
            micros = free(
                "micro_batch",
                [b for b in pow2 if b <= global_batch // dp and global_batch % (b * dp) == 0]
                or [base.micro_batch],
            )
            eps = free(
                "ep",
                [e for e in pow2 if model.experts % e == 0 and (world // p) % e == 0]
                if model.moe_layers
                else [1],
            )
            for v in chunks:
                schedules = ["1f1b"] + (["zero_bubble"] if p > 1 else []) + (["zbv"] if v == 2 else [])
                for z, schedule in ((z, q) for z in zeros for q in free("schedule", schedules)):
                    for b in micros:
                        for r in free("recompute", RECOMPUTE):
                            for e in eps:
                                yield dict(
                                    tp=t,
                                    pp=p,
                                    virtual_stages=v,
                                    schedule=schedule,
                                    zero_stage=z,
                                    micro_batch=b,
                                    recompute=r,
                                    ep=e,
                                )


def search_layouts(
    model: ModelShape, cluster: Cluster, base: ParallelSettings, fixed: dict[str, Any] | None = None
) -> LayoutSearch:
    """The fastest layouts that fit: TP (inside a node) x PP x interleaved chunks x ZeRO stage x micro-batch x
    recompute (x EP for a MoE model), at the global batch of `base` (its `global_batch`, else its micro-batch x
    DP x accumulation), every other setting (sequence length, offload, efficiencies) from `base`.

    `fixed` pins dimensions (names from SEARCH_DIMS) to values. Raises ValueError naming why when no layout fits.
    """
    fixed = dict(fixed or {})
    unknown = set(fixed) - set(SEARCH_DIMS)
    if unknown:
        raise ValueError(f"cannot pin {sorted(unknown)}: the search dimensions are {list(SEARCH_DIMS)}")
    if base.global_batch is not None:
        global_batch = base.global_batch
    else:
        dp = max(1, cluster.world_size // (base.tp * base.pp))
        global_batch = base.micro_batch * dp * (base.grad_accum_steps or 1)
    plans, too_big, impossible, errors = [], [], 0, {}
    for layout in _candidates(model, cluster, base, fixed, global_batch):
        trial = dataclasses.replace(base, **layout, global_batch=global_batch, grad_accum_steps=None)
        try:
            plan = make_plan(model, cluster, trial)
        except ValueError as err:
            impossible += 1
            errors.setdefault(str(err), layout)
            continue
        (plans if plan.fits else too_big).append(plan)
    if not plans:
        where = f"{cluster.nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name}"
        if not too_big:
            reasons = "; ".join(list(errors)[:3]) or "no combination of the pinned sizes exists"
            raise ValueError(
                f"no layout of {model.name} is possible on {where} at global batch {global_batch}: {reasons}"
            )
        small = min(too_big, key=lambda p: p.total_bytes)
        biggest = max(small.memory, key=small.memory.__getitem__)
        raise ValueError(
            f"no layout of {model.name} fits {where} at global batch {global_batch} ({len(too_big)} planned, "
            f"{impossible} impossible): the smallest, {layout_text(small)}, needs {small.total_bytes / GIB:.1f} GiB "
            f"per GPU > {small.capacity_bytes / GIB:.1f} GiB (largest part: {biggest}, "
            f"{small.memory[biggest] / GIB:.1f} GiB); add nodes, pin fewer dimensions, or offload "
            "(--offload-optimizer cpu)"
        )
    plans.sort(key=lambda p: (-p.tokens_per_s, p.total_bytes))
    return LayoutSearch(
        plans=plans, tried=len(plans) + len(too_big), too_big=len(too_big), impossible=impossible, fixed=fixed
    )


def settings_from_deepspeed(ds_config: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Planner settings read from a DeepSpeed config dict (ZeRO stage, buckets, AutoTP size)."""
    zero = ds_config.get("zero_optimization", {}) or {}
    out: dict[str, Any] = {}
    if "stage" in zero:
        out["zero_stage"] = int(zero["stage"])
    for ds_key, key in (
        ("stage3_max_live_parameters", "zero3_max_live_parameters"),
        ("reduce_bucket_size", "reduce_bucket_size"),
        ("allgather_bucket_size", "allgather_bucket_size"),
    ):
        if ds_key in zero:
            out[key] = float(zero[ds_key])
    for key in ("offload_optimizer", "offload_param"):
        device = (zero.get(key) or {}).get("device")
        if device:
            out[key] = str(device)
    autotp = (ds_config.get("tensor_parallel") or {}).get("autotp_size")
    if autotp:
        out["tp"] = int(autotp)
    if "train_micro_batch_size_per_gpu" in ds_config and isinstance(
        ds_config["train_micro_batch_size_per_gpu"], int
    ):
        out["micro_batch"] = ds_config["train_micro_batch_size_per_gpu"]
    out.update({k: v for k, v in overrides.items() if v is not None})
    return out


__all__ = [
    "GPUS",
    "PLAN_SCHEDULES",
    "Cluster",
    "GPUSpec",
    "ModelShape",
    "ParallelSettings",
    "Plan",
    "activation_bytes_per_layer",
    "LayoutSearch",
    "SEARCH_DIMS",
    "largest_micro_batch",
    "layout_table",
    "layout_text",
    "pipeline_bubble",
    "search_layouts",
    "logits_bytes",
    "make_plan",
    "model_flops_per_token",
    "model_state_bytes",
    "offload_states",
    "parse_cluster",
    "ring_bytes",
    "settings_from_deepspeed",
]

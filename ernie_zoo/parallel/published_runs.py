"""The planner against published measurements of real large-model training runs.

Each row is a run whose paper states the model, the hardware, the layout (TP, PP, DP, global batch) and the
achieved throughput per GPU. The planner plans the same model on the same cluster with the published layout
pinned (micro-batch and interleaving are not published, so it picks them), and its predicted throughput is set
against the published one; then it searches freely and we see whether it picks the same layout.

Both papers report *hardware* TFLOP/s with Megatron-LM's count (Narayanan et al. 2021, eq. 3), which includes
the forward pass repeated by full activation recomputation:

    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   per iteration (B sequences of s tokens, l layers, hidden h)

The planner's MFU counts model FLOPs, 6N + 12 l h s per token (no recompute): 72 B s l h^2 (1 + s/(6h)) +
6 B s V h. `published_model_tflops` converts the published figure to model FLOP/s with the exact ratio of the
two counts, so the rows compare like with like.

A mixture-of-experts row (`MOE_RUNS`) sets the planner against DeepSeek-V3's pretraining cost: its published
shape as data (`DEEPSEEK_V3`, counted by `moe_shape`), the published cluster and layout pinned, and the
throughput per GPU its report's GPU hours imply (`moe_table`).

    python -m ernie_zoo.parallel.published_runs      # the markdown tables in docs/scale.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .planner import (
    Cluster,
    ModelShape,
    ParallelSettings,
    Plan,
    parse_cluster,
    search_layouts,
)

#: |predicted / published - 1| of every row stays within ERROR_BOUND and the mean of |error| within MEAN_ERROR_BOUND
#: (tests/test_planner_search.py checks both)
ERROR_BOUND = 0.30
MEAN_ERROR_BOUND = 0.15


@dataclass(frozen=True)
class PublishedRun:
    """One published training run: a GPT-style decoder (vocabulary-parallel embedding tied to the output layer)."""

    name: str
    source: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    cluster: str  # `parse_cluster` text
    tp: int
    pp: int
    global_batch: int
    zero_stage: int
    hw_tflops: float  # published TFLOP/s per GPU, Megatron-LM's count (recompute included)
    position_embeddings: bool = True  # BLOOM uses ALiBi: none
    micro_batch: int | None = None  # where the source states it


MEGATRON = "Narayanan et al. 2021 (Megatron-LM, SC21), Table 1"
BLOOM = "BigScience 2022 (BLOOM, arXiv 2211.05100) and its model card"

# Table 1 of Narayanan et al. 2021: GPT models on DGX A100 80GB nodes (8 GPUs, NVLink + 8 x 200 Gb/s HDR), vocabulary
# 51,200, sequence 2048, fp16, full activation recomputation, plain data parallelism (no ZeRO in that paper).
# Columns: parameters (B), heads, hidden, layers, TP, PP, GPUs, batch, achieved TFLOP/s per GPU.
_TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]

RUNS: list[PublishedRun] = [
    PublishedRun(
        name=f"GPT {size:g}B",
        source=MEGATRON,
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=51200,
        seq_len=2048,
        cluster=f"nodes={gpus // 8},gpus_per_node=8,gpu=a100-80gb",
        tp=tp,
        pp=pp,
        global_batch=batch,
        zero_stage=0,
        hw_tflops=tflops,
    )
    for size, heads, hidden, layers, tp, pp, gpus, batch, tflops in _TABLE_1
] + [
    # BLOOM-176B: 70 layers, hidden 14336, 112 heads, vocabulary 250,880, sequence 2048, ALiBi (no position
    # embeddings); 48 nodes of 8 A100 80GB (NVLink inside, 4 x 100 Gb/s Omni-Path per node: 50 Gb/s per GPU);
    # TP 4 x PP 12 x DP 8, ZeRO-1, bf16, full recomputation, global batch 2048, micro-batch 2; about 150 TFLOP/s
    # per GPU with Megatron-LM's count.
    PublishedRun(
        name="BLOOM 176B",
        source=BLOOM,
        layers=70,
        hidden=14336,
        heads=112,
        vocab=250880,
        seq_len=2048,
        cluster="nodes=48,gpus_per_node=8,gpu=a100-80gb,nic_gbit_s=50",
        tp=4,
        pp=12,
        global_batch=2048,
        zero_stage=1,
        hw_tflops=150,
        position_embeddings=False,
        micro_batch=2,
    ),
]


def gpt_shape(run: PublishedRun) -> ModelShape:
    """A Megatron GPT's parameters split as Megatron's TP splits them: per layer QKV + first MLP matrix
    (column-parallel, weights and biases) and the two output projections (row-parallel, weights) are sharded,
    2 row-parallel biases and 2 LayerNorms replicated; the vocabulary-parallel embedding is sharded and tied to
    the output layer (a copy on the last stage under PP); position embeddings and the final LayerNorm replicated."""
    h, L, V = run.hidden, run.layers, run.vocab
    pos = run.seq_len * h if run.position_embeddings else 0
    layer_sharded, layer_replicated = L * (12 * h * h + 7 * h), L * 6 * h
    return ModelShape(
        n_params=layer_sharded + layer_replicated + V * h + pos + 2 * h,
        n_sharded=layer_sharded + V * h,
        n_replicated=layer_replicated + pos + 2 * h,
        layers=L,
        hidden=h,
        heads=run.heads,
        ffn=4 * h,
        vocab=V,
        name=run.name,
        first_sharded=V * h,
        first_replicated=pos,
        last_sharded=V * h,
        last_replicated=2 * h,
        layer_sharded=layer_sharded,
        layer_replicated=layer_replicated,
    )


def published_model_tflops(run: PublishedRun) -> float:
    """The published hardware TFLOP/s per GPU as model TFLOP/s (no recompute), by the ratio of the two counts."""
    s, L, h, V = run.seq_len, run.layers, run.hidden, run.vocab
    hardware = 96 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    model = 72 * s * L * h * h * (1 + s / (6 * h)) + 6 * s * V * h
    return run.hw_tflops * model / hardware


def _settings(run: PublishedRun) -> ParallelSettings:
    """The planner's defaults (efficiency, links) with the run's sequence length, global batch and recompute."""
    return ParallelSettings(
        seq_len=run.seq_len,
        global_batch=run.global_batch,
        recompute="full",
        tp=run.tp,
        pp=run.pp,
        zero_stage=run.zero_stage,
    )


@dataclass
class Comparison:
    run: PublishedRun
    cluster: Cluster
    pinned: Plan  # the published TP, PP, DP and ZeRO; micro-batch and chunks the planner's pick
    searched: Plan  # the planner's own choice

    @property
    def published_tflops(self) -> float:
        return published_model_tflops(self.run)

    @property
    def predicted_tflops(self) -> float:
        return self.pinned.mfu * self.cluster.gpu.peak_tflops

    @property
    def error(self) -> float:
        return self.predicted_tflops / self.published_tflops - 1


def compare(run: PublishedRun) -> Comparison:
    """Plan `run` with its published layout pinned, and search the layout freely (same model, cluster, batch)."""
    cluster = parse_cluster(run.cluster)
    shape = gpt_shape(run)
    base = _settings(run)
    # Megatron-LM 2021 and BLOOM ran 1F1B (interleaved or not): the zero-bubble schedules are left out of both
    pinned = {
        "tp": run.tp,
        "pp": run.pp,
        "zero_stage": run.zero_stage,
        "recompute": "full",
        "schedule": "1f1b",
    }
    if run.micro_batch is not None:
        pinned["micro_batch"] = run.micro_batch
    best_pinned = search_layouts(shape, cluster, base, pinned).best
    # The search within what the run's software offered: its ZeRO stage and full recomputation (Megatron-LM 2021
    # had no ZeRO; BLOOM ran ZeRO-1), TP, PP, chunks and micro-batch free.
    searched = search_layouts(
        shape, cluster, base, {"zero_stage": run.zero_stage, "recompute": "full", "schedule": "1f1b"}
    ).best
    return Comparison(run, cluster, best_pinned, searched)


def table(rows: list[Comparison] | None = None) -> str:
    """The markdown comparison table of docs/scale.md."""
    rows = rows if rows is not None else [compare(run) for run in RUNS]
    lines = [
        "| model | hardware | published layout | published TFLOP/s/GPU (model FLOPs, MFU) | planner, same layout "
        "| error | planner's search (same ZeRO, full recompute): layout, TFLOP/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r, c, p, q = row.run, row.cluster, row.pinned, row.searched
        st, sq = p.settings, q.settings
        same = (sq.tp, sq.pp) == (r.tp, r.pp)
        choice = (
            f"TP {sq.tp} x {q.pipeline_text()}DP {q.dp}, micro {sq.micro_batch}: {q.mfu * c.gpu.peak_tflops:.0f}"
            f" ({'same TP x PP' if same else 'differs'})"
        )
        lines.append(
            f"| {r.name} | {c.world_size} x {c.gpu.name}, {c.gpu.nic_gbit_s:g} Gb/s per GPU | TP {r.tp} x PP {r.pp} x "
            f"DP {p.dp}, batch {r.global_batch}, ZeRO-{r.zero_stage} | {r.hw_tflops:g} ({row.published_tflops:.0f}, "
            f"{row.published_tflops / c.gpu.peak_tflops:.0%}) | {row.predicted_tflops:.0f} (micro {st.micro_batch}"
            f"{f', {st.virtual_stages} chunks' if st.virtual_stages > 1 else ''}) | {row.error:+.0%} | {choice} |"
        )
    errors = [abs(row.error) for row in rows]
    lines.append(
        f"\nmean |error| {sum(errors) / len(errors):.1%}, largest {max(errors):.1%} (bounds: {MEAN_ERROR_BOUND:.0%}, "
        f"{ERROR_BOUND:.0%}); TFLOP/s are model FLOPs per GPU unless marked published hardware"
    )
    return "\n".join(lines)


# ── a published MoE run ─────────────────────────────────────────────────────────────────────────────────────

DEEPSEEK_V3_SOURCE = (
    "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv 2412.19437): sec. 4.2 (shapes), sec. 3.1-3.2 (2048 "
    "H800, PP 16 x EP 64 x ZeRO-1 DP, DualPipe), sec. 4.2 (sequence 4096, batch 15360), Table 1 (2664K H800 GPU "
    "hours for 14.8T pretraining tokens: 180K per trillion)"
)

#: DeepSeek-V3 as its report (sec. 4.2) and its released config.json give it: 61 layers, the first 3 dense, hidden
#: 7168, multi-head latent attention (128 heads, query / KV compression 1536 / 512, head dims 128 + 64 RoPE for
#: queries and keys, 128 for values), 1 shared + 256 routed SwiGLU experts of width 2048, top-8, vocabulary 129,280,
#: untied embeddings. 671B parameters, 37B active per token (the report's count; `moe_shape` gives 671.0B and
#: 37.6B). Its multi-token-prediction module (one more MoE layer and a second pass of the output head, ~4% of the
#: model FLOPs) is left out.
DEEPSEEK_V3 = dict(
    layers=61,
    dense_layers=3,
    hidden=7168,
    heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    ffn=18432,
    experts=256,
    shared_experts=1,
    expert_ffn=2048,
    top_k=8,
    vocab=129280,
)


#: Qwen3-235B-A22B as its released config.json gives it: 94 layers, every one MoE, hidden 4096, 64 query / 4 KV heads
#: of 128 (RMSNorm on queries and keys), 128 routed SwiGLU experts of width 1536, top-8, no shared expert,
#: vocabulary 151,936, untied embeddings. 235B parameters, 22B active (`moe_shape`: 235.1B and 22.2B).
QWEN3_235B = dict(
    layers=94,
    dense_layers=0,
    hidden=4096,
    heads=64,
    kv_heads=4,
    head_dim=128,
    ffn=12288,
    experts=128,
    shared_experts=0,
    expert_ffn=1536,
    top_k=8,
    vocab=151936,
)


def moe_shape(d: dict, name: str) -> ModelShape:
    """A MoE decoder from its published shape (`DEEPSEEK_V3`'s or `QWEN3_235B`'s keys) as the planner counts it,
    split as transformers' TP plans split these models: attention's column projections (queries, keys and values,
    or MLA's up-projections q_b / kv_b) and its output projection, the dense MLPs and the shared experts sharded;
    MLA's down-projections q_a / kv_a, every norm and the router replicated; the vocabulary-parallel embedding and
    output head sharded; routed experts left to EP."""
    h, L, E, V = d["hidden"], d["layers"], d["experts"], d["vocab"]
    a, moe = d["heads"], d["layers"] - d["dense_layers"]
    if "kv_lora_rank" in d:  # multi-head latent attention (DeepSeek-V2/V3)
        qk, kv_heads = d["qk_nope_head_dim"] + d["qk_rope_head_dim"], a
        attn_sharded = d["q_lora_rank"] * a * qk + d["kv_lora_rank"] * a * (
            d["qk_nope_head_dim"] + d["v_head_dim"]
        )
        attn_sharded += a * d["v_head_dim"] * h
        attn_replicated = (
            h * d["q_lora_rank"] + d["q_lora_rank"] + h * (d["kv_lora_rank"] + d["qk_rope_head_dim"])
        )
        attn_replicated += d["kv_lora_rank"]  # the query and KV compression norms
        width = (
            a * (qk + d["v_head_dim"]) // 2
        )  # Q K^T's width (heads x 192) and A V's (heads x 128), averaged
    else:  # grouped-query attention with RMSNorm on queries and keys (Qwen3)
        kv_heads, hd = d["kv_heads"], d["head_dim"]
        attn_sharded = 2 * h * a * hd + 2 * h * kv_heads * hd
        attn_replicated, width = 2 * hd, a * hd
    attn_replicated += 2 * h  # the layer's two RMSNorms
    expert = 3 * h * d["expert_ffn"]  # gate, up, down
    layer_sharded = (
        L * attn_sharded + d["dense_layers"] * 3 * h * d["ffn"] + moe * d["shared_experts"] * expert
    )
    layer_replicated = L * attn_replicated + moe * E * h  # the router
    if "kv_lora_rank" in d:
        layer_replicated += moe * E  # DeepSeek-V3's router bias correction
    n_expert = moe * E * expert
    n_sharded, n_replicated = layer_sharded + 2 * V * h, layer_replicated + h
    n_params = n_sharded + n_replicated + n_expert
    active = n_params - n_expert + n_expert * d["top_k"] // E
    return ModelShape(
        n_params=n_params,
        n_sharded=n_sharded,
        n_replicated=n_replicated,
        layers=L,
        hidden=h,
        heads=a,
        ffn=d["ffn"],
        vocab=V,
        name=name,
        kv_heads=kv_heads,
        attn_width=width,
        n_expert=n_expert,
        n_active=active,
        n_block_active=active - 2 * V * h,
        experts=E,
        top_k=d["top_k"],
        moe_layers=moe,
        expert_ffn=d["expert_ffn"],
        shared_experts=d["shared_experts"],
        first_sharded=V * h,
        last_sharded=V * h,
        last_replicated=h,
        layer_sharded=layer_sharded,
        layer_replicated=layer_replicated,
    )


@dataclass(frozen=True)
class PublishedMoERun:
    """A published MoE pretraining run: the model (a shape dict), cluster and layout, and its throughput."""

    name: str
    source: str
    shape: dict
    cluster: str  # `parse_cluster` text
    tp: int
    pp: int
    ep: int
    zero_stage: int
    seq_len: int
    global_batch: int
    tokens_per_gpu_s: float  # published (or derived from published GPU hours and tokens)
    derivation: str  # how tokens_per_gpu_s follows from the source
    recompute: str  # the planner's nearest to what the run recomputed
    ep_overlap: bool  # the run hides its all-to-alls under computation
    micro_batch: int | None = None  # where the source states it
    virtual_stages: int | None = (
        None  # pinned where the planner can hold the source's; else the planner's pick
    )
    sequence_parallel: bool = False
    within_bound: bool = True  # the planner models what the run did; False: a row shown for what it does not


#: |predicted / published - 1| of a MoE row with `within_bound` stays within this (tests/test_planner_search.py)
MOE_ERROR_BOUND = 0.25

QWEN3_SOURCE = (
    "NVIDIA Megatron-MoE-ModelZoo, best_practice/Qwen3/readme.md (github.com/yanring/Megatron-MoE-ModelZoo, commit "
    "c1ad0b5): Qwen3-235B-A22B on 256 H100, 'Intra-node EP strategy', dispatcher A2A, BF16"
)

MOE_RUNS: list[PublishedMoERun] = [
    # Megatron-Core on 32 nodes of 8 H100 (NVLink 4, 8 x 400 Gb/s InfiniBand), BF16, sequence 4096, the plain
    # all-to-all token dispatcher: TP 2 x PP 32 (virtual 3) x DP 4, EP 8 folded over each stage's 8 GPUs (one node:
    # every all-to-all on NVLink), expert-TP 1, micro-batch 1, global batch 2048, recompute of the norms and the
    # MoE activation function (the planner's nearest: selective), no all-to-all overlap; 24.2 s per step. Megatron
    # counts the embedding and the loss as pipeline layers, so 94 layers fill 32 x 3 chunks; the planner's chunks
    # hold transformer layers only, so it picks 1 or 2 (94 < 96). Sequence parallelism (Megatron requires it with
    # EP and TP) and the distributed optimizer (ZeRO-1) as Megatron-Core runs them.
    PublishedMoERun(
        name="Qwen3-235B-A22B",
        source=QWEN3_SOURCE,
        shape=QWEN3_235B,
        cluster="nodes=32,gpus_per_node=8,gpu=h100-80gb",
        tp=2,
        pp=32,
        ep=8,
        zero_stage=1,
        seq_len=4096,
        global_batch=2048,
        tokens_per_gpu_s=2048 * 4096 / 24.2 / 256,
        derivation="2048 x 4096 tokens per 24.2 s step on 256 GPUs",
        recompute="selective",
        ep_overlap=False,
        micro_batch=1,
        sequence_parallel=True,
    ),
    # 2048 H800 = 256 nodes of 8 (NVLink inside, one 400 Gb/s InfiniBand NIC per GPU); PP 16 (DualPipe), EP 64 over
    # 8 nodes, ZeRO-1 data parallelism, no TP; batch 15,360 sequences of 4096 after a ramp over the first 469B of
    # 14.8T tokens; recompute of the RMSNorms and MLA up-projections only (the planner's nearest: selective, with
    # flash attention, which the report does not name); DualPipe overlaps the all-to-alls with computation. FP8
    # GEMMs: the plan stays at its bf16 peak x 50%, so the row also says how far FP8 moved the run from that.
    PublishedMoERun(
        name="DeepSeek-V3 671B-A37B",
        source=DEEPSEEK_V3_SOURCE,
        shape=DEEPSEEK_V3,
        cluster="nodes=256,gpus_per_node=8,gpu=h800-80gb",
        tp=1,
        pp=16,
        ep=64,
        zero_stage=1,
        seq_len=4096,
        global_batch=15360,
        tokens_per_gpu_s=14.8e12 / (2664e3 * 3600),
        derivation="14.8T tokens / 2664K H800 GPU hours (pretraining, Table 1) = 1543 tokens/s per GPU",
        recompute="full",
        ep_overlap=True,
        virtual_stages=1,
        within_bound=False,
    ),
]


@dataclass
class MoEComparison:
    run: PublishedMoERun
    cluster: Cluster
    plan: Plan  # the published layout pinned; micro-batch the planner's pick

    @property
    def predicted_tokens_per_gpu_s(self) -> float:
        return self.plan.tokens_per_s / self.cluster.world_size

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_gpu_s / self.run.tokens_per_gpu_s - 1


def compare_moe(run: PublishedMoERun, **overrides: Any) -> MoEComparison:
    """Plan `run`'s model on its cluster with its published layout pinned (`overrides`: other settings, e.g.
    ep_overlap=False to see what the overlap is worth)."""
    cluster = parse_cluster(run.cluster)
    given = dict(flash_attention=True, sequence_parallel=run.sequence_parallel, ep_overlap=run.ep_overlap)
    base = ParallelSettings(seq_len=run.seq_len, global_batch=run.global_batch, **{**given, **overrides})
    pinned = {
        "tp": run.tp,
        "pp": run.pp,
        "ep": run.ep,
        "zero_stage": run.zero_stage,
        "recompute": run.recompute,
    }
    for key in ("micro_batch", "virtual_stages"):
        if getattr(run, key) is not None:
            pinned[key] = getattr(run, key)
    return MoEComparison(
        run, cluster, search_layouts(moe_shape(run.shape, run.name), cluster, base, pinned).best
    )


def moe_table(rows: list[MoEComparison] | None = None) -> str:
    """The markdown MoE comparison of docs/scale.md: the published run and the planner on its layout, with and
    without the all-to-all overlap."""
    rows = rows if rows is not None else [compare_moe(run) for run in MOE_RUNS]
    lines = [
        "| model | hardware | published layout | published tokens/s/GPU | planner, same layout (MFU) | error "
        "| planner, all-to-alls not overlapped |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r, c, p = row.run, row.cluster, row.plan
        bare = compare_moe(r, ep_overlap=False)
        lines.append(
            f"| {r.name} | {c.world_size} x {c.gpu.name}, {c.gpu.nic_gbit_s:g} Gb/s per GPU | TP {r.tp} x PP {r.pp} x "
            f"DP {p.dp} (EP {r.ep}), ZeRO-{r.zero_stage}, batch {r.global_batch} x {r.seq_len} | "
            f"{r.tokens_per_gpu_s:,.0f} ({r.derivation}) | {row.predicted_tokens_per_gpu_s:,.0f} (micro "
            f"{p.settings.micro_batch}, recompute {p.settings.recompute}; {p.mfu:.1%}) | {row.error:+.0%} | "
            f"{bare.predicted_tokens_per_gpu_s:,.0f} ({bare.error:+.0%}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(moe_table())

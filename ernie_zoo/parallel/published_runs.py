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

    python -m ernie_zoo.parallel.published_runs      # the markdown table in docs/scale.md
"""

from __future__ import annotations

from dataclasses import dataclass

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


if __name__ == "__main__":
    print(table())

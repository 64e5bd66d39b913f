"""Pipeline parallelism as data: which layers each stage holds, and the schedules that run the stages.

A model is split by its stack of identical layers (Megatron-LM / torchtitan's way): stage s of S holds a
contiguous run of layers, the first stage also the embeddings, the last the head. A `PipelineSplit` names the
paths of those parts in a model, so the same functions split any transformers-style stack:

    ENCODER_SPLIT (ErnieZooForMaskedLM)           DECODER_SPLIT (transformers' Ernie4_5ForCausalLM)
    layers  ernie.encoder.layer                   model.layers
    first   ernie.embeddings                      model.embed_tokens
    last    cls (MLM head), word_polarity         model.norm, lm_head
    tied    cls.predictions.decoder.weight        lm_head.weight
              = ernie.embeddings.word_embeddings    = model.embed_tokens  (when tie_word_embeddings)

    layers:   0 1 2 3 | 4 5 6 7           pp_size 2, 1F1B: stage s on pipeline rank s
    stages:   [emb 0 1 2 3] -> [4 5 6 7 head]
    interleaved, zero_bubble (virtual 2): stage s on pipeline rank s % pp_size (looped)
    stages:   [emb 0 1] -> [2 3] -> [4 5] -> [6 7 head]      rank 0: stages 0, 2; rank 1: stages 1, 3
    zbv (always 2 per rank): stage s on rank s for s < pp_size, else 2 pp_size - 1 - s (a V)
    stages:   [emb 0 1] -> [2 3] -> [4 5] -> [6 7 head]      rank 0: stages 0, 3; rank 1: stages 1, 2

The schedules (`distributed.pp_schedule`; torch.distributed.pipelining's classes, torch 2.13) and their idle
fraction ("bubble") with m micro batches, p pipeline ranks, v stages per rank, measured on the schedules' own
action lists (tests/test_pipeline_parallel.py) under the zero-bubble paper's equal costs (forward = backward-input
= backward-weight, a full backward 2 forwards):

    1f1b          Schedule1F1B                    v = 1   (p-1)/(m+p-1)      Narayanan et al. 2021, sec. 2.2
    interleaved   ScheduleInterleaved1F1B         v >= 2  (p-1)/(v m+p-1)    ibid., sec. 2.2.2
    zero_bubble   ScheduleInterleavedZeroBubble   v >= 1  (p-1)/(3 v m+p-1)  Qi et al. 2024 (ZB-H1 / "ZB1P":
                                                                              (p-1)/(3m) of the work at v = 1)
    zbv           ScheduleZBVZeroBubble           v = 2   (p-1)/(6m+p-1)     ibid., sec. 6 (ZB-V), m >= 2p-1

Zero-bubble schedules split each backward into B (input gradient, what the stage before waits for) and W (weight
gradient, deferred into what would be the bubble). The paper's "0" for ZB-V counts each rank from its own first
action; on a step's clock the warm-up's p-1 chunk forwards stay, the (p-1)/(6m+p-1) above.

`prune_to_stages` keeps only a rank's stages in a model built whole, on the meta device (then only the stages are
allocated and initialised, `models.seeded_init`, with the values the whole model has there) or for real: the
layer list becomes a `ModuleDict` keyed by the original layer numbers, so every parameter keeps
its name (`ernie.encoder.layer.5.attention...`): a stage's state dict is a subset of the whole model's, the TP
plan's `encoder.layer.*` entries match it, and the shards of a checkpoint join by name.

Tied word embeddings (the MLM decoder / LM head shares the input embedding matrix): the last stage keeps the
embedding *module* that owns the tied weight (not the rest of the embeddings), so the head stays tied to a
parameter of the same name as on the first stage. The two copies start equal; the engine sums their gradients
over the first and last stage before every optimizer step (Megatron's embedding group), so the same AdamW update
keeps them equal, bit for bit.

Nothing here imports `torch.distributed` at module level; the engine (`training.pipeline_engine`) runs the stages
with `torch.distributed.pipelining`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torch import nn

SCHEDULES = ("1f1b", "interleaved", "zero_bubble", "zbv")


@dataclasses.dataclass(frozen=True)
class PipelineSplit:
    """Where the parts of a model sit (module paths): the layer stack, what the first and the last stage hold
    besides their layers, and `tied`: head parameter path -> the module owning the weight it is tied to (kept on
    the last stage too)."""

    layers: str
    first: tuple[str, ...]
    last: tuple[str, ...]
    tied: dict[str, str] = dataclasses.field(default_factory=dict)


ENCODER_SPLIT = PipelineSplit(
    layers="ernie.encoder.layer",
    first=("ernie.embeddings",),
    last=("cls", "word_polarity"),
    tied={"cls.predictions.decoder.weight": "ernie.embeddings.word_embeddings"},
)

#: transformers' Ernie4_5ForCausalLM (and Llama-style decoders): for the decoder pretraining engine to use.
DECODER_SPLIT = PipelineSplit(
    layers="model.layers",
    first=("model.embed_tokens",),
    last=("model.norm", "lm_head"),
    tied={"lm_head.weight": "model.embed_tokens"},
)


def stage_layers(num_layers: int, num_stages: int) -> list[range]:
    """Contiguous layer ranges of the stages, as even as possible; the last stages take the extra layers (the
    first stage already holds the embeddings). Raises ValueError when a stage would hold no layer."""
    if num_stages < 1:
        raise ValueError(f"the pipeline needs at least one stage, got {num_stages}")
    if num_layers < num_stages:
        raise ValueError(
            f"{num_layers} layers cannot fill {num_stages} pipeline stages (every stage needs one layer): lower "
            "distributed.pp_size (or pp_virtual_stages) or use a model with more layers"
        )
    base, extra = divmod(num_layers, num_stages)
    sizes = [base + (1 if s >= num_stages - extra else 0) for s in range(num_stages)]
    starts = [sum(sizes[:s]) for s in range(num_stages)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


def stages_per_rank(schedule: str, virtual_stages: int) -> int:
    """The stages each pipeline rank runs under `schedule`: 1 for 1f1b, 2 for zbv, else `virtual_stages`."""
    return {"1f1b": 1, "zbv": 2}.get(schedule, virtual_stages)


def stage_ranks(pp_size: int, virtual_stages: int = 1, v_shape: bool = False) -> list[int]:
    """The pipeline rank of every stage: stage s on rank s % pp_size (the looped placement of Megatron's and
    torch.distributed.pipelining's interleaved schedules), or with `v_shape` (zbv, 2 stages per rank) down the
    ranks and back up: s for s < pp_size, 2 pp_size - 1 - s after (the first and the last stage share rank 0)."""
    n = pp_size * virtual_stages
    if v_shape:
        return [s if s < pp_size else 2 * pp_size - 1 - s for s in range(n)]
    return [s % pp_size for s in range(n)]


def rank_stages(pp_rank: int, pp_size: int, virtual_stages: int = 1, v_shape: bool = False) -> list[int]:
    """The stage indices pipeline rank `pp_rank` runs, in order (`stage_ranks`)."""
    return [s for s, r in enumerate(stage_ranks(pp_size, virtual_stages, v_shape)) if r == pp_rank]


def check_schedule(schedule: str, pp_size: int, virtual_stages: int, n_microbatches: int) -> None:
    """Refuse, naming the recipe key, a schedule torch.distributed.pipelining cannot run on this layout."""

    def refuse(key: str, value: object, message: str) -> None:
        raise ValueError(f"recipe key 'distributed.{key}' = {value!r}: {message}")

    if schedule not in SCHEDULES:
        refuse("pp_schedule", schedule, f"must be one of {', '.join(SCHEDULES)}")
    if schedule != "1f1b" and pp_size < 2:
        refuse("pp_schedule", schedule, f"{schedule} needs distributed.pp_size >= 2")
    if schedule == "interleaved" and virtual_stages < 2:
        refuse("pp_virtual_stages", virtual_stages, "interleaved runs >= 2 stages per rank (1 is 1f1b)")
    if schedule == "zero_bubble" and virtual_stages < 1:
        refuse("pp_virtual_stages", virtual_stages, "zero_bubble runs >= 1 stages per rank (1: ZB-H1)")
    if schedule == "zbv" and virtual_stages != 2:
        refuse("pp_virtual_stages", virtual_stages, "zbv runs exactly 2 stages per rank (a V); set it to 2")
    m, p = n_microbatches, pp_size
    if m < 1:
        refuse("pp_microbatches", m, "must be >= 1")
    if schedule == "1f1b" and p > 1 and m < p:
        refuse("pp_microbatches", m, f"1f1b needs at least pp_size ({p}) micro batches in flight")
    if schedule in ("interleaved", "zero_bubble") and m % max(1, m // p):
        # torch's flexible rounds: m micro batches in m // p rounds of equal size
        refuse(
            "pp_microbatches",
            m,
            f"{schedule} runs the micro batches in {m // p} equal rounds (pp_microbatches // pp_size {p}), which "
            f"{m} does not split into: use a multiple of pp_size",
        )


def _get(model: nn.Module, path: str) -> nn.Module | None:
    module: nn.Module | None = model
    for part in path.split("."):
        module = getattr(module, part, None) if module is not None else None
    return module


def _set(model: nn.Module, path: str, value: nn.Module | None) -> None:
    parent, _, leaf = path.rpartition(".")
    owner = model.get_submodule(parent) if parent else model
    if isinstance(owner, nn.ModuleDict | nn.ModuleList) and value is None:
        del owner[leaf if isinstance(owner, nn.ModuleDict) else int(leaf)]
    else:
        setattr(owner, leaf, value)


def prune_to_stages(
    model: nn.Module, split: PipelineSplit, stages: list[int], num_stages: int
) -> dict[int, list[int]]:
    """Keep in `model` (in place) only what `stages` (of `num_stages`) hold; returns {stage: its layer numbers}.

    The layer stack becomes an `nn.ModuleDict` keyed by the original numbers (parameter names do not change);
    the first-stage modules stay only with stage 0, the last-stage ones only with stage num_stages - 1, except
    the modules owning tied weights, which the last stage keeps (see the module docstring).
    """
    stack = _get(model, split.layers)
    if not isinstance(stack, nn.ModuleList):
        raise ValueError(f"{type(model).__name__} has no layer list at {split.layers!r}")
    ranges = stage_layers(len(stack), num_stages)
    owned = {s: list(ranges[s]) for s in stages}
    keep = {i for layers in owned.values() for i in layers}
    _set(model, split.layers, nn.ModuleDict({str(i): layer for i, layer in enumerate(stack) if i in keep}))
    first, last = 0 in stages, num_stages - 1 in stages
    tied_owners = {w.rpartition(".")[0] for w in tied_weights(split, model)} if last else set()
    if not last:
        for path in split.last:
            if _get(model, path) is not None:
                _set(model, path, None)
    if not first:
        for path in split.first:
            module = _get(model, path)
            if module is None:
                continue
            inside = [owner for owner in tied_owners if owner.startswith(path + ".")]
            if inside:  # keep only the tied modules (the word embeddings) under a bare container
                container = nn.Module()
                for owner in inside:
                    _set_path(container, owner[len(path) + 1 :], _get(model, owner))
                _set(model, path, container)
            elif path in tied_owners:
                continue
            else:
                _set(model, path, None)
    return owned


def _set_path(root: nn.Module, path: str, value: nn.Module) -> None:
    """`root.<path> = value`, creating bare `nn.Module` containers on the way."""
    *parents, leaf = path.split(".")
    for part in parents:
        if not hasattr(root, part):
            setattr(root, part, nn.Module())
        root = getattr(root, part)
    setattr(root, leaf, value)


def tied_weights(split: PipelineSplit, model: nn.Module) -> list[str]:
    """Names (`owner.weight`) of the weights a head of the whole `model` is tied to (the same Parameter; none when
    the config unties them): what the first and the last stage both hold and whose gradients they sum."""
    out = []
    for head, owner in split.tied.items():
        module, _, leaf = head.rpartition(".")
        head_module, owner_module = _get(model, module), _get(model, owner)
        if head_module is not None and owner_module is not None:
            if getattr(head_module, leaf, None) is getattr(owner_module, "weight", None):
                out.append(f"{owner}.weight")
    return out


def build_schedule(name: str, stages: list, n_microbatches: int, loss_fn: Callable | None) -> object:
    """A `torch.distributed.pipelining` schedule (see the module docstring) over this rank's `stages`
    (PipelineStage objects, in stage order); `loss_fn` returns each micro batch's share of the loss, so gradients
    are not scaled again (`scale_grads=False`)."""
    from torch.distributed import pipelining

    classes = {
        "1f1b": pipelining.Schedule1F1B,
        "interleaved": pipelining.ScheduleInterleaved1F1B,
        "zero_bubble": pipelining.ScheduleInterleavedZeroBubble,
        "zbv": pipelining.ScheduleZBVZeroBubble,
    }
    if name not in classes:
        raise ValueError(f"unknown pipeline schedule {name!r}; choose one of {SCHEDULES}")
    if name == "1f1b":
        if len(stages) != 1:
            raise ValueError(f"schedule 1f1b runs one stage per rank, this rank has {len(stages)}")
        return pipelining.Schedule1F1B(stages[0], n_microbatches, loss_fn=loss_fn, scale_grads=False)
    return classes[name](stages, n_microbatches, loss_fn=loss_fn, scale_grads=False)


#: Cost of an action in `idle_fraction`, in forwards of one stage: a full backward (B) is the input gradient (I)
#: and the weight gradient (W), each as long as the forward (the zero-bubble paper's T_F = T_B = T_W).
ACTION_COSTS = {"F": 1.0, "I": 1.0, "W": 1.0, "B": 2.0}


def idle_fraction(actions: dict[int, list[tuple[int, str, int]]], num_stages: int,
                  costs: dict[str, float] | None = None) -> float:  # fmt: skip
    """The idle share of p ranks x a step's time when each rank runs its `actions` (pp rank -> [(stage, kind,
    micro batch)], kind F, B, I or W, in the order it ran them) as soon as their inputs exist: F(s, k) after
    F(s-1, k); B or I (s, k) after F(s, k) and the backward of (s+1, k); W(s, k) after I(s, k). Each action lasts
    `costs[kind]` (`ACTION_COSTS`); sends take no time. The timeline of the step, computed, not clocked."""
    costs = costs or ACTION_COSTS
    end: dict[tuple[int, str, int], float] = {}
    clock, busy = dict.fromkeys(actions, 0.0), dict.fromkeys(actions, 0.0)
    todo = {rank: list(reversed(acts)) for rank, acts in actions.items()}
    while any(todo.values()):
        progressed = False
        for rank, queue in todo.items():
            while queue:
                stage, kind, mb = queue[-1]
                if kind == "F":
                    deps = [(stage - 1, "F", mb)] if stage > 0 else []
                elif kind == "W":
                    deps = [(stage, "I", mb)]
                else:
                    later = (stage + 1, "B", mb) if (stage + 1, "B", mb) in end else (stage + 1, "I", mb)
                    deps = [(stage, "F", mb)] + ([later] if stage < num_stages - 1 else [])
                if not all(d in end for d in deps):
                    break
                start = max([clock[rank]] + [end[d] for d in deps])
                clock[rank] = end[(stage, kind, mb)] = start + costs[kind]
                busy[rank] += costs[kind]
                queue.pop()
                progressed = True
        if not progressed:
            waiting = {rank: queue[-1] for rank, queue in todo.items() if queue}
            raise ValueError(
                f"the actions deadlock: each rank waits on an input none will produce ({waiting})"
            )
    span = max(clock.values())
    return 1.0 - sum(busy.values()) / (len(actions) * span)


__all__ = [
    "DECODER_SPLIT",
    "ENCODER_SPLIT",
    "SCHEDULES",
    "PipelineSplit",
    "ACTION_COSTS",
    "build_schedule",
    "check_schedule",
    "idle_fraction",
    "prune_to_stages",
    "rank_stages",
    "stage_layers",
    "stage_ranks",
    "stages_per_rank",
    "tied_weights",
]

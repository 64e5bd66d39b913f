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
    interleaved (virtual 2): stage s on pipeline rank s % pp_size
    stages:   [emb 0 1] -> [2 3] -> [4 5] -> [6 7 head]      rank 0: stages 0, 2; rank 1: stages 1, 3

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

SCHEDULES = ("1f1b", "interleaved")


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


def rank_stages(pp_rank: int, pp_size: int, virtual_stages: int = 1) -> list[int]:
    """The stage indices pipeline rank `pp_rank` runs: `pp_rank + pp_size * v` for v < virtual_stages (the
    looped placement of Megatron's and torch.distributed.pipelining's interleaved 1F1B)."""
    return [pp_rank + pp_size * v for v in range(virtual_stages)]


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
    """A `torch.distributed.pipelining` schedule over this rank's `stages` (PipelineStage objects): `1f1b`
    (one stage per rank) or `interleaved` (several); `loss_fn` returns each micro batch's share of the loss, so
    gradients are not scaled again (`scale_grads=False`)."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleInterleaved1F1B

    if name == "1f1b":
        if len(stages) != 1:
            raise ValueError(f"schedule 1f1b runs one stage per rank, this rank has {len(stages)}")
        return Schedule1F1B(stages[0], n_microbatches, loss_fn=loss_fn, scale_grads=False)
    if name == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches, loss_fn=loss_fn, scale_grads=False)
    raise ValueError(f"unknown pipeline schedule {name!r}; choose one of {SCHEDULES}")


def bubble_fraction(pp_size: int, n_microbatches: int, virtual_stages: int = 1) -> float:
    """Idle share of a pipeline step: (p - 1) / (v m + p - 1) (Narayanan et al. 2021; v = 1 is 1F1B / GPipe)."""
    return (pp_size - 1) / (virtual_stages * n_microbatches + pp_size - 1)


__all__ = [
    "DECODER_SPLIT",
    "ENCODER_SPLIT",
    "SCHEDULES",
    "PipelineSplit",
    "bubble_fraction",
    "build_schedule",
    "prune_to_stages",
    "rank_stages",
    "stage_layers",
    "tied_weights",
]

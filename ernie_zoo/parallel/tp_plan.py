"""Tensor-parallel plan for ErnieZoo models, as data (the torchtitan way), kept out of the modeling code.

Megatron-style TP (Shoeybi et al. 2019) splits each transformer layer into one column-parallel and one
row-parallel matmul per block, so a layer needs one all-reduce per block in the forward pass and one in the
backward pass:

    attention:  x ─┬─ query (colwise) ─┐
                   ├─ key   (colwise) ─┼─ heads/t local heads ── attention.output.dense (rowwise) ── all-reduce
                   └─ value (colwise) ─┘
    MLP:        x ── intermediate.dense (colwise, ffn/t) ── GELU ── output.dense (rowwise) ── all-reduce

The character-feature fusion (`feature_fusion="concat"`: Linear(hidden + k*d -> hidden)) is column-parallel
with its output gathered (`colwise_gather_output`), because LayerNorm and the position embeddings that follow
need every hidden unit. Embeddings, LayerNorms, the pooler and the MLM head stay replicated.

Style names are transformers' `tp_plan` names, so the same dict drives two backends:
- `apply_tp(model, tp_mesh)`: PyTorch DTensor (`parallelize_module`);
- `deepspeed_partition_config(plan)`: DeepSpeed AutoTP's `tensor_parallel.partition_config` layer specs.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from typing import Any

from torch import nn

logger = logging.getLogger(__name__)

STYLES = ("colwise", "rowwise", "colwise_gather_output")

# Keys are module paths inside the base model (`ErnieZooModel`); `*` matches one path component.
BASE_TP_PLAN: dict[str, str] = {
    "encoder.layer.*.attention.self.query": "colwise",
    "encoder.layer.*.attention.self.key": "colwise",
    "encoder.layer.*.attention.self.value": "colwise",
    "encoder.layer.*.attention.output.dense": "rowwise",
    "encoder.layer.*.intermediate.dense": "colwise",
    "encoder.layer.*.output.dense": "rowwise",
    "embeddings.char_features.fusion": "colwise_gather_output",
}

# The same plan for the head models (ForMaskedLM, ForCausalLM, ...), whose base model is `model.ernie`.
ERNIE_ZOO_TP_PLAN: dict[str, str] = {f"ernie.{key}": style for key, style in BASE_TP_PLAN.items()}

# Layers without these are optional (only concat fusion has `fusion`); every other entry must match.
OPTIONAL_ENTRIES = ("embeddings.char_features.fusion",)


def tp_plan_for(model: nn.Module) -> dict[str, str]:
    """The TP plan with keys as paths in `model`, restricted to entries that exist in it.

    Works for the base model, head models (keys get the `ernie.` prefix) and models wrapped around them
    (peft: `base_model.model.ernie.`) and pipeline stages: the prefix is the path of a layer's query Linear. Raises
    ValueError if a transformer-layer entry matches nothing, which would mean the architecture changed under
    the plan.
    """
    names = [name for name, _ in model.named_modules()]
    config = getattr(model, "config", None)
    if getattr(config, "base_model_tp_plan", None) and getattr(config, "model_type", "").startswith(
        "ernie4_5"
    ):
        return _decoder_plan(model, names)
    # any layer's query Linear (a pipeline stage holds layers k.. only, `parallel.pipeline`)
    anchor = re.compile(r"(^|.*\.)encoder\.layer\.\d+\.attention\.self\.query$")
    prefixes = [m.group(1) for m in map(anchor.match, names) if m]
    if prefixes:
        prefix = prefixes[0]
    else:  # no encoder layer: the error below names the entry
        prefix = "" if not hasattr(model, "base_model_prefix") or model.base_model is model else "ernie."
    plan = {}
    for key, style in BASE_TP_PLAN.items():
        full = prefix + key
        if any(_path_match(name, full) for name in names):
            plan[full] = style
        elif key not in OPTIONAL_ENTRIES:
            raise ValueError(f"TP plan entry {full!r} matches no module of {type(model).__name__}")
    return plan


def planned_modules(model: nn.Module, plan: dict[str, str]) -> list[tuple[str, nn.Module, str]]:
    """(path, module, style) of every module of `model` that an entry of `plan` matches."""
    return [
        (name, module, style)
        for name, module in model.named_modules()
        for pattern, style in plan.items()
        if _path_match(name, pattern)
    ]


def lora_tp_plan(model: nn.Module, plan: dict[str, str] | None = None) -> dict[str, str]:
    """`plan` (default `tp_plan_for(model)`) for a model in which peft LoRA wraps planned Linear layers: the
    wrapper's `base_layer` takes the entry's style and the LoRA factors split so that the adapter's output is
    laid out as the base layer's (y = W x + B A x, rank r):

        colwise      W and B (r -> out) split by output rows; A replicated (x is whole)
        rowwise      W and A (in -> r) split by input columns, A x all-reduced like W x; B replicated
        colwise_gather_output   W split, output gathered; A and B replicated (x and y are whole)

    Unwrapped entries stay as they are. Raises ValueError for an entry whose modules are wrapped by something
    else than plain LoRA (a LoRA variant such as DoRA, another peft method) or only partly wrapped.
    """
    plan = tp_plan_for(model) if plan is None else plan
    out: dict[str, str] = {}
    for pattern, style in plan.items():
        modules = [m for _, m, _ in planned_modules(model, {pattern: style})]
        wrapped = [m for m in modules if hasattr(m, "base_layer")]
        if not wrapped:
            out[pattern] = style
            continue
        plain_lora = all(
            hasattr(m, "lora_A") and hasattr(m, "lora_B") and not getattr(m, "lora_variant", None)
            for m in wrapped
        )
        if len(wrapped) != len(modules) or not plain_lora:
            raise ValueError(
                f"TP entry {pattern!r}: its Linear layers are wrapped by {type(wrapped[0]).__name__} on "
                f"{len(wrapped)} of {len(modules)} modules; tensor parallelism splits adapters of plain LoRA "
                "wrapping every planned layer only"
            )
        out[f"{pattern}.base_layer"] = style
        if style == "colwise":
            out[f"{pattern}.lora_B.*"] = "colwise"
        elif style == "rowwise":
            out[f"{pattern}.lora_A.*"] = "rowwise"
    return out


def _path_match(name: str, pattern: str) -> bool:
    """Match a dotted module path component by component (`*` never crosses a dot), as parallelize_module."""
    parts, pattern_parts = name.split("."), pattern.split(".")
    return len(parts) == len(pattern_parts) and all(
        fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern_parts)
    )


def style_of(param_name: str, plan: dict[str, str]) -> tuple[str, str] | None:
    """(style, "weight"|"bias") of a parameter under `plan`, or None if the parameter is replicated."""
    module, _, leaf = param_name.rpartition(".")
    for pattern, style in plan.items():
        if _path_match(module, pattern):
            return style, leaf
    return None


def is_sharded(param_name: str, plan: dict[str, str]) -> bool:
    """Whether TP splits this parameter: colwise splits weight and bias, rowwise only the weight."""
    match = style_of(param_name, plan)
    if match is None:
        return False
    style, leaf = match
    return leaf == "weight" or style != "rowwise"


def _decoder_plan(model: nn.Module, names: list[str]) -> dict[str, str]:
    """An ERNIE 4.5 decoder's TP plan: transformers' own `base_model_tp_plan` (q/k/v and gate/up colwise, o and
    down rowwise), with the keys as paths in `model`. The routed MoE experts are fused 3-D tensors whose TP styles
    (packed_colwise, moe_tp_experts) neither DeepSpeed AutoTP nor `apply_tp` takes: they are left out, and
    `check_tp_divisibility` refuses TP > 1 for a MoE model."""
    # any layer's q_proj (a pipeline stage holds layers k.. only, `parallel.pipeline`)
    anchor = re.compile(r"(^|.*\.)layers\.\d+\.self_attn\.q_proj$")
    prefixes = [m.group(1) for m in map(anchor.match, names) if m]
    if not prefixes:
        raise ValueError(f"{type(model).__name__}: no decoder layer found for its TP plan")
    plan = {}
    for key, style in model.config.base_model_tp_plan.items():
        full = prefixes[0] + key
        if style in STYLES and any(_path_match(name, full) for name in names):
            plan[full] = style
    return plan


def check_tp_divisibility(config: Any, tp_size: int, ep_size: int = 1) -> None:
    """Raise ValueError unless `tp_size` divides every dimension the TP plan splits.

    Checked: attention heads (each rank computes whole heads), hidden size (the gathered fusion output and the
    rowwise input) and the FFN size (the colwise MLP output); a MoE decoder's shared experts' FFN too. A MoE
    decoder takes TP > 1 only with expert parallelism (`ep_size` > 1, a multiple of tp_size: the routed experts
    whole on each rank, EP-sharded, `training.expert_engine`), as TP of the fused experts is not built.
    """
    if isinstance(tp_size, bool) or not isinstance(tp_size, int):
        raise TypeError(f"tp_size must be an int, got {type(tp_size).__name__}")
    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    dims = {
        "num_attention_heads": config.num_attention_heads,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
    }
    if getattr(config, "num_key_value_heads", None):  # a GQA decoder: each rank holds whole KV heads
        dims["num_key_value_heads"] = config.num_key_value_heads
    if tp_size > 1 and getattr(config, "moe_num_experts", None):
        if ep_size <= 1 or ep_size % tp_size:
            raise ValueError(
                f"tensor parallel size {tp_size} with expert parallel size {ep_size}: TP of the fused MoE experts "
                "is not built; a MoE decoder takes TP with expert parallelism (distributed.ep_size a multiple of "
                "tp_size, the experts whole on each rank) or trains with ZeRO-3 data parallelism (docs/decoders.md)"
            )
        shared = int(getattr(config, "moe_num_shared_experts", 0) or 0)
        if shared:
            dims["shared experts' moe_intermediate_size x moe_num_shared_experts"] = (
                config.moe_intermediate_size * shared
            )
    bad = [f"{name}={value}" for name, value in dims.items() if value % tp_size != 0]
    if bad:
        raise ValueError(
            f"tensor parallel size {tp_size} must divide the attention heads, hidden size and FFN size of the "
            f"model; not divisible: {', '.join(bad)}"
        )


def parameter_split(model: nn.Module, plan: dict[str, str] | None = None) -> tuple[int, int]:
    """(sharded, replicated) parameter counts of `model` under the TP plan (tied weights counted once).

    Works on a meta-device model, so it costs no memory for any preset.
    """
    plan = tp_plan_for(model) if plan is None else plan
    sharded = replicated = 0
    for name, p in model.named_parameters():
        if is_sharded(name, plan):
            sharded += p.numel()
        else:
            replicated += p.numel()
    return sharded, replicated


def _parallel_style(style: str):
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if style == "colwise":
        return ColwiseParallel()
    if style == "rowwise":
        return RowwiseParallel()
    if style == "colwise_gather_output":
        return ColwiseParallel(output_layouts=Replicate())
    raise ValueError(f"unknown TP style {style!r}; choose one of {STYLES}")


def apply_tp(model: nn.Module, tp_mesh, plan: dict[str, str] | None = None, ep_size: int = 1) -> nn.Module:
    """Shard `model` in place over the 1-D device mesh `tp_mesh` with PyTorch DTensor.

    Sharded weights become DTensors; module outputs stay plain tensors (`use_local_output`), so the
    attention code, which reshapes to `(-1, head_dim)`, sees heads/t local heads without changes. Every rank
    must feed the same batch (TP ranks share one data-parallel replica). `ep_size`: the run's expert parallel
    size (`check_tp_divisibility`).
    """
    from torch.distributed.tensor.parallel import parallelize_module

    check_tp_divisibility(model.config, tp_mesh.size(), ep_size)
    plan = tp_plan_for(model) if plan is None else plan
    parallelize_module(model, tp_mesh, {key: _parallel_style(style) for key, style in plan.items()})
    logger.info("applied TP=%d to %d plan entries", tp_mesh.size(), len(plan))
    return model


def deepspeed_partition_config(plan: dict[str, str]) -> dict[str, Any]:
    """DeepSpeed AutoTP `tensor_parallel.partition_config` equivalent of a TP plan (only these layers split).

    DeepSpeed matches regexes against parameter names; a `*` of the plan stands for one path component.
    """
    specs = []
    for pattern, style in plan.items():
        if style not in STYLES:
            raise ValueError(f"unknown TP style {style!r} for {pattern!r}; choose one of {STYLES}")
        regex = r"\.".join("[^.]+" if part == "*" else re.escape(part) for part in pattern.split("."))
        spec: dict[str, Any] = {
            "patterns": [f"^{regex}\\.weight$"],
            "partition_type": "row" if style == "rowwise" else "column",
        }
        if style == "colwise_gather_output":
            spec["gather_output"] = True
        specs.append(spec)
    return {"use_default_specs": False, "layer_specs": specs}


def local_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Shape of each parameter as held on this rank: the local shard of a DTensor, else the tensor itself."""
    from torch.distributed.tensor import DTensor

    return {
        name: tuple((p.to_local() if isinstance(p, DTensor) else p).shape)
        for name, p in model.named_parameters()
    }


__all__ = [
    "BASE_TP_PLAN",
    "ERNIE_ZOO_TP_PLAN",
    "STYLES",
    "apply_tp",
    "check_tp_divisibility",
    "deepspeed_partition_config",
    "is_sharded",
    "local_shapes",
    "lora_tp_plan",
    "parameter_split",
    "planned_modules",
    "style_of",
    "tp_plan_for",
]

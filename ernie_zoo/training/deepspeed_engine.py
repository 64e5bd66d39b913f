"""The DeepSpeed backend: one engine, ZeRO (stage 0-3) + AutoTP over the launched ranks, and the ZeRO-3 model
builders.

`DeepSpeedEngine` implements the engine contract (`training.engine`) for fine-tuning (a model whose forward
returns its loss) and pretraining (given pretraining's objective, `objective.PretrainObjective`, and the recipe's
DeepSpeed config and optimizer: `backends.engine_for_recipe`). DeepSpeed's ZeRO-3 bookkeeping (parameter-prefetch
trace, backward prologue, accumulation boundary) hangs off the forward of the module it wraps, so an objective
runs as that root module:

    DeepSpeed engine ── PretrainObjective.forward(**batch) ── pretrain_loss(mlm, batch)
                              └── .mlm = ErnieZooForMaskedLM (AutoTP-sharded, ZeRO-partitioned)

What `parallel/` owns and this module uses from outside: the DeepSpeed config (`parallel.deepspeed_backend`: the
json's ZeRO and communication settings with the run's micro batch, accumulation, precision and clipping
written over them), the process-group start, and the TP plan (`parallel.tp_plan`) given to AutoTP as
`partition_config` layer specs, so DTensor TP and DeepSpeed TP split exactly the same weights. TP ranks of one
data-parallel replica must see the same batch: use `dp_rank` / `dp_world_size` (not the global rank) to shard
the data.

Checkpoints are pickle-free, at every ZeRO stage: every rank writes its fp32 master weights + Adam moments (under
ZeRO 1-3 its partition of them) as `zero/rank<NNNNN>.safetensors` + `.json` (`ZeroPartitionIO`, with the
partition layout); a pretraining checkpoint
adds the consolidated 16-bit model as `model.safetensors` + `config.json` (rank 0; `from_pretrained` loads it).
Resuming needs the same DP x TP layout; `ernie-zoo consolidate` (`ernie_zoo.parallel.consolidate`) rebuilds the
fp32 model from the shards alone, in one process.

Under ZeRO-3 the `ernie-pretrain` loop builds the model with `model_factory` -> `build_model_zero3`
(partitioned at construction); `ernie-finetune` builds its models inside `zero3_building` (`from_pretrained`
and `new_model` born partitioned) by the same machinery. The sparse last layer (`sparse_last_layer`) works on
TP-sharded heads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ernie_zoo.parallel.deepspeed_backend import (
    WRAPPER_PREFIX,
    ZERO_DIR,
    build_config,
    init_deepspeed_distributed,
    recipe_config,
    recipe_zero_stage,
)

from .engine import PlainEngine, check_trainable_state, trainable_parameters

logger = logging.getLogger(__name__)


def model_factory(model_config: Any, recipe: Any, tokenizer: Any) -> nn.Module:
    """`MODEL_BUILDERS["deepspeed"]` of `ernie_zoo.training.backends`: under ZeRO-3 the model is built already
    partitioned (`build_model_zero3`: at 100B no rank could hold the fp32 model); stages 0-2 keep full
    parameters on every rank anyway, so it is built whole (`build.build_pretraining_model`)."""
    from ernie_zoo.models.decoder import DECODER_CLASSES, is_decoder_config

    from .build import build_pretraining_model

    if recipe.model.init_from is not None:
        raise ValueError(
            "recipe key 'model.init_from' is supported by the single and pipeline backends, not 'deepspeed'; "
            "consolidate and resume instead"
        )
    if recipe_zero_stage(recipe) != 3:
        return build_pretraining_model(model_config, tokenizer, recipe.seed)
    if is_decoder_config(model_config):  # an ERNIE 4.5 decoder (causal-LM pretraining)
        return build_model_zero3(model_config, recipe, cls=DECODER_CLASSES[type(model_config)])
    return build_model_zero3(model_config, recipe, tokenizer)


def build_model_zero3(
    model_config: Any,
    recipe: Any,
    tokenizer: Any = None,
    *,
    config: str | os.PathLike | dict[str, Any] | None = None,
    tp_size: int | None = None,
    cls: type[nn.Module] | None = None,
) -> nn.Module:
    """An `ErnieZooForMaskedLM` (or `cls`: an ERNIE 4.5 decoder class) built already partitioned (`new_model` under transformers' ZeRO-3 integration):
    no rank ever holds the full model, which is how a 100B model is created.

    Seeded by `recipe.seed`, its weights are those of `training.build.build_model` in one process (in fp32 bit
    for bit: each weight drawn from the seed and its name, `models.seeded_init`).
    `config` / `tp_size` default to the recipe's `distributed` section, as in `backends.engine_for_recipe`.
    """
    from ernie_zoo.models import ErnieZooForMaskedLM

    dist_args = getattr(recipe, "distributed", None)
    tp_size = tp_size if tp_size is not None else getattr(dist_args, "tp_size", None)
    init_deepspeed_distributed()
    ds_config = build_config(
        recipe,
        config if config is not None else recipe_config(recipe),
        tp_size=tp_size,
        zero_stage=getattr(dist_args, "zero_stage", None),
    )
    hf_ds_config = zero3_transformers_config(ds_config)
    model = new_model(cls or ErnieZooForMaskedLM, model_config, seed=recipe.seed)
    model._ernie_zoo_hf_ds_config = hf_ds_config  # transformers reads it through a weak reference: keep it
    if tokenizer is not None and hasattr(model, "load_char_tables"):
        model.load_char_tables(tokenizer)  # buffers are not partitioned
    return model


def zero3_transformers_config(ds_config: dict[str, Any]) -> Any:
    """Switch transformers' ZeRO-3 integration on for `ds_config` (a ZeRO stage-3 DeepSpeed config) and return
    its `HfDeepSpeedConfig`: while that object lives (transformers holds a weak reference only), `from_pretrained`
    builds models already partitioned and loads each checkpoint tensor into its partition (rank 0 reads the
    file), `new_model` constructs them partitioned, and peft gathers the weights it reads."""
    from transformers.integrations import HfDeepSpeedConfig

    if ds_config["zero_optimization"].get("stage") != 3:
        raise ValueError("building a partitioned model needs zero_optimization.stage = 3")
    return HfDeepSpeedConfig(ds_config)


@contextlib.contextmanager
def zero3_building(ds_config: dict[str, Any]) -> Iterator[Any]:
    """`zero3_transformers_config` for the duration of the block only: models built inside are partitioned,
    models built after it (e.g. one process scoring on rank 0) are whole again."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    hf_ds_config = zero3_transformers_config(ds_config)
    try:
        yield hf_ds_config
    finally:
        unset_hf_deepspeed_config()


def new_model(cls: type[nn.Module], config: Any, seed: int | None = None, **kwargs: Any) -> nn.Module:
    """`cls(config, **kwargs)`; while transformers' ZeRO-3 integration is on (`zero3_building`), born
    partitioned: constructed under DeepSpeed `zero.Init` (each module's parameters are partitioned as soon as
    its `__init__` returns, after rank 0's values are broadcast), and the weights initialised through
    transformers' `initialize_weights_zero3` (one module's parameters gathered at a time, rank 0 initialises
    them).

    `seed` given (ZeRO-3 builds only; one process: `training.build.build_pretraining_model`): every weight is
    drawn from the seed and its name (`models.seeded_init`), the weights of that one-process build. Without it the
    global random stream is used: rank 0 draws the same random numbers in the same order as `cls(config)` in one
    process, so the weights are the same; the other ranks' random state is left behind (re-seed before drawing
    again)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    from ernie_zoo.models.seeded_init import seeded_draws

    if not is_deepspeed_zero3_enabled():
        if seed is not None:
            raise ValueError("new_model(seed=...) builds under ZeRO-3 only (zero3_building)")
        return cls(config, **kwargs)
    import deepspeed
    from transformers.integrations.deepspeed import (
        deepspeed_config,
        initialize_weights_zero3,
        prevent_arange_dtype_change,
    )
    from transformers.modeling_utils import PreTrainedModel

    initialize_weights = PreTrainedModel.initialize_weights
    # seeded: initialise once, below, when every weight has its name
    PreTrainedModel.initialize_weights = initialize_weights_zero3 if seed is None else (lambda self: None)
    try:
        with prevent_arange_dtype_change(), deepspeed.zero.Init(config_dict_or_path=deepspeed_config()):
            model = cls(config, **kwargs)
    finally:
        PreTrainedModel.initialize_weights = initialize_weights
    if seed is not None:
        with seeded_draws(model, seed):
            initialize_weights_zero3(model)
    return model


def is_partitioned(model: nn.Module) -> bool:
    """Whether `model` holds ZeRO-3 partitioned parameters (built by `new_model` or `from_pretrained` under
    `zero3_building`, or wrapped by a ZeRO-3 engine)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def save_partitioned_weights(model: nn.Module, path: str | os.PathLike | None) -> None:
    """Write the whole weights of a ZeRO-3 partitioned `model` (parameters and persistent buffers, tied ones
    once) to the safetensors file `path`, as `save_pretrained` would, without any rank holding the whole model:
    the header is written from the partitions' shapes, then each parameter is gathered in turn and rank 0
    appends its bytes. Every rank must call it; ranks other than 0 pass `path` None."""
    import json

    import deepspeed
    import torch.distributed as dist

    from ernie_zoo.utils import tied_names

    tied = tied_names(model)
    tensors = [(n, t) for n, t in model.state_dict(keep_vars=True).items() if n not in tied]
    writing = dist.get_rank() == 0
    if writing == (path is None):
        raise ValueError("rank 0, and only rank 0, passes the path to write")
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in tensors:
        shape = [int(d) for d in getattr(t, "ds_shape", t.shape)]
        size = t.element_size() * int(getattr(t, "ds_numel", t.numel()))
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[t.dtype],
            "shape": shape,
            "data_offsets": [offset, offset + size],
        }
        offset += size
    with contextlib.ExitStack() as stack:
        if writing:
            out = stack.enter_context(open(path, "wb"))
            raw = json.dumps(header, separators=(",", ":")).encode()
            raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
            out.write(len(raw).to_bytes(8, "little") + raw)
        for _, t in tensors:
            with deepspeed.zero.GatheredParameters([t], enabled=hasattr(t, "ds_id")):
                if writing:
                    out.write(memoryview(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()))


_SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class ZeroPartitionIO:
    """Pickle-free save / load of one rank's optimizer state, any ZeRO stage: its fp32 master weights and Adam
    moments as `zero/rank<NNNNN>.safetensors` + `.json` (with the partition layout `consolidate` reads), for an
    engine with `optimizer` (what `deepspeed.initialize` returned), `model`, `rank`, `world_size`, `tp_size`,
    `zero_stage`. Resuming needs the same ranks, TP size and ZeRO stage.

    What `fp32_flat.<i>` of a rank holds, by what DeepSpeed made of the optimizer:

        ZeRO-3            per parameter of group i, partition r of ceil(numel / count)   layout "zero3" (no kind)
                          elements, back to back
        ZeRO-1/2          partition r of group i's flat buffer: the parameters back to   layout kind "flat"
                          back at their offsets, split into `count` equal pieces
        stage 0, bf16/    the whole flat buffer of group i (one partition; BF16 at       layout kind "flat"
          fp16 wrappers   stage 1 partitions it like ZeRO-1; the unfused wrapper's
                          per-weight fp32 copies written back to back)
        stage 0, fp32     no wrapper: the model's own parameters, flattened per group     layout kind "flat"
                          (every rank the same)

    The Adam moments are the base optimizer's state, shaped as its parameters (the flat partitions, or under
    stage 0 fp32 the model's parameters).
    """

    def save_zero_partition(self, directory: str | os.PathLike) -> None:
        from safetensors.torch import save_file

        from ernie_zoo.training.checkpoint import write_json

        (Path(directory) / ZERO_DIR).mkdir(parents=True, exist_ok=True)
        tensors, meta = self._zero3_state() if self.zero_stage == 3 else self._flat_state()
        stem = Path(directory) / ZERO_DIR / f"rank{self.rank:05d}"
        save_file(tensors, str(stem.with_suffix(".safetensors")))
        write_json(stem.with_suffix(".json"), meta)

    def load_zero_partition(self, directory: str | os.PathLike) -> None:
        from safetensors.torch import load_file

        from ernie_zoo.training.checkpoint import read_json

        stem = Path(directory) / ZERO_DIR / f"rank{self.rank:05d}"
        if not stem.with_suffix(".json").is_file():
            raise FileNotFoundError(
                f"{stem}.json not found: was the checkpoint written with {self.world_size} ranks?"
            )
        meta = read_json(stem.with_suffix(".json"))
        layout = {"world_size": self.world_size, "tp_size": self.tp_size, "zero_stage": self.zero_stage}
        saved = {k: meta.get(k) for k in layout}
        if saved != layout:
            raise ValueError(
                f"checkpoint layout {saved} differs from this run's {layout}; resume with the same ranks, TP size "
                "and ZeRO stage (or load the consolidated model.safetensors as new weights)"
            )
        tensors = load_file(str(stem.with_suffix(".safetensors")))
        if self.zero_stage == 3:
            self._load_zero3_state(tensors, meta)
        else:
            self._load_flat_state(tensors, meta)

    # ---- ZeRO-3: DeepSpeed's partitioned optimizer state dict
    def _zero3_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """This rank's ZeRO-3 optimizer partition as (tensors, JSON metadata)."""
        sd = self.optimizer.state_dict()
        tensors: dict[str, torch.Tensor] = {}
        for i, flat in enumerate(sd["fp32_flat_groups"]):
            tensors[f"fp32_flat.{i}"] = flat.detach().contiguous().cpu()
        moments, groups, scalars = _optimizer_arrays(sd["optimizer_state_dict"])
        meta = {
            "world_size": self.world_size,
            "tp_size": self.tp_size,
            "zero_stage": self.zero_stage,
            "partition_count": [int(c) for c in sd["partition_count"]]
            if isinstance(sd["partition_count"], list)
            else int(sd["partition_count"]),
            "n_flat_groups": len(sd["fp32_flat_groups"]),
            "param_groups": groups,
            "scalars": scalars,
            "layout": self._partition_layout(),
        }
        return tensors | moments, meta

    def _partition_layout(self) -> dict[str, Any]:
        """What `fp32_flat.<i>` of this rank holds under ZeRO-3, for `ernie_zoo.parallel.consolidate` (no ranks
        needed to read a checkpoint back): per flat group, the ZeRO partition rank and count, and per parameter in
        flat order [name, shape on this TP rank (ds_shape), numel, elements in this partition]; plus this rank's
        TP index (the order AutoTP split the weights in).

        ZeRO-3 stores parameter j of a group as partition `partition_rank` of ceil(numel / count) elements
        (the last one zero-padded); the flat group is those partitions back to back.
        """
        import torch.distributed as dist

        opt = self.optimizer
        names = {id(p): name for name, p in self.model.named_parameters()}
        groups = []
        for params, group in zip(opt.fp16_groups, opt.sub_group_process_groups):
            groups.append(
                {
                    "partition_rank": dist.get_rank(group=group),
                    "partition_count": dist.get_world_size(group=group),
                    "params": [
                        [
                            names[id(p)],
                            [int(d) for d in p.ds_shape],
                            int(p.ds_numel),
                            int(p.partition_numel()),
                        ]
                        for p in params
                    ],
                }
            )
        return {"format": 1, "tp_rank": self._tp_rank(), "groups": groups}

    def _tp_rank(self) -> int:
        """AutoTP layers record their index in the TP group (their shard's position); 0 without TP."""
        return next((int(m.tp_index) for m in self.model.modules() if hasattr(m, "tp_index")), 0)

    def _load_zero3_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        current = self.optimizer.state_dict()
        flats = [tensors[f"fp32_flat.{i}"] for i in range(meta["n_flat_groups"])]
        if len(flats) != len(current["fp32_flat_groups"]) or any(
            a.shape != b.shape for a, b in zip(flats, current["fp32_flat_groups"])
        ):
            raise ValueError("ZeRO partition shapes differ from the checkpoint's: was the model changed?")
        sd = dict(current)
        sd["optimizer_state_dict"] = _optimizer_from_arrays(tensors, meta)
        sd["fp32_flat_groups"] = flats
        self.optimizer._rigid_load_state_dict(sd, load_optimizer_states=True)

    # ---- stages 0-2: flat fp32 buffers per param group
    def _flat_groups(self) -> tuple[list[_FlatGroup], torch.optim.Optimizer, Any]:
        """(this rank's flat groups, the torch optimizer stepping them, the function that writes the fp32 masters
        into the model's parameters) for the optimizer DeepSpeed built at stages 0-2."""
        import torch.distributed as dist
        from torch._utils import _unflatten_dense_tensors

        opt = self.optimizer

        # offsets of parameters laid back to back, as DeepSpeed's _flatten_dense_tensors lays them
        def packed(params: list[torch.Tensor]) -> list[int]:
            return [sum(p.numel() for p in params[:j]) for j in range(len(params))]

        if hasattr(opt, "single_partition_of_fp32_groups"):  # ZeRO-1/2: DeepSpeedZeroOptimizer
            groups = [
                _FlatGroup(
                    list(params),
                    [int(o) for o in offsets],
                    master,
                    dist.get_rank(group=pg),
                    dist.get_world_size(group=pg),
                )
                for params, offsets, master, pg in zip(
                    opt.round_robin_bit16_groups,
                    opt.round_robin_bit16_offsets,
                    opt.single_partition_of_fp32_groups,
                    opt.real_dp_process_group,
                )
            ]
            return groups, opt.optimizer, opt.update_lp_params
        if hasattr(opt, "fp32_groups_flat_partition"):  # bf16 at stage 0-1: BF16_Optimizer
            groups = [
                _FlatGroup(
                    list(params),
                    packed(params),
                    master,
                    dist.get_rank(group=pg),
                    dist.get_world_size(group=pg),
                )
                for params, master, pg in zip(
                    opt.bf16_groups, opt.fp32_groups_flat_partition, opt.real_dp_process_group
                )
            ]
            return groups, opt.optimizer, opt.update_lp_params
        if hasattr(opt, "fp32_groups_flat"):  # 16-bit at stage 0: FP16_Optimizer, every rank the whole buffer

            def refresh() -> None:
                for params, flat in zip(opt.fp16_groups, opt.fp32_groups_flat):
                    for p, q in zip(params, _unflatten_dense_tensors(flat, params)):
                        p.data.copy_(q.data)

            groups = [
                _FlatGroup(list(params), packed(params), master, 0, 1)
                for params, master in zip(opt.fp16_groups, opt.fp32_groups_flat)
            ]
            return groups, opt.optimizer, refresh
        # 16-bit at stage 0 with an optimizer DeepSpeed does not fuse: FP16_UnfusedOptimizer, an fp32 copy per weight
        if hasattr(opt, "fp32_groups") and hasattr(opt, "fp16_groups"):

            def refresh_each() -> None:
                for masters, params in zip(opt.fp32_groups, opt.fp16_groups):
                    for master, p in zip(masters, params):
                        p.data.copy_(master.data)

            groups = [
                _FlatGroup(list(params), packed(params), list(masters), 0, 1)
                for params, masters in zip(opt.fp16_groups, opt.fp32_groups)
            ]
            return groups, opt.optimizer, refresh_each
        if isinstance(opt, torch.optim.Optimizer):  # stage 0, fp32: the parameters are the masters
            groups = [
                _FlatGroup(list(g["params"]), packed(g["params"]), None, 0, 1) for g in opt.param_groups
            ]
            return groups, opt, lambda: None
        raise NotImplementedError(f"checkpoints of DeepSpeed's {type(opt).__name__} are not implemented")

    def _flat_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """This rank's masters and moments at stages 0-2 as (tensors, JSON metadata); the layout (kind "flat")
        names every parameter's offset in its group's flat buffer."""
        groups, base, _ = self._flat_groups()
        names = {id(p): name for name, p in self.model.named_parameters()}
        tensors = {f"fp32_flat.{i}": g.flat().detach().contiguous().cpu() for i, g in enumerate(groups)}
        moments, param_groups, scalars = _optimizer_arrays(base.state_dict())
        scaler = getattr(self.optimizer, "loss_scaler", None)  # fp16's dynamic loss scale travels too
        scalars_of_scaler = getattr(scaler, "__dict__", {})
        meta = {
            "world_size": self.world_size,
            "tp_size": self.tp_size,
            "zero_stage": self.zero_stage,
            "n_flat_groups": len(groups),
            "param_groups": param_groups,
            "scalars": scalars,
            "loss_scaler": {k: v for k, v in scalars_of_scaler.items() if type(v) in (int, float, bool)},
            "layout": {
                "format": 1,
                "kind": "flat",
                "tp_rank": self._tp_rank(),
                "groups": [
                    {
                        "partition_rank": g.rank,
                        "partition_count": g.count,
                        "partition_numel": int(tensors[f"fp32_flat.{i}"].numel()),
                        "params": [
                            [names[id(p)], [int(d) for d in p.shape], p.numel(), offset]
                            for p, offset in zip(g.params, g.offsets)
                        ],
                    }
                    for i, g in enumerate(groups)
                ],
            },
        }
        return tensors | moments, meta

    def _load_flat_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        groups, base, refresh = self._flat_groups()
        flats = [tensors.get(f"fp32_flat.{i}") for i in range(int(meta.get("n_flat_groups", -1)))]
        if len(flats) != len(groups) or any(
            f is None or f.shape != g.flat().shape for f, g in zip(flats, groups)
        ):
            raise ValueError(
                "the optimizer's flat buffers differ from the checkpoint's: was the model changed?"
            )
        with torch.no_grad():
            for flat, g in zip(flats, groups):
                g.load(flat)
        base.load_state_dict(_optimizer_from_arrays(tensors, meta))
        scaler = getattr(self.optimizer, "loss_scaler", None)
        for key, value in (meta.get("loss_scaler") or {}).items():
            setattr(scaler, key, value)
        refresh()


class _FlatGroup:
    """One param group of the optimizer at stages 0-2: its parameters in flat order with their offsets, and this
    rank's piece `rank` of `count` of the fp32 flat buffer `master` (a list: one fp32 copy per parameter,
    written as one buffer; None: the parameters are the masters)."""

    def __init__(self, params: list[torch.Tensor], offsets: list[int],
                 master: torch.Tensor | list[torch.Tensor] | None, rank: int, count: int):  # fmt: skip
        self.params, self.offsets, self.master, self.rank, self.count = params, offsets, master, rank, count

    def flat(self) -> torch.Tensor:
        if isinstance(self.master, torch.Tensor):
            return self.master
        return torch.cat([t.detach().reshape(-1) for t in self.master or self.params])

    def load(self, flat: torch.Tensor) -> None:
        if isinstance(self.master, torch.Tensor):
            self.master.data.copy_(flat)
            return
        for t, offset in zip(self.master or self.params, self.offsets):
            t.data.copy_(flat[offset : offset + t.numel()].view_as(t))


def _optimizer_arrays(
    inner: dict[str, Any],
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """A torch optimizer's `state_dict()` as (`state.<index>.<key>` tensors, JSON param groups, JSON scalars)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in inner["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(index), {})[key] = value
    groups = [
        {k: v for k, v in g.items() if k != "params"} | {"params": list(g["params"])}
        for g in inner["param_groups"]
    ]
    for g in groups:
        if isinstance(g.get("betas"), tuple):
            g["betas"] = list(g["betas"])
    return tensors, groups, scalars


def _optimizer_from_arrays(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `_optimizer_arrays`: a state dict for `load_state_dict`."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, index, field = key.split(".", 2)
            state.setdefault(int(index), {})[field] = value
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    return {"state": state, "param_groups": groups}


class DeepSpeedEngine(ZeroPartitionIO, PlainEngine):
    """The model under DeepSpeed ZeRO (see the module docstring), on the ranks a launcher (torchrun, deepspeed)
    started. `config` is the run's DeepSpeed config (`parallel.deepspeed_backend.make_config`'s; fine-tuning's
    from `backends.task_deepspeed_config`: its micro batch is the rows one data-parallel rank reads, its
    clipping the run's). With `tensor_parallel.autotp_size` > 1, AutoTP splits the Linear layers of the TP plan
    (`parallel.tp_plan`; through peft's LoRA wrappers: `lora_tp_plan`) over groups of that many ranks, which read
    the same rows. `objective`: a root module holding `model` as `.mlm` whose forward is the loss (pretraining's
    `objective.PretrainObjective`); DeepSpeed wraps it instead of the model. `fixed_accumulation`: every optimizer
    step has exactly the config's gradient_accumulation_steps micro batches (pretraining), which DeepSpeed counts
    itself (`backward`'s boundary is not needed); otherwise the caller's boundary is DeepSpeed's (a fine-tuning
    epoch's last step may be short).

    The process group must already be up (`parallel.deepspeed_backend.init_deepspeed_distributed`). Every rank
    builds the same model (same seed): under ZeRO-3 already partitioned (`zero3_building`, `build_model_zero3`),
    otherwise whole, and the engine partitions what is not (new adapters, heads).
    """

    backend = "deepspeed"

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        config: dict[str, Any],
        *,
        objective: nn.Module | None = None,
        fixed_accumulation: bool = False,
    ):
        import deepspeed
        import torch.distributed as dist
        from deepspeed.utils import groups

        from ernie_zoo.parallel.deepspeed_backend import autotp_looks_inside
        from ernie_zoo.parallel.tp_plan import (
            check_tp_divisibility,
            deepspeed_partition_config,
            lora_tp_plan,
            planned_modules,
        )

        self.tp_size = int((config.get("tensor_parallel") or {}).get("autotp_size") or 1)
        check_tp_divisibility(model.config, self.tp_size)  # before any rank waits for the others
        rank, world, local_rank = init_deepspeed_distributed()
        self.device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        wrappers: list[nn.Module] = []
        if self.tp_size > 1:
            if world % self.tp_size:
                raise ValueError(f"distributed.tp_size {self.tp_size} does not divide the {world} ranks")
            # the TP plan, through LoRA's wrappers to their base layers and factors
            plan = lora_tp_plan(model)
            wrapped = {k.removesuffix(".base_layer"): v for k, v in plan.items() if k.endswith(".base_layer")}
            wrappers = [m for _, m, _ in planned_modules(model, wrapped)]
            if objective is not None:  # keys as paths in the module DeepSpeed wraps
                plan = {WRAPPER_PREFIX + key: style for key, style in plan.items()}
            section = {**config["tensor_parallel"], "partition_config": deepspeed_partition_config(plan)}
            config = {**config, "tensor_parallel": section}
        self.ds_config = config
        with autotp_looks_inside(wrappers):
            self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model if objective is None else objective,
                optimizer=optimizer,
                lr_scheduler=scheduler,
                config=config,
            )
        self.model = self.ds.module if objective is None else self.ds.module.mlm
        self.objective = objective
        self.fixed_accumulation = fixed_accumulation
        self._grad_accum = int(config["gradient_accumulation_steps"])
        self._micro = 0
        self._norm: float | None = None  # stage 0 fp32: the gradient norm DeepSpeed does not keep
        self._forward_pending = False
        self.max_grad_norm = float(config["gradient_clipping"])
        self.zero_stage = int(config["zero_optimization"].get("stage", 0))
        self.rank, self.world_size = rank, world
        self.dp_rank = groups._get_data_parallel_rank()
        self.dp_world_size = groups._get_data_parallel_world_size()
        self.is_main = dist.get_rank() == 0
        zero = config["zero_optimization"]
        self.offload = {
            key: (zero.get(key) or {}).get("device", "none") for key in ("offload_optimizer", "offload_param")
        }
        logger.info(
            "DeepSpeed ZeRO-%d, TP %d x DP %d, %s, micro batch %d x %d accumulation per rank, offload %s",
            self.zero_stage,
            self.tp_size,
            self.dp_world_size,
            next((p for p in ("bf16", "fp16") if (config.get(p) or {}).get("enabled")), "fp32"),
            config["train_micro_batch_size_per_gpu"],
            config["gradient_accumulation_steps"],
            self.offload,
        )

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rows [r * n / W, (r + 1) * n / W) of every tensor (`torch.tensor_split`: the first ranks take one
        more row when W does not divide n). Every rank needs at least one row."""
        n = next(iter(batch.values())).shape[0]
        if n < self.dp_world_size:
            raise ValueError(f"a batch of {n} examples cannot feed {self.dp_world_size} data-parallel ranks")
        return {k: v.tensor_split(self.dp_world_size)[self.dp_rank] for k, v in batch.items()}

    def autocast(self) -> contextlib.AbstractContextManager:
        """Nothing to do: DeepSpeed keeps bf16/fp16 parameters itself (the loss is computed in fp32)."""
        return contextlib.nullcontext()

    def forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The objective's (else the model's) output through DeepSpeed's forward."""
        out = self.ds(**inputs)
        self._forward_pending = self.ds.module.training and torch.is_grad_enabled()
        return out

    def backward(self, loss: torch.Tensor, boundary: bool | None = None) -> None:
        """DeepSpeed reduces the gradients and, at the accumulation boundary, steps the optimizer and the LR
        schedule inside ds.step(). The caller owns the boundary (an epoch's last step may have fewer micro
        batches); None, or under `fixed_accumulation`: DeepSpeed's own count of the config's accumulation steps
        (the loop's boundary falls on the same micro batch). The loss must come through `forward`."""
        if not self._forward_pending:
            raise RuntimeError(
                "DeepSpeedEngine.backward needs a loss from engine.forward(batch): a forward that bypasses the "
                "DeepSpeed engine skips ZeRO's gradient bookkeeping"
            )
        self._forward_pending = False
        if self.fixed_accumulation:
            if self._micro >= self._grad_accum:
                raise RuntimeError(
                    f"more than grad_accum_steps={self._grad_accum} backward calls before step()"
                )
            self._micro += 1
        elif boundary is not None:
            self.ds.set_gradient_accumulation_boundary(boundary)
        self.ds.backward(loss, scale_wrt_gas=False)
        if self.ds.is_gradient_accumulation_boundary() and isinstance(self.optimizer, torch.optim.Optimizer):
            self._norm = self._plain_grad_norm()
        self.ds.step()

    def _plain_grad_norm(self) -> float | None:
        """ZeRO stage 0 in fp32 steps torch's optimizer itself: DeepSpeed clips the (all-reduced) gradients but
        keeps no record of their norm. The same norm, before clipping; None under TP (a TP shard's gradients
        alone do not make it)."""
        grads = [p.grad for p in self.ds.module.parameters() if p.grad is not None]
        if self.tp_size > 1 or not grads:
            return None
        return float(
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        )

    def step(self) -> float:
        """Close the optimizer step (the update ran in the last `backward`); the pre-clip grad norm."""
        if self.fixed_accumulation:
            if self._micro != self._grad_accum:
                raise RuntimeError(
                    f"step() after {self._micro} backward calls; the recipe accumulates {self._grad_accum}"
                )
            self._micro = 0
        norm = self.ds.get_global_grad_norm()
        if norm is None:
            norm, self._norm = self._norm, None
        return float(norm) if norm is not None else float("nan")

    def zero_grad(self) -> None:
        """Nothing: DeepSpeed zeroes (and frees) the gradients inside its step."""

    def barrier(self) -> None:
        """Wait for every rank (checkpoint writers synchronise on it)."""
        import torch.distributed as dist

        dist.barrier()

    def dp_sum(self, values: list[float]) -> list[float]:
        """`values` summed over the data-parallel ranks (one all-reduce, float64). TP ranks of a replica
        hold the same values, so the sum runs over the data-parallel group only. Every rank must call it."""
        import torch.distributed as dist
        from deepspeed.utils import groups

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        if self.dp_world_size > 1:
            dist.all_reduce(t, group=groups._get_data_parallel_group())
        return t.tolist()

    def agree(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=0)
        return float(t.item())

    @contextlib.contextmanager
    def _whole(self, name: str, p: torch.Tensor, modifier_rank: int | None = None):
        """Parameter `name` (`p`) whole inside the block on every rank: its ZeRO-3 partitions gathered, then its
        AutoTP shards (DeepSpeed's `GatherReplacedLayerParams`, which splits it again on exit, keeping what
        every TP rank wrote into it alike). With `modifier_rank`, that data-parallel rank's values win."""
        import deepspeed
        from deepspeed.module_inject.layers import GatherReplacedLayerParams

        owner = self.model.get_submodule(name.rpartition(".")[0])
        with deepspeed.zero.GatheredParameters(
            [p], modifier_rank=modifier_rank, enabled=self.zero_stage == 3
        ):
            with GatherReplacedLayerParams([p], owner, enabled=self.tp_size > 1):
                yield

    def trainable_state(self) -> dict[str, torch.Tensor] | None:
        """The whole trainable parameters as CPU copies on rank 0 (None on the others), gathered (over ZeRO-3
        and TP) one parameter at a time, so no rank ever holds more than one whole parameter beyond its shard.
        Every rank must call it."""
        state = {}
        for name, p in trainable_parameters(self.model):
            with self._whole(name, p):
                if self.is_main:
                    state[name] = p.detach().to("cpu", copy=True).contiguous()
        return state if self.is_main else None

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Every rank passes the same `state` (read from the shared checkpoint) and copies it whole; ZeRO-3 keeps
        data-parallel rank 0's, AutoTP each rank's shard of it."""
        params = check_trainable_state(self.model, state)
        for name, value in state.items():
            p = params[name]
            with self._whole(name, p, modifier_rank=0), torch.no_grad():
                p.copy_(value.to(p.device))

    def layout(self) -> dict[str, Any]:
        tp = {"tp_size": self.tp_size} if self.tp_size > 1 else {}
        return {"backend": self.backend, "world_size": self.world_size, "zero_stage": self.zero_stage, **tp}

    def save_optimizer_state(self, directory: str | os.PathLike) -> None:
        """This rank's fp32 master weights and Adam moments (its partition of them under ZeRO 1-3)."""
        self.save_zero_partition(directory)

    def load_optimizer_state(self, directory: str | os.PathLike) -> None:
        """Restore what `save_optimizer_state` wrote; the model's (16-bit) weights are set from the masters."""
        self.load_zero_partition(directory)

    def tp_shapes(self) -> dict[str, list[int]]:
        """name -> the shape of this rank's TP shard of every parameter (ZeRO-3: before partitioning it): a
        split dimension divided by the TP size, replicated parameters whole."""
        return {
            n: [int(d) for d in getattr(p, "ds_shape", p.shape)] for n, p in self.model.named_parameters()
        }

    def shard_report(self) -> dict[str, list[int]]:
        """name -> [numel of this rank's TP shard (without TP: the whole parameter), numel this rank holds (ZeRO-3:
        its partition of that)] for every parameter."""
        report = {}
        for name, p in self.model.named_parameters():
            if hasattr(p, "ds_numel"):
                report[name] = [int(p.ds_numel), int(p.ds_tensor.numel())]
            else:
                report[name] = [p.numel(), p.numel()]
        return report

    def num_parameters(self) -> int:
        """Parameters of the whole model (tied weights once), whatever ZeRO and TP hold on this rank: counted
        on the meta device from the config."""
        from ernie_zoo.models.presets import count_parameters

        return count_parameters(self.model.config)

    # ---- checkpoints (pickle-free)
    def consolidated_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Full weights (16-bit under bf16/fp16) on rank 0, gathered over ZeRO and TP; None on other ranks.
        Every rank must call it. Keys are the model's own (`ernie...`, `cls...`)."""
        if self.zero_stage == 3:
            state = self.ds._zero3_consolidated_16bit_state_dict()
        elif self.tp_size == 1:  # stages 0-2 hold the whole model on every rank
            state = self.ds.module.state_dict() if self.is_main else None
        else:  # AutoTP shards: one weight gathered at a time
            params = dict(self.model.named_parameters())
            state = {}
            for name, t in self.model.state_dict(keep_vars=True).items():
                whole = self._whole(name, params[name]) if name in params else contextlib.nullcontext()
                with whole:
                    if self.is_main:
                        state[name] = t.detach().to("cpu", copy=True)
            state = state if self.is_main else None
        if state is None:
            return None
        return {k.removeprefix(WRAPPER_PREFIX): v for k, v in state.items()}

    def save(self, directory: str | os.PathLike) -> None:
        """Write this rank's optimizer state (`ZeroPartitionIO`); rank 0 adds the consolidated model and the LR
        schedule.

        Call it on every rank with the same (shared) directory.
        """
        from safetensors.torch import save_file

        from ernie_zoo.parallel.consolidate import MODEL_FILE
        from ernie_zoo.training.checkpoint import save_json_state
        from ernie_zoo.utils import tied_names

        directory = Path(directory)
        self.save_zero_partition(directory)
        state = self.consolidated_state_dict()
        if self.is_main:
            self.model.config.save_pretrained(directory)
            tied = tied_names(self.model)
            weights = {k: v.detach().contiguous().cpu() for k, v in state.items() if k not in tied}
            save_file(weights, str(directory / MODEL_FILE), metadata={"format": "pt"})
            save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        self.barrier()

    def load(self, directory: str | os.PathLike) -> None:
        """Restore what `save` wrote: this rank's fp32 master weights, Adam moments and the LR schedule."""
        from ernie_zoo.training.checkpoint import load_json_state

        directory = Path(directory)
        self.load_zero_partition(directory)
        load_json_state(self.scheduler, directory / "scheduler.json")


__all__ = [
    "DeepSpeedEngine",
    "ZeroPartitionIO",
    "build_model_zero3",
    "is_partitioned",
    "model_factory",
    "new_model",
    "save_partitioned_weights",
    "zero3_building",
    "zero3_transformers_config",
]

"""`ernie-zoo plan`: per-GPU memory, communication and MFU plan for pretraining or fine-tuning a model on a GPU cluster;
for pretraining it searches the layout (TP x PP x DP x ZeRO stage x micro-batch x recompute, pipeline schedule and
interleaved chunks, EP for a MoE model) for the fastest that fits, and says why.

    ernie-zoo plan --recipe recipes/pretrain/ernie-100b.yaml --cluster nodes=64,gpus_per_node=8,gpu=h100-80gb
    ernie-zoo plan --recipe recipes/pretrain/ernie-100b.yaml --cluster nodes=64,gpus_per_node=8 --pp 8
    ernie-zoo plan --preset 100b --cluster nodes=64,gpus_per_node=8,gpu=h100-80gb \\
        --tp 8 --zero 3 --micro-batch 8 --seq-len 2048 --recompute full --global-batch 2048
    ernie-zoo plan --recipe recipes/finetune/scale/lora-10b-zero3.yaml --cluster nodes=1,gpus_per_node=8
    ernie-zoo plan --preset ernie4.5-300b-a47b --cluster nodes=32,gpus_per_node=8,gpu=h100-80gb --tp 8 --ep 8
    ernie-zoo plan --recipe recipes/finetune/scale/lora-10b-zero3.yaml --cluster nodes=1,gpus_per_node=1 \\
        --offload-param cpu --offload-optimizer cpu

A decoder preset (`ernie-zoo info`) plans an ERNIE 4.5 causal LM: a MoE one with its total and active parameters,
the routed experts' memory under expert parallelism (--ep) and the all-to-all traffic of its MoE layers.

Search (the default for a pretraining recipe or a preset): every layout flag given here (--tp, --pp,
--virtual-stages, --schedule, --zero, --micro-batch, --recompute, --ep) pins that dimension and the search covers the rest, at
the global batch of the recipe (its micro-batch x accumulation x its DP) or --global-batch; it prints the chosen
layout, why (pipeline bubble, memory per stage against the GPU's, traffic per step) and the runners-up, then the
chosen layout's full plan. --search false plans the layout exactly as the recipe, the DeepSpeed json and the flags
give it (the default for an ernie-finetune recipe, whose backend has no pipeline).

Settings are taken, later winning: built-in defaults, the recipe (`--recipe`: model, sequence length, micro
batch, accumulation, and its `distributed` keys tp_size / zero_stage / recompute / offload_optimizer /
offload_param / deepspeed_config), the
DeepSpeed config (`--deepspeed`, or the one the recipe names: a relative path is found next to the recipe, in a
directory above it, or in the current directory), then the flags given here. An ernie-finetune
recipe also gives the fraction of parameters its method trains (frozen ones have no gradients or optimizer
state) and its train.batch_size, split over the data-parallel ranks.
Exit status: 0 fits, 1 does not fit, 2 bad input.
Formulas and their sources: `ernie_zoo.parallel.planner`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass
class Args:
    """Plan pretraining or fine-tuning on a GPU cluster: give --recipe or --preset."""

    recipe: Path | None = None
    """ernie-pretrain or ernie-finetune recipe YAML (model, batch, method, distributed section)."""
    preset: str | None = None
    """Model preset name (see `ernie-zoo info`)."""
    cluster: str = "nodes=1,gpus_per_node=8,gpu=h100-80gb"
    """nodes=N,gpus_per_node=8,gpu=h100-80gb (gpus: a100-40gb, a100-80gb, h100-80gb, h200-141gb, h800-80gb; optional
    nvlink_gbyte_s=, nic_gbit_s=, memory_gib=, peak_tflops=, pcie_gbyte_s=)."""
    deepspeed: Path | None = None
    """DeepSpeed json: ZeRO stage, buckets, tensor_parallel.autotp_size."""
    tp: int | None = None
    """Tensor-parallel size (default 1; searched)."""
    pp: int | None = None
    """Pipeline-parallel size: stages of consecutive layers (default 1; searched)."""
    virtual_stages: int | None = None
    """Layer chunks per GPU, Megatron-LM's v: interleaved 1F1B or zero bubble over v chunks (default 1; searched)."""
    schedule: Literal["1f1b", "zero_bubble", "zbv"] | None = None
    """Pipeline schedule: 1f1b (interleaved with --virtual-stages > 1), zero_bubble, zbv (default 1f1b; searched)."""
    ep: int | None = None
    """Expert-parallel size for a MoE model: each GPU holds experts/ep of every MoE layer (default 1)."""
    moe_capacity_factor: float | None = None
    """MoE: each expert takes at most this x its uniform share of the (token, expert) pairs (the recipe's
    distributed.moe_capacity_factor): expert compute, all-to-all traffic and expert activations planned at it,
    1 - it of the pairs dropped below 1 (default: none, no cap)."""
    zero: Literal[0, 1, 2, 3] | None = None
    """ZeRO stage (default 3)."""
    micro_batch: int | Literal["auto"] | None = None
    """Sequences per GPU per micro-batch, or auto for the largest that fits."""
    seq_len: int | None = None
    """Sequence length (default 2048)."""
    global_batch: int | None = None
    """Sequences per optimizer step (default micro-batch x DP)."""
    recompute: Literal["none", "selective", "full"] | None = None
    """Activation recompute (default full)."""
    sequence_parallel: bool | None = None
    """Shard LayerNorm/dropout over TP."""
    flash_attention: bool | None = None
    """Attention stores no s^2 scores."""
    efficiency: float | None = None
    """Achieved fraction of peak bf16 FLOPS (default 0.5)."""
    comm_efficiency: float | None = None
    """Achieved fraction of link bandwidth (default 0.7)."""
    reserve_gib: float | None = None
    """Per-GPU runtime reserve in GiB (default 2)."""
    offload_optimizer: Literal["none", "cpu", "nvme"] | None = None
    """ZeRO-Offload: optimizer states and gradients in host memory (cpu) or on NVMe (default none)."""
    offload_param: Literal["none", "cpu", "nvme"] | None = None
    """ZeRO-Infinity: the ZeRO-3 parameter partition in host memory (cpu) or on NVMe (default none)."""
    nvme_gbyte_s: float | None = None
    """NVMe bandwidth per GPU in GB/s for nvme offload (default 3)."""
    host_adam_params_per_s: float | None = None
    """Parameters DeepSpeed's CPU Adam updates per second per GPU under optimizer offload (default 1e9)."""
    head_fraction: float | None = None
    """Fraction of positions the MLM head computes logits for (default 1; a recipe: its mlm_probability)."""
    search: bool | None = None
    """Search the layout for the fastest that fits (default: yes, except for an ernie-finetune recipe)."""
    json: bool = False
    """Print the plan as JSON."""

    def validate(self) -> None:
        if (self.recipe is None) == (self.preset is None):
            raise ValueError("give exactly one of --recipe or --preset")


def _next_to_recipe(value: str, recipe: Path) -> Path:
    """The DeepSpeed json a recipe names: an absolute path as it is; a relative one is looked up in the recipe's
    directory, then in each directory above it (the shipped recipes name repo-relative paths such as
    recipes/deepspeed/zero3-100b.json), then in the current directory."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    here = Path(recipe).expanduser().resolve().parent
    for base in (here, *here.parents, Path.cwd()):
        if (base / path).is_file():
            return base / path
    raise FileNotFoundError(
        f"recipe {recipe}: distributed.deepspeed_config {value!r} is not in the recipe's directory {here}, a "
        "directory above it, or the current directory; give its absolute path, or --deepspeed PATH"
    )


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.models.presets import preset_config
    from ernie_zoo.parallel.planner import (
        ModelShape,
        ParallelSettings,
        largest_micro_batch,
        make_plan,
        parse_cluster,
        settings_from_deepspeed,
    )

    try:
        settings: dict = {}
        deepspeed_path = args.deepspeed
        split_batch = None  # an ernie-finetune recipe's train.batch_size, shared by the data-parallel ranks
        if args.recipe is not None:
            from ernie_zoo.finetune.plan import is_finetune_recipe, planner_inputs_from_finetune_recipe
            from ernie_zoo.training.recipe_bridge import planner_inputs_from_recipe

            if not Path(args.recipe).is_file():
                raise FileNotFoundError(f"recipe {args.recipe} not found")
            if is_finetune_recipe(args.recipe):
                config, recipe_settings, warnings = planner_inputs_from_finetune_recipe(args.recipe)
                split_batch = recipe_settings.pop("batch_size")
            else:
                config, recipe_settings, warnings = planner_inputs_from_recipe(args.recipe)
            for warning in warnings:
                print(f"ernie-zoo plan: note: {warning}", file=sys.stderr)
            recipe_ds = recipe_settings.pop("deepspeed", None)
            deepspeed_path = deepspeed_path or (
                _next_to_recipe(recipe_ds, args.recipe) if recipe_ds else None
            )
            settings.update(recipe_settings)
            name = args.recipe.stem
        else:
            config, name = preset_config(args.preset), args.preset
        if deepspeed_path is not None:
            settings.update(
                settings_from_deepspeed(json.loads(Path(deepspeed_path).read_text(encoding="utf-8")))
            )
        auto_micro = args.micro_batch == "auto"
        flags = {
            "tp": args.tp,
            "pp": args.pp,
            "virtual_stages": args.virtual_stages,
            "schedule": args.schedule,
            "ep": args.ep,
            "moe_capacity_factor": args.moe_capacity_factor,
            "zero_stage": args.zero,
            "micro_batch": None if auto_micro else args.micro_batch,
            "seq_len": args.seq_len,
            "global_batch": args.global_batch,
            "head_fraction": args.head_fraction,
            "recompute": args.recompute,
            "sequence_parallel": args.sequence_parallel,
            "flash_attention": args.flash_attention,
            "efficiency": args.efficiency,
            "comm_efficiency": args.comm_efficiency,
            "reserve_gib": args.reserve_gib,
            "offload_optimizer": args.offload_optimizer,
            "offload_param": args.offload_param,
            "nvme_gbyte_s": args.nvme_gbyte_s,
            "host_adam_params_per_s": args.host_adam_params_per_s,
        }
        cluster = parse_cluster(args.cluster)
        # The search keeps the global batch of the layout the recipe (or the defaults) describe, before any flag
        # pins a dimension: micro-batch x accumulation x that layout's DP.
        given_dp = max(1, cluster.world_size // (int(settings.get("tp", 1)) * int(settings.get("pp", 1))))
        given_global = settings.get("global_batch") or (
            int(settings.get("micro_batch", 1)) * int(settings.get("grad_accum_steps") or 1) * given_dp
        )
        settings.update({k: v for k, v in flags.items() if v is not None})
        if args.global_batch is not None:
            settings.pop(
                "grad_accum_steps", None
            )  # an explicit global batch replaces the recipe's accumulation
        if split_batch is not None and "micro_batch" not in settings and not auto_micro:
            from ernie_zoo.finetune.plan import micro_batch_for

            dp = cluster.world_size // int(settings.get("tp", 1))
            settings["micro_batch"], note = micro_batch_for(split_batch, max(1, dp))
            if note:
                print(f"ernie-zoo plan: note: {note}", file=sys.stderr)
        model = ModelShape.from_config(config, name=name)
        parallel = ParallelSettings(**settings)
        if args.search if args.search is not None else split_batch is None:
            base = dataclasses.replace(
                parallel, global_batch=args.global_batch or given_global, grad_accum_steps=None
            )
            return _search(args, model, cluster, base, flags)
        if auto_micro:
            best = largest_micro_batch(model, cluster, parallel)
            if best == 0:
                parallel = ParallelSettings(**{**settings, "micro_batch": 1})
            else:
                print(f"largest power-of-two micro-batch that fits: {best}", file=sys.stderr)
                parallel = ParallelSettings(**{**settings, "micro_batch": best})
        plan = make_plan(model, cluster, parallel)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"ernie-zoo plan: error: {err}", file=sys.stderr)
        return 2
    print(plan.to_json() if args.json else plan.render())
    return 0 if plan.fits else 1


def _search(args: Args, model, cluster, parallel, flags: dict) -> int:
    """Search the layout; print why and the chosen layout's plan (or the JSON of both)."""
    from ernie_zoo.parallel.planner import SEARCH_DIMS, search_layouts

    fixed = {k: flags[k] for k in SEARCH_DIMS if flags.get(k) is not None}
    try:
        found = search_layouts(model, cluster, parallel, fixed)
    except ValueError as err:
        print(f"ernie-zoo plan: error: {err}", file=sys.stderr)
        return 1 if "fits" in str(err) else 2
    best = found.best
    if args.json:
        data = best.to_dict()
        data["search"] = {
            "tried": found.tried,
            "fit": len(found.plans),
            "too_big": found.too_big,
            "impossible": found.impossible,
            "pinned": found.fixed,
            "runners_up": [
                {
                    **{k: getattr(p.settings, k) for k in SEARCH_DIMS},
                    "dp": p.dp,
                    "tokens_per_s": p.tokens_per_s,
                }
                for p in found.runners_up()
            ],
        }
        print(json.dumps(data, indent=2))
        return 0
    print(found.explain())
    st = best.settings
    moe = bool(best.model.moe_layers)
    # a MoE model runs on the pipeline backend without offload: EP x TP x DP at ZeRO 0-3 (pp_size 1, ep a multiple
    # of tp: training/expert_engine.py; ZeRO-2/3 with FSDP2, dense over dp, experts over edp) and PP x EP x DP
    # (tp_size 1, the router loss carried through the stages: pipeline_engine.py) at ZeRO 0 (ZeRO-1 without EP)
    ep_runs = moe and st.offload_optimizer == st.offload_param == "none"
    expert_engine = ep_runs and st.ep > 1 and st.pp == 1 and st.ep % st.tp == 0
    expert_pipeline = (
        ep_runs and st.pp > 1 and st.tp == 1 and st.zero_stage in ((0,) if st.ep > 1 else (0, 1))
    )
    if expert_engine:
        how = (
            f"distributed.backend pipeline, pp_size 1, tp_size {st.tp}, ep_size {st.ep}, zero_stage "
            f"{st.zero_stage}, recompute {st.recompute}; micro_batch_size {st.micro_batch}, grad_accum_steps "
            f"{best.grad_accum}"
        )
    elif st.pp > 1:  # the pipeline backend: one loop micro batch is cut into the schedule's micro batches
        name = "interleaved" if st.schedule == "1f1b" and st.virtual_stages > 1 else st.schedule
        chunks = f", pp_virtual_stages {st.virtual_stages}" if name != "1f1b" else ""
        schedule = f"pp_schedule {name}{chunks}"
        how = (
            f"distributed.backend pipeline, pp_size {st.pp}, {schedule}, pp_microbatches {best.grad_accum}, "
            f"tp_size {st.tp}, {f'ep_size {st.ep}, ' if moe and st.ep > 1 else ''}zero_stage {st.zero_stage}, "
            f"recompute {st.recompute}; micro_batch_size {st.micro_batch * best.grad_accum}, grad_accum_steps 1"
        )

    else:
        how = (
            f"distributed.backend deepspeed, tp_size {st.tp}, zero_stage {st.zero_stage}, recompute {st.recompute}; "
            f"micro_batch_size {st.micro_batch}, grad_accum_steps {best.grad_accum}"
        )
    built = expert_engine or expert_pipeline
    if moe and not built and (st.pp > 1 or st.tp > 1 or st.ep > 1):  # what the engines do not build
        why = []
        if st.ep > 1:  # the plan's memory and all-to-all traffic assume it
            if st.offload_optimizer != "none" or st.offload_param != "none":
                why.append(
                    f"EP {st.ep} with offload (the expert-parallel engines keep their state on the GPU)"
                )
            elif st.pp > 1 and st.tp > 1:
                why.append(f"EP {st.ep} with both PP and TP (PP x EP runs at tp 1, EP x TP at pp 1)")
            elif st.tp > 1 and st.ep % st.tp:
                why.append(f"EP {st.ep} with TP {st.tp} (ep must be a multiple of tp)")
            else:
                why.append(
                    f"EP {st.ep} in a pipeline at ZeRO-{st.zero_stage} (PP x EP runs at ZeRO 0; EP x TP x DP at pp 1 "
                    "runs ZeRO 0-3: plan with --zero 0, or --pp 1)"
                )
        elif st.tp > 1:
            why.append(
                "the engines refuse TP > 1 for a MoE model without EP (plan with --tp 1 or --ep 2 or more)"
            )
        elif st.pp > 1:
            why.append("a MoE model's pipeline runs at ZeRO 0-1 without offload")
        how += (
            f" -- planned, not built: {'; '.join(why)}; train this MoE model with distributed.backend deepspeed "
            "(ZeRO, every expert on every rank) or pipeline with ep_size (EP x TP x DP at ZeRO 0-3, PP x EP at ZeRO 0)"
        )
    if moe and st.moe_capacity_factor is not None:  # the plan's expert compute and traffic assume it
        how += f"; distributed.moe_capacity_factor {st.moe_capacity_factor:g}"
    print(f"\nto run it: {how}\n")
    print(best.render())
    return 0

"""Expert parallelism of a MoE decoder as transformers applies it: the model's own `base_model_ep_plan`
("grouped_gemm" on the fused `experts.gate_up_proj` / `down_proj`: DTensors sharded on the expert axis;
"ep_dispatch_experts" on the experts module: its forward sends each (token, expert) pair to the expert's rank with
`all_to_all_single` and brings the weighted outputs back), applied with
`transformers.distributed.expert_parallel.apply_expert_parallelism(..., ep_implementation="all_to_all")`. Nothing of
ours moves tokens. The engines that use it: `training.expert_engine` (EP x TP x DP) and `training.pipeline_engine`
(PP x EP: each stage's experts over the data-parallel ranks of that stage).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ernie_zoo.models.decoder import is_moe


def apply_ep(model: nn.Module, ep_mesh: Any, tp_mesh: Any, dp_size: int, tp_size: int = 1) -> dict[str, str]:
    """Shard `model`'s routed experts over the 1-D `ep_mesh` (in place; a pipeline stage's model holds only its
    layers' experts) and route their tokens with all-to-alls; returns the plan, expanded to concrete names.

    `tp_mesh`: the ranks holding the same rows (the TP group; size 1 without TP), whose rows the dispatch slices
    among them before the all-to-all; `dp_size` x `tp_size` = the ranks of the dense view (transformers'
    `DistributedConfig(fsdp_size, tp_size, ep_size)`), which resolves the plan as `from_pretrained` resolves it.
    """
    from transformers.distributed import DistributedConfig
    from transformers.distributed.expert_parallel import apply_expert_parallelism

    ep = ep_mesh.size()
    layout = DistributedConfig(fsdp_size=dp_size, tp_size=tp_size, ep_size=ep, ep_implementation="all_to_all")
    _, ep_plan, _ = model._resolve_parallel_plans(layout)
    if "ep_dispatch_experts" not in ep_plan.values():
        raise ValueError(
            f"{type(model).__name__}'s EP plan has no token dispatch (ep_dispatch_experts): {ep_plan}"
        )
    apply_expert_parallelism(model, ep_mesh, tp_mesh, ep_plan, ep_implementation="all_to_all")
    return ep_plan


def check_expert_layout(config: Any, world_size: int, ep_size: int, tp_size: int = 1) -> None:
    """Raise ValueError unless `ep_size` experts groups fit `world_size` ranks, `tp_size` TP groups and the model's
    experts."""
    if not is_moe(config):
        raise ValueError(
            f"distributed.ep_size {ep_size}: expert parallelism needs a MoE model (moe_num_experts), and "
            f"{type(config).__name__} has no routed experts; set ep_size 1"
        )
    experts = int(config.moe_num_experts)
    if experts % ep_size:
        raise ValueError(
            f"distributed.ep_size {ep_size} does not divide the model's {experts} routed experts "
            "(moe_num_experts): every rank of an expert group holds the same number of them"
        )
    if world_size % ep_size:
        raise ValueError(
            f"distributed.ep_size {ep_size} does not divide the {world_size} launched ranks: the ranks form "
            "world / ep_size expert groups, each holding every expert once"
        )
    if tp_size > 1 and (ep_size % tp_size or world_size % tp_size):
        raise ValueError(
            f"distributed.ep_size {ep_size} with tp_size {tp_size} on {world_size} ranks: ep_size must be a "
            "multiple of tp_size (each TP group inside one expert group, which slices the batch the TP group "
            "shares among its ranks before the all-to-all) and tp_size must divide the ranks"
        )


__all__ = ["apply_ep", "check_expert_layout"]

"""Scale-out: tensor-parallel plans as data, the memory/throughput planner, consolidation of sharded checkpoints,
and DeepSpeed's config (the engines that train on it are in `ernie_zoo.training`, which imports this package).

Nothing here is imported by the modeling code; parallelism is applied to a built model from the outside
(torchtitan's rule). Submodules import `torch.distributed` and DeepSpeed lazily.
"""

from .planner import (
    GPUS,
    Cluster,
    GPUSpec,
    ModelShape,
    ParallelSettings,
    Plan,
    make_plan,
    parse_cluster,
    pipeline_bubble,
    search_layouts,
)
from .tp_plan import (
    BASE_TP_PLAN,
    ERNIE_ZOO_TP_PLAN,
    apply_tp,
    check_tp_divisibility,
    deepspeed_partition_config,
    parameter_split,
    tp_plan_for,
)

__all__ = [
    "BASE_TP_PLAN",
    "ERNIE_ZOO_TP_PLAN",
    "GPUS",
    "Cluster",
    "GPUSpec",
    "ModelShape",
    "ParallelSettings",
    "Plan",
    "apply_tp",
    "check_tp_divisibility",
    "deepspeed_partition_config",
    "make_plan",
    "parameter_split",
    "parse_cluster",
    "pipeline_bubble",
    "search_layouts",
    "tp_plan_for",
]

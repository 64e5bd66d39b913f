"""Expert-parallel pretraining engine for the ERNIE 4.5 MoE decoder (`distributed.backend: pipeline` with
`pp_size: 1` and `distributed.ep_size`): the routed experts of every MoE layer sharded over groups of ep_size ranks,
tokens dispatched to their experts' ranks by all-to-all, everything else data-parallel, and with `tp_size` > 1
TP-sharded (EP x TP, below). The pipeline engine runs PP x EP (`pipeline_engine.DecoderStage`).

The sharding and the dispatch are transformers' own (5.24): the model's `base_model_ep_plan` ("grouped_gemm" on the
fused `experts.gate_up_proj` / `down_proj`: DTensors sharded on the expert axis; "ep_dispatch_experts" on the
experts module: its forward receives this rank's tokens with their top-k global expert ids, sends each (token,
expert) pair to the expert's rank with `all_to_all_single` and brings the weighted outputs back with a second one),
applied by `transformers.distributed.expert_parallel.apply_expert_parallelism` with `ep_implementation="all_to_all"`
(`parallel.expert_plan.apply_ep`). Nothing of ours moves tokens.

    4 experts, 4 ranks, ep_size 2:      rank   0      1      2      3
    dense (attention, router, shared         [ all replicated, gradients averaged over 0-3 ]
    experts, embeddings, LM head)
    routed experts                           E0 E1  E2 E3  E0 E1  E2 E3
    EP groups (tokens move inside)           [  0 1  ]     [  2 3  ]
    expert-data-parallel groups              {0, 2} hold E0 E1, {1, 3} hold E2 E3

Each rank reads its own rows (the sampler shards by rank, as for DDP) and computes its loss on them: the next-token
loss plus `router_aux_loss_coef` x the router's load-balancing loss of its rows (`causal_lm.causal_lm_loss`,
transformers' `aux_loss`), the loss one process computes on that micro batch. Gradients in `step()`:

    dense     all-reduced over every rank, / world                        (DDP's mean)
    experts   each expert's gradient already holds the contributions of every rank of its EP group (the
              all-to-all's backward brings them), so it is NOT averaged over the EP group: it is summed over
              the expert-data-parallel group (ranks holding the same experts; none when ep_size = world) and
              divided by world, which makes it the same mean over the global batch

The global gradient norm counts every element once (each rank's squares of the pieces it holds, divided by how
many ranks hold that piece, summed over the world); clipping, AdamW (on the DTensor shards: each rank steps only its
experts) and the LR schedule follow. `distributed.zero_stage: 1` shards AdamW's state as the pipeline engine's ZeRO-1 does: the dense
parameters dealt out to every rank, each rank's expert shards to the ranks of its expert-data-parallel group
(which hold the same shards; with ep_size = world each rank steps its own experts); each rank steps its share and
broadcasts the new values to the ranks that hold the same tensors.

EP x TP (`tp_size` > 1, ep_size a multiple of it), transformers' layout (`TransformersDeviceMesh`): the dense
modules see the ranks as (dp, tp), the experts as (edp, ep). The TP plan (`parallel.tp_plan`: attention, the dense
MLP layers and the shared experts; the router and norms replicated) is applied first, then the EP plan; each TP
group lies inside one EP group, whose dispatch slices the rows the TP group shares before the all-to-all and
gathers the outputs back (transformers' `AllToAllEP`). "every rank" / "world" above then read "the data-parallel
ranks of this TP coordinate" / "dp".

    4 ranks, ep 2, tp 2:   dense (dp, tp)  TP groups {0,1} {2,3}, data-parallel {0,2} {1,3}
                           experts (edp, ep)  EP groups {0,1} {2,3}: E0 E1 on 0 and 2, E2 E3 on 1 and 3

ZeRO-2 and ZeRO-3 (`distributed.zero_stage` 2 / 3) are torch's FSDP2 (`fully_shard`), applied after TP and EP as
torchtitan applies it to MoE models: each MoE layer's experts over the expert-data-parallel mesh (edp), each layer
and then the model (embeddings, final norm, LM head) over the dense data-parallel mesh (dp). A parameter already
sharded by TP or EP becomes a 2-D DTensor, sharded again along dim 0 by FSDP. Gradients are reduce-scattered in
backward (each rank keeps the reduced gradient of its shard only: dense sum over dp / dp, experts sum over edp / dp,
the same means as above), AdamW holds the state of the shards, and ZeRO-3 gathers each unit's parameters around its
forward and again around its backward (ZeRO-2: `reshard_after_forward=False`, gathered from forward to backward,
sharded between steps).

    4 ranks, ep 2, ZeRO-3:  dense          each tensor split in 4 (dim 0) over dp {0,1,2,3}
                            experts        E0 E1 split over edp {0,2}: E0 on 0, E1 on 2; E2 E3 over {1,3}
                            forward        a layer's dense parts gathered from 0-3, its experts from the edp pair

Checkpoints are the pipeline backend's logical state (`pipeline_engine.LogicalStateEngine`,
`parallel.resharding`): each rank writes its experts under the model's own names and full shapes (a piece at its
global expert offset), rank 0 joins a plain `from_pretrained` model.safetensors, and any layout (another ep_size,
one process) resumes from it.

Evaluation runs the same forward without gradients; every rank runs the same number of forwards
(`pretrain.evaluate`), as the all-to-alls need. `distributed.moe_capacity_factor` drops the (token, expert) pairs
over each expert's capacity before the dispatch (`ExpertCapacity`); pretraining logs how many.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from ernie_zoo.models.recompute import enable_selective_recompute
from ernie_zoo.models.seeded_init import materialize
from ernie_zoo.parallel import resharding
from ernie_zoo.parallel.expert_plan import apply_ep, check_expert_layout

from .build import init_weights_from, optimizer_and_schedule
from .engine import AUTOCAST_DTYPES
from .objective import PretrainObjective
from .pipeline_engine import LogicalStateEngine

logger = logging.getLogger(__name__)


class ExpertCapacity:
    """Token dropping at a capacity factor, around one MoE layer's experts module (installed by `apply_capacity`,
    after the EP plan, so the all-to-all carries only the kept pairs). Each expert takes at most

        capacity = ceil(capacity_factor x tokens x top_k / num_experts)

    of this rank's (token, expert) pairs of a forward, the first ones in token order (Megatron's drop policy
    "position"); a dropped pair contributes nothing to its token (the token's other experts, the shared experts and
    the residual still do). The kept pairs go to the experts as top-1 rows with their routing weights and are summed
    back per token. `routed` / `dropped` count the pairs of the training forwards since the engine last took them."""

    def __init__(self, experts: nn.Module, capacity_factor: float, num_experts: int):
        self.forward = experts.forward  # the experts' own forward, or transformers' EP dispatch around it
        self.capacity_factor, self.num_experts = capacity_factor, num_experts
        self.routed = self.dropped = 0
        experts.forward = self

    def __call__(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        import math

        import torch.nn.functional as F

        tokens, top_k = top_k_index.shape  # hidden_states (tokens, H); index / weights (tokens, top_k)
        capacity = math.ceil(self.capacity_factor * tokens * top_k / self.num_experts)
        experts = top_k_index.reshape(-1)  # pairs in token order
        with torch.no_grad():
            hits = F.one_hot(experts, self.num_experts)  # (pairs, E)
            queue = (hits.cumsum(0) * hits).sum(-1) - 1  # each pair's place in its expert's queue
            keep = queue < capacity
        if torch.is_grad_enabled():  # training forwards only (evaluation drops the same way, uncounted)
            self.routed += experts.numel()
            self.dropped += int((~keep).sum())
        rows = torch.arange(tokens, device=hidden_states.device).repeat_interleave(top_k)[keep]
        out = self.forward(  # (kept pairs, H), each weighted by its routing weight
            hidden_states[rows], experts[keep].unsqueeze(-1), top_k_weights.reshape(-1)[keep].unsqueeze(-1)
        )
        return torch.zeros_like(hidden_states).index_add(0, rows, out.to(hidden_states.dtype))


def apply_capacity(model: nn.Module, capacity_factor: float) -> list[ExpertCapacity]:
    """Install `ExpertCapacity` on every MoE layer's experts module of `model`; returns them."""
    if capacity_factor <= 0:
        raise ValueError(
            f"distributed.moe_capacity_factor {capacity_factor}: must be > 0 (null: no token dropping)"
        )
    num_experts = int(model.config.moe_num_experts)
    return [
        ExpertCapacity(module, capacity_factor, num_experts)
        for name, module in model.named_modules()
        if name.endswith(".mlp.experts")
    ]


class ExpertParallelEngine(LogicalStateEngine):
    """The MoE decoder as EP x DP over the launched ranks (see the module docstring), built from the pretraining
    recipe (its AdamW and schedule are built here, after the experts are sharded)."""

    backend = "pipeline"

    def __init__(self, recipe: Any, model: nn.Module, device: torch.device):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor

        from ernie_zoo.parallel.distributed import init_from_env
        from ernie_zoo.parallel.tp_plan import apply_tp, check_tp_divisibility, tp_plan_for

        d = recipe.distributed
        if int(d.pp_size) != 1:
            raise ValueError(
                f"distributed.ep_size {d.ep_size} with pp_size {d.pp_size}: this engine runs EP x TP x DP "
                "(pp_size 1); the pipeline engine runs PP x EP"
            )
        if recipe.precision not in ("fp32", "bf16"):
            raise ValueError(
                f"recipe key 'precision' = {recipe.precision!r}: expert parallelism runs fp32 or bf16"
            )
        self.recipe, self.device = recipe, device
        self.ep, self.tp = int(d.ep_size), int(d.tp_size or 1)
        self.rank, self.world_size, _ = init_from_env(timeout_s=d.timeout_s)
        check_expert_layout(model.config, self.world_size, self.ep, self.tp)
        check_tp_divisibility(model.config, self.tp, self.ep)
        self.dp = self.dp_world_size = self.world_size // self.tp
        self.edp = self.world_size // self.ep
        self.is_main = self.rank == 0
        # transformers' two views of the ranks (`TransformersDeviceMesh`, without pp / dp_replicate): the dense
        # modules' (dp, tp) and the experts' (edp, ep); ep a multiple of tp puts each TP group inside an EP group,
        # whose token dispatch slices the batch the TP group shares
        self.mesh = init_device_mesh(device.type, (self.dp, self.tp), mesh_dim_names=("dp", "tp"))
        self.expert_mesh = init_device_mesh(device.type, (self.edp, self.ep), mesh_dim_names=("edp", "ep"))
        self.dp_rank = self.mesh.get_local_rank("dp")
        self.ep_rank = self.expert_mesh.get_local_rank("ep")
        self.dp_group = self.mesh.get_group("dp") if self.dp > 1 else None
        self.tp_group = self.mesh.get_group("tp") if self.tp > 1 else None
        self.ep_group = self.expert_mesh.get_group("ep")
        self.edp_group = self.expert_mesh.get_group("edp") if self.edp > 1 else None
        if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            materialize(model, recipe.seed, device)  # `pipeline_engine.model_factory` builds it on meta
            if recipe.model.init_from is not None:
                init_weights_from(model, recipe.model.init_from)
        self.model = model.to(device)
        self.tp_plan: dict[str, str] = {}
        if (
            self.tp > 1
        ):  # transformers' order: TP of the dense modules and shared experts, then EP of the experts
            self.tp_plan = tp_plan_for(model)
            apply_tp(model, self.mesh["tp"], self.tp_plan, ep_size=self.ep)
        tp_sharded = {n for n, p in model.named_parameters() if isinstance(p, DTensor)}
        self.ep_plan = (
            apply_ep(model, self.expert_mesh["ep"], self.mesh["tp"], self.dp, self.tp) if self.ep > 1 else {}
        )
        self.expert_names = {n for n, p in model.named_parameters() if isinstance(p, DTensor)} - tp_sharded
        if self.ep > 1 and not self.expert_names:
            raise ValueError(f"{type(model).__name__}: transformers' EP plan sharded no parameter")
        self.capacity = (
            apply_capacity(model, d.moe_capacity_factor) if d.moe_capacity_factor is not None else []
        )
        self._checkpoint_group = resharding.checkpoint_group()
        self._joiner = None
        if d.recompute == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif d.recompute == "selective":  # each layer's attention core (Megatron's selective recompute)
            enable_selective_recompute(model)
        self._dtype = AUTOCAST_DTYPES[recipe.precision]
        # the loss's parts (lm_loss, aux_loss) are logged as one process logs them: this rank's micro batch
        self.objective = PretrainObjective(model, keep_details=False)
        self.zero_stage = int(d.zero_stage or 0)
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"distributed.zero_stage {self.zero_stage}: must be 0, 1, 2 or 3")
        #: ZeRO-2/3: the modules `fully_shard` made FSDP units (the MoE layers' experts, the layers, the model)
        self.fsdp_units: list[nn.Module] = self._fully_shard() if self.zero_stage >= 2 else []
        # fused AdamW over plain tensors only; DTensor shards step through the for-each-free path
        self.optimizer, self.scheduler = optimizer_and_schedule(
            recipe, model, fused=not self.expert_names and self.tp == 1 and not self.fsdp_units
        )
        #: ZeRO-1: [(group, global ranks of the group, each group rank's parameters)] of the dense and expert deals
        self.deals: list[tuple[Any, list[int], list[list[nn.Parameter]]]] = []
        if self.zero_stage == 1 and self.world_size > 1:
            self._shard_optimizer()
        logger.info(
            "expert parallelism: EP %d x TP %d x DP %d (%d expert groups), %d of %d routed experts per rank",
            self.ep,
            self.tp,
            self.dp,
            self.edp,
            int(model.config.moe_num_experts) // self.ep,
            int(model.config.moe_num_experts),
        )

    def _fully_shard(self) -> list[nn.Module]:
        """ZeRO-2/3 with torch's FSDP2 (`fully_shard`), torchtitan's way for MoE: each MoE layer's experts over the
        expert-data-parallel mesh (edp: the ranks holding the same experts), then each layer and the model (the
        rest: embeddings, final norm, LM head) over the dense data-parallel mesh (dp); TP shards and EP shards are
        sharded again along dim 0 (2-D DTensors on the (dp, tp) / (edp, ep) meshes). ZeRO-3 gathers a unit's
        parameters around its forward and again around its backward; ZeRO-2 (`reshard_after_forward=False`) keeps
        them gathered from the forward to the backward. Gradients are reduce-scattered in backward, so each rank
        keeps only the reduced gradient of its shard, and AdamW (built after this) holds the state of the shards.

        The reduction's divisor: dense sum over dp / dp (FSDP's mean); experts sum over edp / dp (the module
        docstring), set on the experts' units. Reductions are plain sums followed by the division (gloo has no
        pre-multiplied sum)."""
        from torch.distributed.fsdp import fully_shard

        reshard = self.zero_stage == 3
        units: list[nn.Module] = []

        def shard(module: nn.Module, mesh: Any, divide_by: float | None = None) -> None:
            fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
            if divide_by is not None:
                module.set_gradient_divide_factor(divide_by)
            # on one rank FSDP divides without a collective; forcing sums there would divide twice
            if mesh.size() > 1:
                module.set_force_sum_reduction_for_comms(True)
            units.append(module)

        for layer in self.model.model.layers:
            experts = getattr(layer.mlp, "experts", None)
            if experts is not None and self.ep > 1:  # EP-sharded (at ep_size 1 the experts are dense)
                shard(experts, self.expert_mesh["edp"], divide_by=float(self.dp))
            shard(layer, self.mesh["dp"])
        shard(self.model, self.mesh["dp"])
        return units

    def _shard_optimizer(self) -> None:
        """ZeRO-1: deal the dense parameters (TP: this rank's shards) out to the data-parallel ranks of its TP
        coordinate and each rank's expert shards to the ranks of its expert-data-parallel group (largest first,
        each to the least loaded rank: the same deal on every rank that holds the same tensors), and keep only this
        rank's share in the optimizer."""
        import torch.distributed as dist

        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        names = {id(p): n for n, p in self.model.named_parameters()}
        mine: set[int] = set()
        edp_ranks = [int(r) for r in self.expert_mesh["edp"].mesh.tolist()]
        dp_ranks = [int(r) for r in self.mesh["dp"].mesh.tolist()]
        for expert, group, ranks in ((False, self.dp_group, dp_ranks), (True, self.edp_group, edp_ranks)):
            pool = [p for p in params if (names[id(p)] in self.expert_names) == expert]
            loads = [0] * len(ranks)
            shares: list[list[nn.Parameter]] = [[] for _ in ranks]
            for p in sorted(pool, key=lambda p: (-p.numel(), names[id(p)])):
                r = loads.index(min(loads))
                shares[r].append(p)
                loads[r] += p.numel()
            me = ranks.index(dist.get_rank())
            mine.update(id(p) for p in shares[me])
            if len(ranks) > 1:
                self.deals.append((group, ranks, shares))
        for group in self.optimizer.param_groups:
            group["params"] = [p for p in group["params"] if id(p) in mine]

    @torch.no_grad()
    def _broadcast_updates(self) -> None:
        """ZeRO-1: every rank's stepped share, flattened, broadcast to the ranks that hold the same tensors."""
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for group, ranks, shares in self.deals:
            for src, share in zip(ranks, shares):
                if not share:
                    continue
                tensors = [self._local(p) for p in share]
                flat = _flatten_dense_tensors(tensors)
                dist.broadcast(flat, src=src, group=group)
                if src != self.rank:
                    for t, new in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                        t.copy_(new)

    # ------------------------------------------------------------------------------------- forward / backward
    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """(mean loss [+ the router's load-balancing loss in training], predicted tokens, correct) of this rank's
        micro batch, under the run's autocast."""
        batch = {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        if self._dtype is None:
            return self.objective(**batch)
        with torch.autocast(self.device.type, dtype=self._dtype):
            return self.objective(**batch)

    def backward(self, loss: torch.Tensor, boundary: bool | None = None) -> None:
        loss.backward()

    def take_routing_counts(self) -> tuple[int, int] | None:
        """(routed, dropped) (token, expert) pairs of this rank's MoE layers since the last call, under
        `distributed.moe_capacity_factor` (None without it). Recompute runs a layer's forward twice, and counts
        both."""
        if not self.capacity:
            return None
        routed, dropped = sum(c.routed for c in self.capacity), sum(c.dropped for c in self.capacity)
        for c in self.capacity:
            c.routed = c.dropped = 0
        return routed, dropped

    # ------------------------------------------------------------------------------------- step
    @torch.no_grad()
    def _reduce_gradients(self) -> None:
        """ZeRO 0-1: every gradient made the global batch's mean (module docstring): the dense ones (TP: this
        rank's shards) all-reduced over the data-parallel ranks of this TP coordinate as one flat buffer, each
        expert shard's over its expert-data-parallel group, all divided by the data-parallel size. (ZeRO-2/3:
        FSDP reduce-scattered them in backward already.)"""
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        grads = [(n, self._local(p.grad)) for n, p in self.model.named_parameters() if p.grad is not None]
        dense = [g for n, g in grads if n not in self.expert_names]
        experts = [g for n, g in grads if n in self.expert_names]
        for tensors, group, size in ((dense, self.dp_group, self.dp), (experts, self.edp_group, self.edp)):
            if not tensors:
                continue
            if group is not None and size > 1:
                flat = _flatten_dense_tensors(tensors)
                dist.all_reduce(flat, group=group)
                for g, new in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                    g.copy_(new)
            for g in tensors:
                g.div_(self.dp)

    def _copies(self, p: torch.Tensor) -> int:
        """How many ranks hold the same piece of `p` (or of its gradient): the ranks over which it is not sharded.
        A plain tensor is whole on every rank; a DTensor (TP, EP, FSDP or two of them) is split over the product
        of its sharded mesh dimensions, and every mesh here spans the world."""
        from torch.distributed.tensor import DTensor

        if not isinstance(p, DTensor):
            return self.world_size
        shards = 1
        for size, placement in zip(p.device_mesh.shape, p.placements):
            # Shard, or FSDP's _StridedShard over a TP / EP shard (whose is_shard() is False)
            if not placement.is_replicate():
                shards *= size
        return self.world_size // shards

    def step(self) -> float:
        """Gradient reduction (ZeRO 0-1; ZeRO-2/3 reduced in backward), global norm + clipping, AdamW, LR
        schedule; the pre-clip norm. The norm adds each rank's squares of the pieces it holds, each divided by how
        many ranks hold that piece, over the world: every element counted once (each expert, each TP and FSDP
        shard, the replicated tensors)."""
        import torch.distributed as dist

        if not self.fsdp_units:
            self._reduce_gradients()
        params = [p for p in self.model.parameters() if p.grad is not None]
        squares = torch.zeros((), dtype=torch.float64, device=self.device)
        for p in params:
            squares += self._local(p.grad).detach().double().pow(2).sum() / self._copies(p)
        if self.world_size > 1:
            dist.all_reduce(squares)
        norm = float(squares.sqrt())
        max_norm = self.recipe.optim.grad_clip or 0.0
        if max_norm > 0:
            coef = min(1.0, max_norm / (norm + 1e-6))  # torch.nn.utils.clip_grad_norm_'s factor
            for p in params:
                self._local(p.grad).mul_(coef)
        self.optimizer.step()
        if self.deals:
            self._broadcast_updates()
        self.scheduler.step()
        self.zero_grad()
        return norm

    def logical_state(self) -> dict[str, torch.Tensor]:
        """The logical state (`LogicalStateEngine`); ZeRO-2/3: of the FSDP shards (2-D DTensors, written as pieces
        of the model's full tensors), after freeing any gathered parameters, so that a load fills the tensors the
        next forward gathers."""
        for unit in self.fsdp_units:
            unit.reshard()
        return super().logical_state()

    def num_parameters(self) -> int:
        """Parameters of the whole model (each expert once)."""
        return sum(p.numel() for p in self.model.parameters())  # a DTensor's numel is its global one

    def shard_report(self) -> dict[str, list[int]]:
        """name -> [elements this rank holds, elements of the whole tensor]."""
        return {n: [self._local(p).numel(), p.numel()] for n, p in self.model.named_parameters()}

    def layout(self) -> dict[str, Any]:
        """The layout (recorded in a checkpoint's layout.json; a resume under another one reshards, and logs it)."""
        return {
            "backend": self.backend,
            "pp_size": 1,
            "tp_size": self.tp,
            "ep_size": self.ep,
            "num_layers": self.model.config.num_hidden_layers,
            "dp_size": self.dp,
            "zero_stage": self.zero_stage if self.fsdp_units else 1 if self.deals else 0,
        }


__all__ = ["ExpertCapacity", "ExpertParallelEngine", "apply_capacity", "check_expert_layout"]

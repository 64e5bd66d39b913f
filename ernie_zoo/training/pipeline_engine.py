"""Pipeline-parallel pretraining engine (`distributed.backend: pipeline`), composed with tensor and data
parallelism (a MoE decoder's: with expert parallelism, `distributed.ep_size`, each stage's experts over that stage's
data-parallel ranks, the router loss carried through the stages: `DecoderStage`, `step`): the layers of an encoder
or an ERNIE 4.5 decoder split into stages (`parallel.pipeline`) run by `torch.distributed.pipelining`'s schedules
(`distributed.pp_schedule`: 1F1B, interleaved 1F1B, zero bubble, ZB-V; `parallel.pipeline`), each stage optionally
TP-sharded by the TP plan (DTensor, `parallel.tp_plan`), whole pipelines replicated over data-parallel ranks.

    ranks = dp x pp x tp, a device mesh ("dp", "pp", "tp"); 4 ranks as PP 2 x TP 2:   pp 0: ranks 0 1 (TP pair)
                                                                                    pp 1: ranks 2 3 (TP pair)
    stage 0  [embeddings, layers 0..k)   ──h, mask──>  ...  ──>  stage S-1 [layers .., MLM head] ── loss
             <──────────────────── d loss / d h ─────────────────────

Why `torch.distributed.pipelining` rather than DeepSpeed's PipelineModule: the stages are plain modules of our own
model (parameter names unchanged, so checkpoints and the TP plan carry over), DTensor TP composes inside a stage,
the schedules (1F1B, interleaved 1F1B, zero bubble) run on gloo CPU ranks as on NCCL, and the engine keeps the training loop's
contract. DeepSpeed's pipeline engine wants the model rewritten as a LayerSpec list and owns the loop
(`train_batch` pulls from its own data iterator), which the one loop (`loop.TrainLoop`) cannot hand it.

The loop's contract, as a pipeline keeps it: `forward(batch)` runs the whole schedule on the micro batch (its
`distributed.pp_microbatches` chunks flow forward and backward interleaved, so the gradients are accumulated
there), each chunk's loss being its masked tokens' summed cross-entropy / (the micro batch's masked tokens x
grad_accum_steps): the sum over chunks is the one-process mean loss of the micro batch, divided as the loop
divides it. `backward` then has nothing left to do. `step()`: gradients averaged over the data-parallel replicas
(an all-reduce, DDP's semantics), the tied word-embedding gradient
summed over the first and last stage, the global norm over every stage (tied weight once, TP shards summed),
clipping, AdamW, the LR schedule. The optimizer is replicated over the replicas, or with `distributed.zero_stage: 1`
ZeRO-1-sharded: each data-parallel rank keeps the AdamW state of, and steps, its share of the stage's parameters and
broadcasts the new values to the other replicas (ZeRO-2/3 would reduce-scatter or gather every pipeline micro batch;
they are refused, as DeepSpeed's pipeline engine refuses them).

Every rank of a pipeline reads the same batch (the sampler shards by data-parallel rank only): the first stage
takes the inputs, the last the labels. The schedule's buffers are shaped on first use, so a micro batch of a
new shape (the collator pads to the longest row) gets fresh stages; evaluation runs the stages one after the
other, forward only (no micro batches).

Checkpoints are one logical state (`parallel.resharding`, torch.distributed.checkpoint): every rank writes its
stage's tensors (TP: its DTensor shards; ZeRO-1: the AdamW state of its share) under the model's own names and full
shapes into `dcp/`, and rank 0 joins the model's tensors into the checkpoint's `config.json` + `model.safetensors` (a
`from_pretrained` directory). A resume may use another layout (pp / tp / dp size, schedule, ZeRO-1): each rank
reads the pieces its own layout needs. `save(..., asynchronous=True)` returns once the state is copied to CPU memory
and writes in the background (`pretrain.Pretraining.save`, `checkpoint.async_save`). `pp_size` 1 is allowed: the
engine is then TP x DP (DTensor TP, DDP-style gradient averaging, optionally ZeRO-1) without a pipeline.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ernie_zoo.models.decoder import is_decoder_config, is_moe, load_balancing_loss, router_load_sums
from ernie_zoo.models.recompute import enable_selective_recompute
from ernie_zoo.models.seeded_init import materialize
from ernie_zoo.parallel import resharding
from ernie_zoo.parallel.expert_plan import apply_ep, check_expert_layout
from ernie_zoo.parallel.pipeline import (
    DECODER_SPLIT,
    ENCODER_SPLIT,
    build_schedule,
    check_schedule,
    prune_to_stages,
    rank_stages,
    stage_ranks,
    stages_per_rank,
    tied_weights,
)
from ernie_zoo.parallel.resharding import model_state, optimizer_state

from .build import build_pretraining_model, init_weights_from, optimizer_and_schedule
from .checkpoint import load_schedule_state, read_json, save_json_state, write_json

logger = logging.getLogger(__name__)

META_FILE = "layout.json"
#: Batch keys the first stage reads, in this order (those the batch has).
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pinyin_ids")
#: ... of a decoder's packed rows (training/causal_lm.py): the position ids mark where each document starts
DECODER_INPUT_KEYS = ("input_ids", "position_ids")


def shard_name(pp_rank: int, tp_rank: int) -> str:
    return f"pp{pp_rank:03d}-tp{tp_rank:03d}"


class _Stage(nn.Module):
    """A stage's forward under the run's autocast (bf16 mixed precision, as `PlainEngine.autocast` runs the
    whole model; `dtype` None: fp32). What crosses to the next stage stays fp32: a layer's output is a LayerNorm's
    (encoder) or a residual sum onto the fp32 stream (decoder), which autocast leaves in fp32."""

    dtype: torch.dtype | None = None

    def __init__(self, model: nn.Module, split, layers: list[int], first: bool, last: bool, recompute: str):
        super().__init__()
        self.config = model.config
        self.first, self.last, self.recompute = first, last, recompute == "full"
        stack = model.get_submodule(split.layers)
        self.layers = nn.ModuleList([stack[str(i)] for i in layers])
        self.keys: tuple[str, ...] = ()

    def _run_layers(self, h: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """The stage's layers on `h` (each recomputed in backward under recompute "full"; under "selective" the
        engine has set the model's attention core to recompute itself, `models.recompute`)."""
        for layer in self.layers:
            if self.recompute and torch.is_grad_enabled():
                h = torch.utils.checkpoint.checkpoint(layer, h, *args, use_reentrant=False, **kwargs)
            else:
                h = layer(h, *args, **kwargs)
        return h

    def forward(self, *args: torch.Tensor):
        if self.dtype is None:
            return self._forward(*args)
        with torch.autocast(args[0].device.type, dtype=self.dtype):
            return self._forward(*args)


class EncoderStage(_Stage):
    """One pipeline stage of ErnieZooForMaskedLM: [embeddings] -> its layers -> (the last: hidden states for the
    MLM head, which the loss applies at the masked positions only).

    First stage: `forward(*inputs)` in `keys` order; the others: `forward(hidden, mask)`. Every stage but the
    last returns (hidden (B, T, H), mask (B, T) as float), the padding mask travelling with the activations.
    recompute "full": each layer recomputed in backward (non-reentrant activation checkpointing, per stage).
    """

    def __init__(self, model: nn.Module, layers: list[int], first: bool, last: bool, recompute: str):
        super().__init__(model, ENCODER_SPLIT, layers, first, last, recompute)
        self.embeddings = model.ernie.embeddings if first else None
        self.head = model.cls if last else None

    def _forward(self, *args: torch.Tensor):
        from transformers.masking_utils import create_bidirectional_mask

        if self.first:
            inputs = dict(zip(self.keys, args))
            emb, ids = self.embeddings, inputs["input_ids"]
            if emb.char_features is not None:
                h = emb(
                    inputs_embeds=emb.embed_tokens(ids, inputs.get("pinyin_ids")),
                    token_type_ids=inputs.get("token_type_ids"),
                )
            else:
                h = emb(input_ids=ids, token_type_ids=inputs.get("token_type_ids"))
            mask = inputs["attention_mask"].to(h.dtype)
        else:
            h, mask = args
        extended = create_bidirectional_mask(config=self.config, inputs_embeds=h, attention_mask=mask.long())
        h = self._run_layers(h, extended)
        return h if self.last else (h, mask.detach())


class DecoderStage(_Stage):
    """One pipeline stage of an ERNIE 4.5 decoder (transformers' Ernie4_5ForCausalLM, Ernie4_5_MoeForCausalLM):
    [token embeddings] -> its layers -> (the last: the final norm; the LM head is applied by the loss).

    First stage: `forward(input_ids, position_ids)`; the others: `forward(hidden, positions)`. Every stage but the
    last returns (hidden (B, T, H), the position ids as float): the positions travel with the activations, and
    each stage rebuilds from them what `Ernie4_5Model.forward` builds once, the same way: the causal mask of the
    packed rows (transformers reads each row's documents from where the positions restart) and the rotary
    embeddings. recompute "full": each layer recomputed in backward (non-reentrant activation checkpointing).

    A MoE decoder's stages carry the router's load-balancing loss: one more tensor travels with the activations,
    the sums of every MoE layer so far (`models.decoder.router_load_sums`, (3, E); the first stage starts from
    zeros), each stage adding its layers' (read from their routers' outputs), the last returning (hidden, sums)
    for the loss to take `load_balancing_loss` of. The gradient of the probability sums flows back through the
    pipeline like the hidden states', into every stage's routers.

        stage 0 [emb, L0, L1] --h, pos, sums(L0, L1)--> stage 1 [L2, L3, norm] --h, sums(L0..L3)--> aux loss
    """

    def __init__(self, model: nn.Module, layers: list[int], first: bool, last: bool, recompute: str):
        super().__init__(model, DECODER_SPLIT, layers, first, last, recompute)
        self.embed_tokens = model.model.embed_tokens if first else None
        self.rotary_emb = model.model.rotary_emb  # no parameters: every stage has it
        self.norm = model.model.norm if last else None
        self.head = model.lm_head if last else None
        self.moe = is_moe(model.config)
        self._router_logits: list[torch.Tensor] = []
        if self.moe:
            for layer in self.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None and hasattr(layer.mlp, "experts"):  # a sparse MoE block's router
                    gate.register_forward_hook(self._record_router)

    def _record_router(self, module: nn.Module, args: Any, output: tuple) -> None:
        self._router_logits.append(output[0])  # (tokens, E): the logits, before top-k and bias

    def router_sums(self, carried: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        """The router-loss sums received (`carried`; the first stage: zeros) + this stage's layers' last forward."""
        total = carried if carried is not None else like.new_zeros(3, self.config.moe_num_experts)
        for logits in self._router_logits:
            total = total + router_load_sums(logits, self.config.moe_k)
        return total.float()

    def _forward(self, *args: torch.Tensor):
        from transformers.masking_utils import create_causal_mask

        sums = None
        if self.first:
            inputs = dict(zip(self.keys, args))
            positions = inputs["position_ids"]
            h = self.embed_tokens(inputs["input_ids"])
        else:
            h, carried, *rest = args
            positions = carried.long()
            sums = rest[0] if rest else None
        mask = create_causal_mask(
            config=self.config, inputs_embeds=h, attention_mask=None, cache=None, position_ids=positions
        )
        rotary = self.rotary_emb(h, position_ids=positions)
        settings = {
            "attention_mask": mask,
            "position_embeddings": rotary,
            "position_ids": positions,
            "use_cache": False,
        }
        self._router_logits.clear()
        h = self._run_layers(h, **settings)
        if self.moe:
            sums = self.router_sums(sums, h)
            self._router_logits.clear()  # (recompute "full" records them again in backward, unread)
            return (self.norm(h), sums) if self.last else (h, positions.to(h.dtype).detach(), sums)
        return self.norm(h) if self.last else (h, positions.to(h.dtype).detach())


class LogicalStateEngine:
    """What the engines over DTensor-sharded models share (`PipelineEngine` here, `expert_engine.ExpertParallelEngine`):
    the data-parallel sums, the LR, and checkpoints as one logical state (`parallel.resharding`) that any of their
    layouts, and the single-device engine, resume from. A subclass sets `model`, `optimizer`, `scheduler`, `device`,
    `is_main`, `dp_group` (None: one replica), `tp_plan`, `_checkpoint_group`, `_joiner` and defines `layout()`."""

    @staticmethod
    def _local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)  # ZeRO-1: the optimizer holds this rank's share only

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def dp_sum(self, values: list[float]) -> list[float]:
        """The floats summed over the data-parallel replicas (the ranks of one pipeline agree already)."""
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        if self.dp_group is not None:
            dist.all_reduce(t, group=self.dp_group)
        return t.tolist()

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    # ------------------------------------------------------------------------------------- checkpoints
    def local_state(self) -> dict[str, torch.Tensor]:
        """This rank's weights and buffers (TP: its shards), tied copies once, on the CPU."""
        from ernie_zoo.utils import tied_names

        tied = tied_names(self.model)
        return {
            k: self._local(v).detach().contiguous().cpu()
            for k, v in self.model.state_dict().items()
            if k not in tied
        }

    def logical_state(self) -> dict[str, torch.Tensor]:
        """This rank's part of the run's one logical state (`parallel.resharding`): its stages' weights and buffers
        (TP: their DTensor shards) and AdamW's state of the parameters it steps (ZeRO-1: its share), by the model's
        own names and full shapes. The tensors are the engine's own: a load fills them in place."""
        return {**model_state(self.model), **optimizer_state(self.model, self.optimizer)}

    def save(self, directory: str | Path, asynchronous: bool = False) -> Future | None:
        """Every rank writes its part of the logical state into `directory/dcp` (any layout resumes from it); rank 0
        writes config.json, the layout that wrote it (layout.json, for the record) and the LR schedule, and joins
        the model's tensors into model.safetensors (a from_pretrained directory) once every rank's pieces are
        written. Every rank calls it.

        asynchronous: return as soon as the state is copied to CPU memory, with a future that completes when this
        rank's part of the checkpoint is complete (rank 0: model.safetensors too); otherwise return None when the
        checkpoint is complete on every rank."""
        import torch.distributed as dist

        directory = Path(directory)
        if self.is_main:
            self.model.config.save_pretrained(directory)
            write_json(directory / META_FILE, {**self.layout(), "format": 2, "tp_plan": self.tp_plan})
            save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        written = resharding.save(
            self.logical_state(), directory, process_group=self._checkpoint_group, asynchronous=asynchronous
        )
        if not asynchronous:
            if self.is_main:
                self._join_model(directory)
            dist.barrier()
            return None
        if not self.is_main:
            return written
        if self._joiner is None:
            self._joiner = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-join")
        return self._joiner.submit(self._join_model, directory, written)

    @staticmethod
    def _join_model(directory: Path, written: Future | None = None) -> None:
        """model.safetensors from the logical checkpoint's model tensors (after `written`, the pieces' write)."""
        from safetensors.torch import save_file

        from ernie_zoo.parallel.consolidate import MODEL_FILE

        if written is not None:
            written.result()
        state = {k: v.contiguous() for k, v in resharding.read_full(directory).items()}
        save_file(state, str(directory / MODEL_FILE), metadata={"format": "pt"})

    def load(self, directory: str | Path) -> None:
        """Restore this rank's part of the logical state and the LR schedule from a checkpoint of any pipeline
        layout (another pp / tp / dp size, schedule or ZeRO-1 sharding: DCP reads each piece from the ranks'
        files that overlap it)."""
        directory = Path(directory)
        if not (directory / resharding.DCP_DIR).is_dir():
            raise ValueError(
                f"{directory} has no {resharding.DCP_DIR}/: not a checkpoint of distributed.backend pipeline (or one "
                "written before checkpoints resharded); start from its model.safetensors with model.init_from"
            )
        meta_file = directory / META_FILE
        saved = read_json(meta_file) if meta_file.is_file() else {}
        diff = {k: (saved.get(k), v) for k, v in self.layout().items() if saved.get(k) != v}
        if diff and self.is_main:
            logger.info(
                "resharding %s: %s",
                directory,
                ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items()),
            )
        resharding.load(self.logical_state(), directory, process_group=self._checkpoint_group)
        load_schedule_state(self.scheduler, directory / "scheduler.json")


class PipelineEngine(LogicalStateEngine):
    """`distributed.backend: pipeline` (see the module docstring): the engine contract of `engine.py` over a
    dp x pp x tp mesh of the ranks the launcher started, built from the pretraining recipe (its optimizer is
    built here, for this rank's stages). The loss is the pretraining objective's (`objective.pretrain_loss`),
    computed by the last stage on its hidden states (`_head_loss`)."""

    backend = "pipeline"
    objective = None  # the polarity objective is not pipelined (recipe validation refuses it)

    def __init__(self, recipe: Any, model: nn.Module, device: torch.device):
        from torch.distributed.device_mesh import init_device_mesh

        from ernie_zoo.parallel.distributed import init_from_env
        from ernie_zoo.parallel.tp_plan import apply_tp, check_tp_divisibility, tp_plan_for

        d = recipe.distributed
        self.recipe, self.device = recipe, device
        self.pp, self.tp = int(d.pp_size), int(d.tp_size or 1)
        self.schedule_name = d.pp_schedule
        self.virtual = stages_per_rank(d.pp_schedule, int(d.pp_virtual_stages))
        self.n_microbatches = int(d.pp_microbatches or self.pp)
        check_schedule(d.pp_schedule, self.pp, int(d.pp_virtual_stages), self.n_microbatches)
        self.grad_accum = recipe.grad_accum_steps
        if recipe.micro_batch_size % self.n_microbatches:
            raise ValueError(
                f"micro_batch_size {recipe.micro_batch_size} does not split into distributed.pp_microbatches "
                f"{self.n_microbatches} equal pipeline micro batches; make it a multiple"
            )
        check_tp_divisibility(model.config, self.tp)
        self.decoder = is_decoder_config(model.config)
        self.moe = self.decoder and is_moe(model.config)
        self.ep = int(d.ep_size)
        if self.moe and self.tp > 1:
            raise ValueError(
                f"distributed.pp_size {self.pp} x tp_size {self.tp} for a MoE decoder: PP x TP with experts is not "
                "built; run PP x EP (tp_size 1) or EP x TP (pp_size 1)"
            )
        if self.ep > 1 and not self.moe:
            raise ValueError(
                f"distributed.ep_size {self.ep}: expert parallelism needs a MoE decoder (moe_num_experts); set ep_size 1"
            )
        if self.ep > 1 and d.zero_stage:
            raise ValueError(
                f"distributed.zero_stage {d.zero_stage} with pp_size {self.pp} x ep_size {self.ep}: ZeRO-1 of the "
                "pipeline's experts (their AdamW state over the ranks holding the same experts) is not built; "
                "zero_stage 0, or EP at pp_size 1"
            )
        self.split = DECODER_SPLIT if self.decoder else ENCODER_SPLIT
        #: the input every stage needs besides the hidden states: the padding mask, or a decoder's positions
        self.carry = "position_ids" if self.decoder else "attention_mask"
        self.rank, self.world_size, _ = init_from_env(timeout_s=d.timeout_s)
        if self.world_size % (self.pp * self.tp):
            raise ValueError(
                f"{self.world_size} ranks do not divide into distributed.pp_size {self.pp} x tp_size {self.tp} "
                "(data parallelism takes the rest): launch a multiple of pp_size x tp_size ranks"
            )
        self.dp = self.world_size // (self.pp * self.tp)
        self.mesh = init_device_mesh(
            device.type, (self.dp, self.pp, self.tp), mesh_dim_names=("dp", "pp", "tp")
        )
        self.ep_group = self.edp_group = None
        if self.ep > 1:
            check_expert_layout(model.config, self.dp, self.ep)
            self.expert_mesh = self._expert_mesh(device.type)
            self.ep_rank = self.expert_mesh.get_local_rank("ep")
            self.ep_group = self.expert_mesh.get_group("ep")
            self.edp_group = self.expert_mesh.get_group("edp") if self.dp > self.ep else None
        self.dp_rank = self.mesh.get_local_rank("dp")
        self.pp_rank = self.mesh.get_local_rank("pp")
        self.tp_rank = self.mesh.get_local_rank("tp")
        self.dp_world_size = self.dp
        self.is_main = self.rank == 0
        self.pp_group = self.mesh.get_group("pp")
        self.dp_group = self.mesh.get_group("dp") if self.dp > 1 else None
        self.pp_ranks = [int(r) for r in self.mesh["pp"].mesh.tolist()]  # global rank of each pipeline rank
        self.num_stages = self.pp * self.virtual
        v_shape = self.schedule_name == "zbv"
        self.stage_rank = stage_ranks(self.pp, self.virtual, v_shape)  # pipeline rank of each stage
        self.stage_ids = rank_stages(self.pp_rank, self.pp, self.virtual, v_shape)
        self.first, self.last = 0 in self.stage_ids, self.num_stages - 1 in self.stage_ids

        tied = tied_weights(self.split, model)  # the word embeddings, kept by the first and the last stage
        self.layers = prune_to_stages(model, self.split, self.stage_ids, self.num_stages)
        if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            # built on the meta device (`model_factory`): only this rank's stages are ever allocated, with the
            # values the whole model has there (each weight drawn from the seed and its name)
            materialize(model, recipe.seed, device)
            if recipe.model.init_from is not None:
                init_weights_from(model, recipe.model.init_from, part=True)
        self.model = model.to(device)
        self.tp_plan: dict[str, str] = {}
        if self.tp > 1:
            self.tp_plan = tp_plan_for(model)
            apply_tp(model, self.mesh["tp"], self.tp_plan)
        #: the routed experts' parameters of this rank's stages (EP-sharded DTensors; ep_size 1: none)
        self.expert_names: set[str] = set()
        if self.ep > 1 and any(n.endswith(".mlp.experts") for n, _ in model.named_modules()):
            # each stage's experts over the data-parallel ranks of that stage
            apply_ep(model, self.expert_mesh["ep"], self.mesh["tp"], self.dp)
            self.expert_names = {n for n in dict(model.named_parameters()) if ".mlp.experts." in n}
        params = dict(model.named_parameters())
        # the tied word embeddings: a copy on the first and on the last stage's rank (one rank holding both, as
        # without a pipeline or under zbv: the tensor itself)
        apart = self.stage_rank[0] != self.stage_rank[-1]
        self.tied = [name for name in tied if name in params and apart and (self.first or self.last)]
        self.tied_group = self._tied_group()
        self.replica_group = self._replica_group()
        self._checkpoint_group = resharding.checkpoint_group()  # the asynchronous writer's collectives
        self._joiner: ThreadPoolExecutor | None = (
            None  # rank 0 joins model.safetensors after an asynchronous save
        )
        if d.recompute == "selective":  # the layers' attention core, wherever a stage runs them
            enable_selective_recompute(model)
        stage_class = DecoderStage if self.decoder else EncoderStage
        self.stages = [
            stage_class(model, self.layers[s], s == 0, s == self.num_stages - 1, d.recompute)
            for s in self.stage_ids
        ]
        if recipe.precision not in ("fp32", "bf16"):
            raise ValueError(
                f"recipe key 'precision' = {recipe.precision!r}: the pipeline backend runs fp32 or bf16 (fp16 needs "
                "loss scaling across the stages, not built)"
            )
        self.autocast_dtype = torch.bfloat16 if recipe.precision == "bf16" else None
        for stage in self.stages:
            stage.dtype = self.autocast_dtype
        # fused AdamW: one kernel over the stage's parameters (as the single-device engine); DTensor shards: foreach
        self.optimizer, self.scheduler = optimizer_and_schedule(
            recipe, model, fused=self.tp == 1 and not self.expert_names
        )
        self.zero_stage = int(d.zero_stage or 0)
        self.owned: list[list[nn.Parameter]] = []  # ZeRO-1: the parameters each data-parallel rank steps
        if self.zero_stage == 1 and self.dp > 1:
            self._shard_optimizer()
        if recipe.sparse_last_layer and self.is_main:
            logger.info(
                "sparse_last_layer is not used by the pipeline backend: the last stage runs every position"
            )
        self._schedule_key: tuple | None = None
        self._schedule: Any = None
        logger.info(
            "pipeline %s: PP %d (stages %s of %d, layers %s) x TP %d x DP %d, %d micro batches",
            self.schedule_name,
            self.pp,
            self.stage_ids,
            self.num_stages,
            [self.layers[s] for s in self.stage_ids],
            self.tp,
            self.dp,
            self.n_microbatches,
        )

    def _shard_optimizer(self) -> None:
        """ZeRO-1 over the data-parallel replicas: the stage's parameters are dealt out to the dp ranks (largest
        first, each to the least loaded rank; the same deal on every replica, which hold the same stage), and each
        rank's AdamW keeps state for, and steps, its share only. After the step each rank broadcasts its share's
        new values to the other replicas (`_broadcast_updates`), so the weights stay identical."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        loads = [0] * self.dp
        owner: dict[int, int] = {}
        for i in sorted(range(len(params)), key=lambda i: (-params[i].numel(), i)):
            rank = loads.index(min(loads))
            owner[id(params[i])] = rank
            loads[rank] += params[i].numel()
        self.owned = [[p for p in params if owner[id(p)] == r] for r in range(self.dp)]
        for group in self.optimizer.param_groups:
            group["params"] = [p for p in group["params"] if owner[id(p)] == self.dp_rank]
        self.dp_ranks = [int(r) for r in self.mesh["dp"].mesh.tolist()]  # global rank of each dp rank

    @torch.no_grad()
    def _broadcast_updates(self) -> None:
        """ZeRO-1: every dp rank's stepped share, flattened, broadcast to the replicas of this stage."""
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for rank, share in enumerate(self.owned):
            if not share:
                continue
            tensors = [self._local(p) for p in share]
            flat = _flatten_dense_tensors(tensors)
            dist.broadcast(flat, src=self.dp_ranks[rank], group=self.dp_group)
            if rank != self.dp_rank:
                for t, new in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                    t.copy_(new)

    # ------------------------------------------------------------------------------------- groups
    def _expert_mesh(self, device_type: str):
        """(pp, edp, ep) over the ranks (tp 1): each stage's data-parallel ranks split into expert groups of ep_size
        (tokens move inside) and expert-data-parallel groups (the ranks holding the same experts of the stage)."""
        from torch.distributed.device_mesh import DeviceMesh

        ranks = self.mesh.mesh[:, :, 0].transpose(0, 1)  # (pp, dp) global ranks
        return DeviceMesh(
            device_type,
            ranks.reshape(self.pp, self.dp // self.ep, self.ep),
            mesh_dim_names=("pp", "edp", "ep"),
        )

    def _tied_group(self):
        """The process group {first-stage rank, last-stage rank} of this rank's (dp, tp) coordinate (every rank
        creates every group, as `new_group` requires; the first and last pipeline ranks join theirs)."""
        import torch.distributed as dist

        first, last = self.stage_rank[0], self.stage_rank[-1]
        if first == last:  # one rank holds the word embeddings and the head: nothing to keep in sync
            return None
        mine = None
        grid = self.mesh.mesh  # (dp, pp, tp) global ranks
        for dp in range(self.dp):
            for tp in range(self.tp):
                pair = [int(grid[dp, first, tp]), int(grid[dp, last, tp])]
                group = dist.new_group(pair)
                if self.rank in pair:
                    mine = group
        return mine

    # ------------------------------------------------------------------------------------- forward
    def _inputs(self, batch: dict[str, torch.Tensor]) -> tuple[tuple[str, ...], tuple[torch.Tensor, ...]]:
        if self.decoder:
            missing = [k for k in DECODER_INPUT_KEYS if batch.get(k) is None]
            if missing:
                raise ValueError(f"a decoder's pipeline batch needs {', '.join(missing)} (packed rows)")
            return DECODER_INPUT_KEYS, tuple(batch[k].to(self.device) for k in DECODER_INPUT_KEYS)
        if (
            batch.get("polarity_labels") is not None
            and getattr(self.model, "word_polarity", None) is not None
        ):
            raise ValueError("the pipeline backend does not train the word-polarity head")
        batch = dict(batch)
        if batch.get("attention_mask") is None:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        keys = tuple(k for k in INPUT_KEYS if batch.get(k) is not None)
        return keys, tuple(batch[k].to(self.device) for k in keys)

    def _targets(self, labels: torch.Tensor) -> torch.Tensor:
        """The labels the loss predicts: a decoder's next tokens (each position predicts the following label, as
        `causal_lm_loss` shifts them), the encoder's masked positions."""
        return labels[:, 1:] if self.decoder else labels

    def _head_loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed cross-entropy, correct) of the MLM head at the masked positions of `hidden` (B, T, H); a
        decoder's: the LM head's next-token cross-entropy over every predicted position. Under the run's autocast
        (bf16: the head's matmuls in bf16, the cross-entropy in fp32), as one process runs it."""
        with torch.autocast(hidden.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):  # fmt: skip
            return self._head_loss_fp(hidden, labels)

    def _head_loss_fp(self, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.decoder:
            logits = self.stages[-1].head(hidden[:, :-1]).float()
            target = labels[:, 1:]
            ce = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="sum"
            )
            correct = ((logits.argmax(-1) == target) & (target != -100)).sum()
            return ce, correct.to(ce.dtype)
        selected = labels != -100
        if not bool(selected.any()):
            zero = hidden.sum() * 0.0
            return zero, zero.detach()
        logits = self.stages[-1].head(hidden[selected])  # (M, V)
        targets = labels[selected]
        ce = F.cross_entropy(logits.float(), targets, reduction="sum")
        return ce, (logits.argmax(-1) == targets).sum().to(ce.dtype)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """(mean masked-LM loss, masked tokens, correct) of a micro batch, the same on every rank of the pipeline.
        Training (grad enabled, model.train()): the schedule runs forward and backward of its micro batches,
        accumulating this micro batch's gradients (divided by grad_accum_steps); otherwise forward only."""
        import torch.distributed as dist

        keys, inputs = self._inputs(batch)
        labels = batch["labels"].to(self.device)
        n = int((self._targets(labels) != -100).sum())
        sums = torch.zeros(
            3, dtype=torch.float64, device=self.device
        )  # summed cross-entropy, correct, summed router loss of the pipeline micro batches (the last stage's)
        coef = float(getattr(self.model.config, "router_aux_loss_coef", 0.0) or 0.0) if self.moe else 0.0
        if torch.is_grad_enabled() and self.model.training:
            schedule = self._schedule_for(keys, tuple(inputs[0].shape))
            scale = 1.0 / (max(n, 1) * self.grad_accum)

            def loss_fn(output, target: torch.Tensor) -> torch.Tensor:
                # a MoE decoder's last stage: (hidden, the router-loss sums of every MoE layer, `DecoderStage`)
                hidden, router = output if self.moe else (output, None)
                ce, correct = self._head_loss(hidden, target)
                sums[0] += float(ce.detach())
                sums[1] += float(correct)
                loss = ce * scale
                if router is not None:
                    # the router loss of this pipeline micro batch (as one process computes it on these rows),
                    # its mean over the micro batches entering the micro batch's loss
                    aux = load_balancing_loss(router)
                    sums[2] += float(aux.detach())
                    loss = loss + coef * aux / (self.n_microbatches * self.grad_accum)
                return loss

            self._loss_fn = loss_fn
            args = inputs if self.first else ()
            kwargs = {"target": labels, "losses": []} if self.last else {}
            schedule.step(*args, **kwargs)
        else:
            self._forward_only(keys, inputs, labels, sums)
        last = self.pp_ranks[self.stage_rank[-1]]
        dist.broadcast(sums, src=last, group=self.pp_group)  # the last stage's numbers
        loss = sums[0].item() / max(n, 1) + coef * sums[2].item() / self.n_microbatches
        return torch.tensor(loss), n, int(sums[1].item())

    def _schedule_for(self, keys: tuple[str, ...], shape: tuple[int, ...]):
        """The schedule for micro batches of this shape (its stages' buffers are shaped on first use)."""
        from torch.distributed.pipelining import PipelineStage

        key = (keys, shape)
        if key != self._schedule_key:
            # Static shapes: the stages' inputs and outputs given up front, so the schedule does not run a forward
            # and the loss on dummies to find them (which would consume random numbers: dropout, exact resume).
            rows, length = shape[0] // self.n_microbatches, shape[1]
            hidden = torch.empty(
                rows, length, self.model.config.hidden_size, device="meta", requires_grad=True
            )
            mask = torch.empty(rows, length, device="meta")
            ids = tuple(torch.empty(rows, length, dtype=torch.long, device="meta") for _ in keys)
            # a MoE decoder's router-loss sums travel with the activations (`DecoderStage`)
            router = (
                (torch.empty(3, self.model.config.moe_num_experts, device="meta", requires_grad=True),)
                if self.moe
                else ()
            )
            stages = []
            for stage_id, module in zip(self.stage_ids, self.stages):
                module.keys = keys
                inputs = ids if stage_id == 0 else (hidden, mask, *router)
                last = stage_id == self.num_stages - 1
                outputs = ((hidden, *router) if router else hidden) if last else (hidden, mask, *router)
                stages.append(
                    PipelineStage(
                        module,
                        stage_id,
                        self.num_stages,
                        self.device,
                        input_args=inputs,
                        output_args=outputs,
                        group=self.pp_group,
                    )
                )
            self._schedule = build_schedule(
                self.schedule_name,
                stages,
                self.n_microbatches,
                lambda hidden, target: self._loss_fn(hidden, target),
            )
            self._schedule_key = key
        return self._schedule

    @torch.no_grad()
    def _forward_only(
        self,
        keys: tuple[str, ...],
        inputs: tuple[torch.Tensor, ...],
        labels: torch.Tensor,
        sums: torch.Tensor,
    ) -> None:
        """Run the stages one after the other on the whole batch (evaluation): each stage receives the hidden
        states from the rank of the stage before it; the padding mask every rank has already."""
        import torch.distributed as dist

        carried = inputs[keys.index(self.carry)]
        shape = (*carried.shape, self.model.config.hidden_size)
        here: torch.Tensor | None = None  # a stage's output for the next stage on this rank too (zbv's V)
        for stage_id, module in zip(self.stage_ids, self.stages):
            if stage_id == 0:
                module.keys = keys
                out = module(*inputs)
            else:
                if here is None:
                    h = torch.empty(shape, dtype=torch.float32, device=self.device)
                    dist.recv(h, src=self.pp_ranks[self.stage_rank[stage_id - 1]], group=self.pp_group)
                else:
                    h, here = here, None
                out = module(h, carried.to(h.dtype))
            if stage_id == self.num_stages - 1:
                ce, correct = self._head_loss(out[0] if self.moe else out, labels)
                sums[:2] += torch.tensor([float(ce), float(correct)], dtype=torch.float64, device=self.device)
            elif self.stage_rank[stage_id + 1] == self.pp_rank:
                here = out[0]
            else:
                dist.send(
                    out[0].contiguous(), dst=self.pp_ranks[self.stage_rank[stage_id + 1]], group=self.pp_group
                )

    def backward(self, loss: torch.Tensor, boundary: bool | None = None) -> None:
        """Nothing: `forward` already ran the backward of its micro batch inside the pipeline schedule."""

    # ------------------------------------------------------------------------------------- step
    def _grads(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, p.grad) for n, p in self.model.named_parameters() if p.grad is not None]

    def step(self) -> float:
        """DP average, tied-gradient sum, global norm + clipping, AdamW, LR schedule; the pre-clip norm.

        PP x EP: an expert's gradient already holds the contributions of every rank of its EP group (the
        all-to-all's backward brings them): it is summed over the ranks holding the same experts of the stage
        (none when ep_size = dp) and divided by dp, the same mean as the dense gradients' (`expert_engine`)."""
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor, Replicate

        grads = self._grads()
        if self.dp_group is not None:
            for name, g in grads:
                local = self._local(g)
                if name not in self.expert_names:
                    dist.all_reduce(local, group=self.dp_group)
                elif self.edp_group is not None:
                    dist.all_reduce(local, group=self.edp_group)
                local.div_(self.dp)
        if self.tied_group is not None:
            for name, g in grads:
                if name in self.tied:
                    dist.all_reduce(self._local(g), group=self.tied_group)
        # squared norm: TP-sharded gradients add up over the TP ranks, replicated ones count once (weight 1/tp,
        # exact for a power-of-two tp); the last stage's copy of a tied weight is counted by the first stage
        squares = torch.zeros((), dtype=torch.float64, device=self.device)
        experts = torch.zeros((), dtype=torch.float64, device=self.device)
        for name, g in grads:
            if name in self.tied and not self.first:
                continue
            if name in self.expert_names:
                experts += self._local(g).detach().double().pow(2).sum()
                continue
            replicated = not isinstance(g, DTensor) or all(isinstance(p, Replicate) for p in g.placements)
            weight = 1.0 / self.tp if replicated else 1.0
            squares += self._local(g).detach().double().pow(2).sum() * weight
        if self.expert_names:  # the stage's experts once: its EP group holds every one
            dist.all_reduce(experts, group=self.ep_group)
            squares += experts
        dist.all_reduce(squares, group=self.replica_group)
        norm = float(squares.sqrt())
        max_norm = self.recipe.optim.grad_clip or 0.0
        if max_norm > 0:
            coef = min(1.0, max_norm / (norm + 1e-6))  # torch.nn.utils.clip_grad_norm_'s factor
            for _, g in grads:
                self._local(g).mul_(coef)
        self.optimizer.step()
        if self.owned:
            self._broadcast_updates()
        self.scheduler.step()
        self.zero_grad()
        return norm

    def _replica_group(self):
        """The pp x tp ranks of this rank's data-parallel replica (one whole model: the grad norm's group)."""
        import torch.distributed as dist

        mine = None
        for dp in range(self.dp):
            ranks = [int(r) for r in self.mesh.mesh[dp].flatten().tolist()]
            group = dist.new_group(ranks)
            if self.rank in ranks:
                mine = group
        return mine

    def num_parameters(self) -> int:
        """Parameters of the whole model (every stage; a tied weight once; TP shards as whole tensors)."""
        import torch.distributed as dist

        count = sum(p.numel() for n, p in self.model.named_parameters() if self.first or n not in self.tied)
        t = torch.tensor([count], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, group=self.pp_group)
        return int(t.item())

    # ------------------------------------------------------------------------------------- checkpoints
    def layout(self) -> dict[str, Any]:
        """The layout (recorded in a checkpoint's layout.json; a resume under another one reshards, and logs it)."""
        return {
            "backend": self.backend,
            "pp_size": self.pp,
            "tp_size": self.tp,
            "schedule": self.schedule_name,
            "virtual_stages": self.virtual,
            "num_layers": self.model.config.num_hidden_layers,
            "dp_size": self.dp,
            "ep_size": self.ep,
            "zero_stage": 1 if self.owned else 0,
        }


def model_factory(config: Any, recipe: Any, tokenizer: Any) -> nn.Module:
    """`MODEL_BUILDERS["pipeline"]` of `ernie_zoo.training.backends`: the model on the meta device (no memory, so
    any size); `PipelineEngine` keeps this rank's stages and only then allocates and initialises them (and loads
    `model.init_from`'s tensors of those stages), so no rank ever holds the whole model."""
    return build_pretraining_model(config, tokenizer, recipe.seed, meta=True)


__all__ = [
    "DecoderStage",
    "EncoderStage",
    "LogicalStateEngine",
    "PipelineEngine",
    "model_factory",
    "shard_name",
]

"""The pretraining engines: model building, the masked-LM loss, backward, optimizer step, checkpoint save/load
of model + optimizer state.

`SingleDeviceEngine` is the reference backend (one process, one device): the fine-tuning `PlainEngine`
(task_engine.py) with the recipe's optimizer, mixed precision and the masked-LM loss. A sharded backend
(DeepSpeed ZeRO-3 + tensor parallelism: `ernie_zoo.training.deepspeed_engine`) implements the same small interface
and is named in `ENGINES` under the recipe's `distributed.backend`:

    model                    the ErnieZooForMaskedLM being trained (train()/eval() are called on it)
    device, rank, dp_rank, dp_world_size, is_main, backend, barrier()
    dp_sum(values)           -> the floats summed over the data-parallel ranks (logged means, eval totals)
    loss(batch)              -> (mean masked-LM loss, masked tokens, correct); moves the batch to the device
                                (optionally `last_details`: the loss's parts, see mlm.masked_lm_loss)
    backward(loss, boundary) one micro batch (the loss already divided by the accumulation steps); boundary: the
                             step's last (the one contract of `loop.TrainLoop` for every engine)
    step() -> grad norm      the optimizer step, LR schedule, zeroing the gradients (zero_grad(): nothing left)
    lr, num_parameters()
    save(dir), load(dir)     model + optimizer + scheduler state into / from a checkpoint directory

The training loop (`loop.TrainLoop`) never touches the optimizer, the loss scaler or `torch.distributed` directly.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ernie_zoo.models import ErnieZooConfig, ErnieZooForMaskedLM
from ernie_zoo.models.decoder import is_decoder_config
from ernie_zoo.models.presets import preset_config
from ernie_zoo.utils import tied_names

from .causal_lm import causal_lm_loss
from .checkpoint import load_json_state, load_optimizer_state, save_json_state, save_optimizer_state
from .core import adamw, warmup_decay
from .mlm import masked_lm_loss
from .recipe import ARCH_FIELDS, ModelArgs, PretrainRecipe
from .task_engine import PlainEngine

logger = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
#: State-dict prefix of the sentiment-word polarity head (`ErnieZooForMaskedLM.word_polarity`).
POLARITY_HEAD = "word_polarity."


# ------------------------------------------------------------------------------------------- building
def build_model_config(args: ModelArgs, vocab_size: int, max_seq_len: int | None = None) -> ErnieZooConfig:
    """The `ErnieZooConfig` a recipe's model section describes, for a tokenizer of `vocab_size` tokens."""
    if args.vocab_size is not None and args.vocab_size < vocab_size:
        raise ValueError(
            f"recipe key 'model.vocab_size' = {args.vocab_size} is smaller than the tokenizer's vocabulary "
            f"({vocab_size}); use null or a value >= {vocab_size}"
        )
    fields: dict[str, Any] = {
        k: getattr(args, k) for k in (*ARCH_FIELDS, "max_position_embeddings") if getattr(args, k) is not None
    }
    fields.update(
        vocab_size=args.vocab_size if args.vocab_size is not None else vocab_size,
        hidden_dropout_prob=args.hidden_dropout_prob,
        attention_probs_dropout_prob=args.attention_probs_dropout_prob,
        use_pinyin=args.use_pinyin,
        use_radical=args.use_radical,
        use_strokes=args.use_strokes,
        use_stroke_sequence=args.use_stroke_sequence,
        feature_fusion=args.feature_fusion,
    )
    config = preset_config(args.preset, **fields) if args.preset is not None else ErnieZooConfig(**fields)
    if max_seq_len is not None and config.max_position_embeddings < max_seq_len:
        raise ValueError(
            f"data.max_seq_len ({max_seq_len}) exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings}); raise model.max_position_embeddings"
        )
    return config


def build_model(config: ErnieZooConfig, tokenizer, seed: int) -> ErnieZooForMaskedLM:
    """A freshly initialised MLM model (deterministic given `seed`) with the tokenizer's character tables."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ErnieZooForMaskedLM(config)
    model.load_char_tables(tokenizer)
    return model


def build_model_for(recipe: PretrainRecipe, config: ErnieZooConfig, tokenizer) -> torch.nn.Module:
    """The model the recipe's backend trains: `MODEL_BUILDERS[distributed.backend]` where the backend builds
    it its own way (DeepSpeed ZeRO-3 partitions it at construction), else `build_model`."""
    builder = MODEL_BUILDERS.get(recipe.distributed.backend)
    if builder is None:
        model = build_model(config, tokenizer, recipe.seed)
        if recipe.model.init_from is not None:
            init_weights_from(model, recipe.model.init_from)
        return model
    if recipe.model.init_from is not None:
        raise ValueError(
            f"recipe key 'model.init_from' is supported by the single backend only, not "
            f"{recipe.distributed.backend!r}; consolidate and resume instead"
        )
    return _resolve(builder)(config, recipe, tokenizer)


def init_weights_from(model: torch.nn.Module, path: str) -> None:
    """Copy the weights of the from_pretrained directory `path` into `model` (same architecture and
    vocabulary, checked field by field; every tensor must match by name and shape). Safetensors only."""
    import json

    from safetensors.torch import load_file

    src = Path(path).expanduser()
    cfg_file, weights = src / "config.json", src / MODEL_FILE
    if not cfg_file.is_file() or not weights.is_file():
        raise ValueError(
            f"recipe key 'model.init_from' = {path!r}: needs config.json and {MODEL_FILE} (a from_pretrained "
            "directory or a checkpoint of ernie-pretrain)"
        )
    saved = json.loads(cfg_file.read_text(encoding="utf-8"))
    fields = (
        *ARCH_FIELDS,
        "vocab_size",
        "use_pinyin",
        "use_radical",
        "use_strokes",
        "use_stroke_sequence",
        "feature_fusion",
    )
    diff = {
        k: (saved.get(k), getattr(model.config, k))
        for k in fields
        if saved.get(k) != getattr(model.config, k)
    }
    if diff:
        detail = ", ".join(f"{k}: saved {a!r} vs recipe {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"recipe key 'model.init_from' = {path!r}: architecture differs ({detail})")
    state = load_file(str(weights))
    own = model.state_dict()
    # The polarity head (a sentiment masking stage) is optional on both sides: a run that adds it starts it
    # fresh, a run without it drops the saved one.
    dropped = [k for k in state if k.startswith(POLARITY_HEAD) and k not in own]
    for k in dropped:
        del state[k]
    # The MLM decoder is tied to the word embeddings: a saved file may hold either name.
    missing = [
        k
        for k in own
        if k not in state
        and not k.endswith(("decoder.weight", "decoder.bias"))
        and not k.startswith(POLARITY_HEAD)
    ]
    unexpected = [k for k in state if k not in own]
    bad = [k for k in state if k in own and state[k].shape != own[k].shape]
    if missing or unexpected or bad:
        raise ValueError(
            f"recipe key 'model.init_from' = {path!r}: weights do not fit (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, wrong shape {bad[:5]})"
        )
    model.load_state_dict(state, strict=False)
    logger.info("initialised %d tensors from %s", len(state), src)
    fresh = [k for k in own if k.startswith(POLARITY_HEAD) and k not in state]
    if fresh or dropped:
        logger.info(
            "word-polarity head: %s",
            "initialised fresh" if fresh else f"not used by this run, dropped {dropped}",
        )


def optimizer_and_schedule(
    recipe: PretrainRecipe, model: torch.nn.Module, fused: bool = False, cpu_adam: bool = False
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The recipe's AdamW (parameter groups by `core.decays`) and its warm-up + decay schedule over max_steps;
    `cpu_adam`: DeepSpeed's CPU AdamW (ZeRO-Offload, `core.adamw`)."""
    o = recipe.optim
    optimizer = adamw(
        model, o.lr, o.weight_decay, betas=tuple(o.betas), eps=o.eps, fused=fused, cpu_adam=cpu_adam
    )
    scheduler = warmup_decay(
        optimizer,
        warmup_steps=o.warmup_steps,
        total_steps=recipe.max_steps,
        decay=o.decay,
        min_lr_ratio=o.min_lr_ratio,
    )
    return optimizer, scheduler


def compile_layers(model: torch.nn.Module) -> int:
    """`torch.compile` every encoder layer in place (`nn.Module.compile`, dynamic shapes), the regional
    compilation PyTorch recommends for stacks of identical blocks: the layers share one compiled graph (no
    recompile per layer or per new sequence length), the masked-LM loss's data-dependent gathers stay eager, and
    backward is compiled with the forward (AOTAutograd). Returns how many layers were compiled."""
    layers = model.ernie.encoder.layer
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


# -------------------------------------------------------------------------------------------- engines
class SingleDeviceEngine(PlainEngine):
    """One process, one device: the fine-tuning `PlainEngine` (clip, step, schedule) with the recipe's AdamW +
    warmup/decay schedule, the masked-LM loss, optional autocast and fp16 loss scaling.

    Args:
        recipe: the run's recipe (optim, precision, grad clipping).
        model: the model, on any device; it is moved to `device`.
        device: where to train.
    """

    def __init__(self, recipe: PretrainRecipe, model: torch.nn.Module, device: torch.device):
        if recipe.precision == "fp16" and device.type != "cuda":
            raise ValueError("recipe key 'precision' = 'fp16' needs a CUDA device; use fp32 or bf16 on CPU")
        self.recipe = recipe
        model = model.to(device)
        if getattr(recipe, "torch_compile", False):
            compile_layers(model)
        # fused: one kernel per step over all parameters (CPU and CUDA); what HF Trainer uses by default too
        optimizer, scheduler = optimizer_and_schedule(recipe, model, fused=device.type in ("cpu", "cuda"))
        super().__init__(model, optimizer, scheduler, recipe.optim.grad_clip or 0.0, device)
        self.scaler = torch.amp.GradScaler("cuda") if recipe.precision == "fp16" else None
        self._dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
        """(mean masked-LM loss, masked tokens, correct predictions) of a collated batch; with a sentiment stage
        the loss adds `masking.polarity_weight` x the word-polarity loss, and `last_details` holds the parts."""
        details: dict[str, float] = {}
        if is_decoder_config(self.model.config):  # an ERNIE 4.5 decoder: next-token loss on packed rows
            with self.autocast():
                out = causal_lm_loss(self.model, to_device(batch, self.device), details)
            self.last_details = details
            return out
        with self.autocast():
            out = masked_lm_loss(
                self.model,
                to_device(batch, self.device),
                self.recipe.sparse_last_layer,
                polarity_weight=self.recipe.masking.polarity_weight,
                details=details,
            )
        self.last_details = details
        return out

    def num_parameters(self) -> int:
        """Parameters of the model (tied weights once)."""
        return sum(p.numel() for p in self.model.parameters())

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass (mixed precision, or nothing in fp32)."""
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype)

    def step(self) -> float:
        """`PlainEngine.step` (unscale, clip, update, schedule), then zero the grads; the pre-clip grad norm."""
        norm = super().step()
        self.zero_grad()
        return norm

    def save(self, directory: Path) -> None:
        """Model (config.json + model.safetensors), optimizer, scheduler and loss-scaler state."""
        save_model_weights(self.model, directory)
        save_optimizer_state(self.optimizer, directory)
        save_json_state(self.scheduler, directory / "scheduler.json", "LR scheduler")
        if self.scaler is not None:
            save_json_state(self.scaler, directory / "scaler.json", "GradScaler")

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote (weights bit for bit)."""
        load_model_weights(self.model, directory / MODEL_FILE)
        load_optimizer_state(self.optimizer, directory)
        load_json_state(self.scheduler, directory / "scheduler.json")
        if self.scaler is not None:
            load_json_state(self.scaler, directory / "scaler.json")


def save_model_weights(model: torch.nn.Module, directory: str | Path) -> None:
    """`config.json` + `model.safetensors` in the layout of `save_pretrained` (tied copies stored once, under
    their first name), so `ErnieZooForMaskedLM.from_pretrained(checkpoint_dir)` loads a checkpoint."""
    directory = Path(directory)
    model.config.save_pretrained(directory)
    tied = tied_names(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(directory / MODEL_FILE), metadata={"format": "pt"})


def load_model_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load a save_pretrained safetensors file into `model`; only tied weights may be absent from the file."""
    state = load_file(str(path))
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in tied_names(model)]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{path} does not match the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's tensors on `device` (a no-op on CPU)."""
    if device.type == "cpu":
        return batch
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
    }


#: distributed.backend -> the engine's constructor `(recipe, model, device)`, or "module:attribute" imported on
#: use (so a backend's heavy imports, e.g. deepspeed, happen only when it is selected).
ENGINES: dict[str, Any] = {
    "single": SingleDeviceEngine,
    "deepspeed": "ernie_zoo.training.deepspeed_engine:engine_factory",
    "pipeline": "ernie_zoo.training.pipeline_engine:engine_factory",
}

#: distributed.backend -> model builder `(config, recipe, tokenizer)` for backends that build the model their
#: own way (ZeRO-3: partitioned at construction, never whole on one rank); others use `build_model`.
MODEL_BUILDERS: dict[str, Any] = {
    "deepspeed": "ernie_zoo.training.deepspeed_engine:model_factory",
}


def _resolve(factory: Any) -> Any:
    """A registry entry: the callable itself, or "module:attribute" imported now."""
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
    return factory


def make_engine(recipe: PretrainRecipe, model: torch.nn.Module, device: torch.device) -> SingleDeviceEngine:
    """The engine of `recipe.distributed.backend`."""
    try:
        factory = ENGINES[recipe.distributed.backend]
    except KeyError:
        raise ValueError(
            f"recipe key 'distributed.backend' = {recipe.distributed.backend!r}: one of {sorted(ENGINES)}"
        ) from None
    return _resolve(factory)(recipe, model, device)


__all__ = [
    "ENGINES",
    "MODEL_BUILDERS",
    "SingleDeviceEngine",
    "build_model",
    "build_model_for",
    "build_model_config",
    "load_model_weights",
    "save_model_weights",
    "to_device",
    "make_engine",
    "optimizer_and_schedule",
]

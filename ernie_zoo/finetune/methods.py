"""Adaptation methods: full fine-tuning, peft methods, and our bottleneck adapters, each one registered `Method`.

A method is one entry, the way peft registers its tuners: a name, a builder turning the recipe's `method:`
section into the method's config (a peft config, or a `BottleneckConfig`), the tasks it supports (and why not
the others), its default learning rate and whether it merges into the base weights. `register_method` makes it
a valid `method.method` of every recipe, listed by `ernie-finetune --help`; nothing else needs to change.

What works with ErnieZoo models (peft 0.21.2), and why the rest does not:

| method         | seq. cls | token cls | generation | mergeable | notes                                        |
|----------------|----------|-----------|------------|-----------|----------------------------------------------|
| full           | yes      | yes       | yes        | -         |                                              |
| lora           | yes      | yes       | yes        | yes       | query/key/value/dense (+ fusion if concat)   |
| adalora        | yes      | yes       | yes        | yes       | rank budget re-allocated during training     |
| ia3            | yes      | yes       | yes        | yes       | keys, values, FFN output (feed-forward)      |
| loha, lokr     | yes      | yes       | yes        | yes       |                                              |
| prompt_tuning  | yes      | no        | yes        | no        | feeds inputs_embeds: char features skipped   |
| p_tuning       | yes      | no        | yes        | no        | same                                         |
| prefix_tuning  | no       | no        | yes        | no        | needs a KV cache: only the causal decoder    |
| houlsby        | yes      | yes       | yes        | no        | bottleneck after attention and FFN outputs   |
| pfeiffer       | yes      | yes       | yes        | no        | bottleneck after the FFN output              |

Prompt learning on token classification fails inside peft: the virtual tokens are prepended to the inputs but
not to the token labels. Prefix tuning needs past key values, which only the causal decoder accepts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from ernie_zoo.models.decoder import is_decoder_config
from ernie_zoo.training.core import numel

from .bottleneck import BottleneckConfig, BottleneckModel

logger = logging.getLogger(__name__)

PEFT_TASK_TYPES = {
    "sequence_classification": "SEQ_CLS",
    "token_classification": "TOKEN_CLS",
    "generation": "CAUSAL_LM",
    "instruction": "CAUSAL_LM",
    "preference": "CAUSAL_LM",
    # peft has no task type for a masked-LM correction head with a detector: its plain PeftModel passes every
    # argument through to the model
    "text_correction": None,
    # nor for a span extractor (its start/end head is `classifier`, saved whole like the other heads)
    "information_extraction": None,
}


@dataclass(frozen=True)
class MethodContext:
    """What a config builder may read besides the recipe's `method:` section."""

    model: nn.Module
    task: str
    total_steps: int | None
    modules_to_save: list[str]
    """The modules trained fully (the task head unless the recipe names them): peft's `modules_to_save`."""

    @property
    def task_type(self) -> str | None:
        return PEFT_TASK_TYPES[self.task]

    def peft_kwargs(self) -> dict[str, Any]:
        """What every peft config of this run takes: task_type and modules_to_save."""
        return dict(task_type=self.task_type, modules_to_save=self.modules_to_save or None)

    def targets(self, method_args) -> list[str]:
        """The recipe's `target_modules`, else `default_target_modules`."""
        return method_args.target_modules or default_target_modules(self.model)


def _peft(name: str) -> Any:
    """peft's `name` (imported on first use: `import ernie_zoo.finetune` stays fast)."""
    import peft

    return getattr(peft, name)


def _peft_wrap(model: nn.Module, config: Any) -> nn.Module:
    return _peft("get_peft_model")(model, config)


@dataclass(frozen=True)
class Method:
    """One fine-tuning method: everything the recipe, the loop and `--help` need to know about it."""

    name: str
    config: Callable[[Any, MethodContext], Any] | None
    """(the recipe's MethodArgs, context) -> the method's config, which `wrap` applies; None: full fine-tuning
    (every weight trains, nothing wraps the model)."""
    learning_rate: float = 1e-3
    """The peak learning rate when the recipe's train.learning_rate is null."""
    tasks: tuple[str, ...] | None = None
    """The tasks it supports; None: every task."""
    unsupported: str = ""
    """Why the other tasks cannot work, formatted with {name} and {task} (spaces for underscores)."""
    mergeable: bool = False
    """Whether the trained adapter folds into the base weights (`merge_and_unload`)."""
    deepspeed: bool = False
    """Whether distributed.backend deepspeed runs it (tested under ZeRO-3 against one process)."""
    wrap: Callable[[nn.Module, Any], nn.Module] = _peft_wrap
    """(model, config) -> the model to train; default: `peft.get_peft_model`."""
    warning: str = ""
    """Logged when the method is applied."""

    def supports(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    def summary(self) -> str:
        """One line of `ernie-finetune --help`."""
        tasks = ", ".join(self.tasks) if self.tasks else "every task"
        merges = "; merges into the base weights" if self.mergeable else ""
        return f"{self.name}: {tasks}; learning rate {self.learning_rate:g}{merges}"


#: The registered methods by name, in registration order.
METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Register `method` under its name (a second registration of a name is an error)."""
    if method.name in METHODS:
        raise ValueError(f"fine-tuning method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


def methods_help() -> str:
    """The registered methods, one per line (the end of `ernie-finetune --help`)."""
    return "methods (method.method):\n" + "\n".join(f"  {m.summary()}" for m in METHODS.values())


@dataclass(frozen=True)
class MethodInfo:
    name: str
    mergeable: bool
    trainable: int
    total: int
    modules_to_save: tuple[str, ...] = ()
    """The modules trained fully: the recipe's modules_to_save (else the task head) and the newly initialised ones."""

    @property
    def fraction(self) -> float:
        return self.trainable / self.total if self.total else 0.0


def default_learning_rate(method: str) -> float:
    return get_method(method).learning_rate


#: LoRA's default targets on an ERNIE 4.5 decoder: the attention projections and the SwiGLU MLPs. On an MoE model
#: peft 0.21 maps the MLP names onto transformers' fused routed-expert weights (`mlp.experts`, LoRA on parameters).
DECODER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def default_target_modules(model: nn.Module) -> list[str]:
    """query, key, value and every `dense` (attention output, FFN in/out, pooler), plus the concat-fusion Linear;
    on an ERNIE 4.5 decoder `DECODER_TARGETS`."""
    config = getattr(model, "config", None)
    if is_decoder_config(config):
        return list(DECODER_TARGETS)
    targets = ["query", "key", "value", "dense"]
    if (
        config is not None
        and getattr(config, "feature_fusion", "add") == "concat"
        and config.use_char_features
    ):
        targets.append("fusion")
    return targets


def default_modules_to_save(task: str, model: nn.Module) -> list[str]:
    if task in ("generation", "instruction", "preference"):
        return []  # the LM head is tied to the (frozen) word embeddings (a decoder's untied one stays frozen)
    if task == "text_correction":
        return ["detector"]  # the correction head is the (tied) MLM head, as for generation
    modules = ["classifier"]
    if hasattr(model, "crf"):
        modules.append("crf")
    return modules


def check_supported(method: str, task: str) -> None:
    """Raise ValueError, with the reason, for method/task pairs that cannot work."""
    m = get_method(method)
    if not m.supports(task):
        reason = m.unsupported or f"{{name}} supports {', '.join(m.tasks or ())} only"
        raise ValueError(reason.format(name=method, task=task.replace("_", " ")))


def apply_method(
    model: nn.Module,
    method_args,
    task: str,
    total_steps: int | None = None,
    extra_modules_to_save: list[str] | None = None,
) -> tuple[nn.Module, MethodInfo]:
    """Wrap/freeze `model` for `method_args.method`; returns (model to train, info on trainable parameters).

    `extra_modules_to_save`: modules trained fully besides `method_args.modules_to_save` (or the task head),
    e.g. the newly initialised ones of `loop.fresh_modules`.
    """
    check_supported(method_args.method, task)
    method = METHODS[method_args.method]
    to_save = method_args.modules_to_save
    if to_save is None:
        to_save = default_modules_to_save(task, model)
    to_save = list(dict.fromkeys([*to_save, *(extra_modules_to_save or [])]))
    if method.config is None:
        for p in model.parameters():
            p.requires_grad_(True)
        wrapped = model
    else:
        wrapped = method.wrap(
            model, method.config(method_args, MethodContext(model, task, total_steps, to_save))
        )
    trainable = sum(numel(p) for p in wrapped.parameters() if p.requires_grad)
    total = sum(numel(p) for p in wrapped.parameters())  # a ZeRO-3 partitioned model counted whole
    if method.warning:
        logger.warning(method.warning, method.name)
    info = MethodInfo(method.name, method.mergeable, trainable, total, tuple(to_save))
    logger.info(
        "method %s: %d of %d parameters trainable (%.3f%%)",
        method.name,
        trainable,
        total,
        100 * info.fraction,
    )
    return wrapped, info


# ------------------------------------------------------------------------------------------------ the methods
def _lora(a, c: MethodContext):
    return _peft("LoraConfig")(
        r=a.lora_r,
        lora_alpha=a.lora_alpha,
        lora_dropout=a.lora_dropout,
        target_modules=c.targets(a),
        **c.peft_kwargs(),
    )


def _adalora(a, c: MethodContext):
    steps = c.total_steps
    if not steps:
        raise ValueError("adalora needs the total number of training steps")
    # Budget schedule: warm up at init_r for 10% of steps, prune towards target_r until 70%, then fix.
    return _peft("AdaLoraConfig")(
        init_r=a.lora_r,
        target_r=max(1, a.lora_r // 2),
        lora_alpha=a.lora_alpha,
        lora_dropout=a.lora_dropout,
        target_modules=c.targets(a),
        total_step=steps,
        tinit=max(1, steps // 10),
        tfinal=max(1, steps * 3 // 10),
        deltaT=max(1, steps // 20),
        **c.peft_kwargs(),
    )


def _ia3(a, c: MethodContext):
    if a.target_modules:
        targets, feedforward = a.target_modules, []
    else:
        # IA3 (Liu et al. 2022) rescales keys, values and the FFN's inner activations: the input of the FFN
        # output projection (layer.N.output.dense, not attention.output.dense).
        targets = r".*layer\.\d+\.(attention\.self\.(key|value)|output\.dense)"
        feedforward = r".*layer\.\d+\.output\.dense"
    return _peft("IA3Config")(target_modules=targets, feedforward_modules=feedforward, **c.peft_kwargs())


def _loha(a, c: MethodContext):
    return _peft("LoHaConfig")(r=a.lora_r, alpha=a.lora_alpha, target_modules=c.targets(a), **c.peft_kwargs())


def _lokr(a, c: MethodContext):
    return _peft("LoKrConfig")(r=a.lora_r, alpha=a.lora_alpha, target_modules=c.targets(a), **c.peft_kwargs())


def _prompt_tuning(a, c: MethodContext):
    return _peft("PromptTuningConfig")(num_virtual_tokens=a.num_virtual_tokens, **c.peft_kwargs())


def _p_tuning(a, c: MethodContext):
    return _peft("PromptEncoderConfig")(
        encoder_hidden_size=c.model.config.hidden_size,
        num_virtual_tokens=a.num_virtual_tokens,
        **c.peft_kwargs(),
    )


def _prefix_tuning(a, c: MethodContext):
    return _peft("PrefixTuningConfig")(num_virtual_tokens=a.num_virtual_tokens, **c.peft_kwargs())


def _bottleneck(mode: str) -> Callable[[Any, MethodContext], BottleneckConfig]:
    def build(a, c: MethodContext) -> BottleneckConfig:
        return BottleneckConfig(
            mode=mode,
            reduction_factor=a.reduction_factor,
            non_linearity=a.adapter_non_linearity,
            modules_to_save=c.modules_to_save,
            task_type=c.task_type,
            base_model_name_or_path=getattr(c.model, "name_or_path", None) or None,
        )

    return build


_PROMPT_WHY = (
    "{name} cannot work for {task} in peft 0.21.2: the virtual tokens are prepended to the inputs but not to the "
    "token labels, so logits and labels differ in length. Use lora or an adapter."
)
_PROMPT_WARNING = (
    "%s feeds inputs_embeds to the model, so pinyin/radical/stroke features are not used in this mode (see "
    "ErnieZooModel.forward)"
)
_PROMPT_TASKS = ("sequence_classification", "generation")

register_method(Method("full", None, learning_rate=5e-5, deepspeed=True))
register_method(Method("lora", _lora, mergeable=True, deepspeed=True))
register_method(Method("adalora", _adalora, mergeable=True))
register_method(Method("loha", _loha, mergeable=True))
register_method(Method("lokr", _lokr, mergeable=True))
register_method(Method("ia3", _ia3, mergeable=True))
register_method(
    Method("prompt_tuning", _prompt_tuning, 3e-2, _PROMPT_TASKS, _PROMPT_WHY, warning=_PROMPT_WARNING)
)
register_method(Method("p_tuning", _p_tuning, 3e-2, _PROMPT_TASKS, _PROMPT_WHY, warning=_PROMPT_WARNING))
register_method(
    Method(
        "prefix_tuning",
        _prefix_tuning,
        3e-2,
        ("generation",),
        "{name} cannot work for classification with ErnieZoo models: peft 0.21.2 passes the prefix as past key "
        "values, which only the causal decoder (task: generation) accepts. Use lora or prompt_tuning.",
    )
)
register_method(Method("houlsby", _bottleneck("houlsby"), wrap=BottleneckModel))
register_method(Method("pfeiffer", _bottleneck("pfeiffer"), wrap=BottleneckModel))


__all__ = [
    "METHODS",
    "Method",
    "MethodContext",
    "MethodInfo",
    "PEFT_TASK_TYPES",
    "apply_method",
    "check_supported",
    "default_learning_rate",
    "default_modules_to_save",
    "default_target_modules",
    "get_method",
    "methods_help",
    "register_method",
]

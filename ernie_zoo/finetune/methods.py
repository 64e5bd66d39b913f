"""Adaptation methods: full fine-tuning, peft methods, and our bottleneck adapters, behind one `apply_method`.

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
from dataclasses import dataclass

from torch import nn

from ernie_zoo.training.core import numel

from .bottleneck import BottleneckConfig, BottleneckModel

logger = logging.getLogger(__name__)

PEFT_TASK_TYPES = {
    "sequence_classification": "SEQ_CLS",
    "token_classification": "TOKEN_CLS",
    "generation": "CAUSAL_LM",
    # peft has no task type for a masked-LM correction head with a detector: its plain PeftModel passes every
    # argument through to the model
    "text_correction": None,
}
LORA_LIKE = ("lora", "adalora", "loha", "lokr", "ia3")
PROMPT_METHODS = ("prompt_tuning", "p_tuning", "prefix_tuning")
BOTTLENECK = ("houlsby", "pfeiffer")
METHODS = ("full", *LORA_LIKE, *PROMPT_METHODS, *BOTTLENECK)


@dataclass(frozen=True)
class MethodInfo:
    name: str
    mergeable: bool
    trainable: int
    total: int

    @property
    def fraction(self) -> float:
        return self.trainable / self.total if self.total else 0.0


def default_learning_rate(method: str) -> float:
    if method == "full":
        return 5e-5
    if method in PROMPT_METHODS:
        return 3e-2
    return 1e-3


def default_target_modules(model: nn.Module) -> list[str]:
    """query, key, value and every `dense` (attention output, FFN in/out, pooler), plus the concat-fusion Linear."""
    targets = ["query", "key", "value", "dense"]
    config = getattr(model, "config", None)
    if (
        config is not None
        and getattr(config, "feature_fusion", "add") == "concat"
        and config.use_char_features
    ):
        targets.append("fusion")
    return targets


def default_modules_to_save(task: str, model: nn.Module) -> list[str]:
    if task == "generation":
        return []  # the LM head is tied to the (frozen) word embeddings
    if task == "text_correction":
        return ["detector"]  # the correction head is the (tied) MLM head, as for generation
    modules = ["classifier"]
    if hasattr(model, "crf"):
        modules.append("crf")
    return modules


def check_supported(method: str, task: str) -> None:
    """Raise ValueError, with the reason, for method/task pairs that cannot work."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "prefix_tuning" and task != "generation":
        raise ValueError(
            "prefix_tuning cannot work for classification with ErnieZoo models: peft 0.21.2 passes the prefix as "
            "past key values, which only the causal decoder (task: generation) accepts. Use lora or prompt_tuning."
        )
    if method in ("prompt_tuning", "p_tuning") and task in ("token_classification", "text_correction"):
        raise ValueError(
            f"{method} cannot work for {task.replace('_', ' ')} in peft 0.21.2: the virtual tokens are prepended "
            "to the inputs but not to the token labels, so logits and labels differ in length. Use lora or an "
            "adapter."
        )


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
    method = method_args.method
    check_supported(method, task)
    to_save = method_args.modules_to_save
    if to_save is None:
        to_save = default_modules_to_save(task, model)
    to_save = list(dict.fromkeys([*to_save, *(extra_modules_to_save or [])]))
    if method == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        wrapped = model
    elif method in BOTTLENECK:
        config = BottleneckConfig(
            mode=method,
            reduction_factor=method_args.reduction_factor,
            non_linearity=method_args.adapter_non_linearity,
            modules_to_save=to_save,
            task_type=PEFT_TASK_TYPES[task],
            base_model_name_or_path=getattr(model, "name_or_path", None) or None,
        )
        wrapped = BottleneckModel(model, config)
    else:
        import peft

        wrapped = peft.get_peft_model(model, _peft_config(model, method_args, task, total_steps, to_save))
    trainable = sum(numel(p) for p in wrapped.parameters() if p.requires_grad)
    total = sum(numel(p) for p in wrapped.parameters())  # a ZeRO-3 partitioned model counted whole
    if method in ("prompt_tuning", "p_tuning"):
        logger.warning(
            "%s feeds inputs_embeds to the model, so pinyin/radical/stroke features are not used in this mode "
            "(see ErnieZooModel.forward)",
            method,
        )
    info = MethodInfo(method, method in LORA_LIKE, trainable, total)
    logger.info(
        "method %s: %d of %d parameters trainable (%.3f%%)", method, trainable, total, 100 * info.fraction
    )
    return wrapped, info


def _peft_config(model: nn.Module, a, task: str, total_steps: int | None, to_save: list[str]):
    import peft

    task_type = PEFT_TASK_TYPES[task]
    targets = a.target_modules or default_target_modules(model)
    common = dict(task_type=task_type, modules_to_save=to_save or None)
    if a.method == "lora":
        return peft.LoraConfig(
            r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout, target_modules=targets, **common
        )
    if a.method == "adalora":
        if not total_steps:
            raise ValueError("adalora needs the total number of training steps")
        # Budget schedule: warm up at init_r for 10% of steps, prune towards target_r until 70%, then fix.
        return peft.AdaLoraConfig(
            init_r=a.lora_r,
            target_r=max(1, a.lora_r // 2),
            lora_alpha=a.lora_alpha,
            lora_dropout=a.lora_dropout,
            target_modules=targets,
            total_step=total_steps,
            tinit=max(1, total_steps // 10),
            tfinal=max(1, total_steps * 3 // 10),
            deltaT=max(1, total_steps // 20),
            **common,
        )
    if a.method == "ia3":
        if a.target_modules:
            ia3_targets, feedforward = a.target_modules, []
        else:
            # IA3 (Liu et al. 2022) rescales keys, values and the FFN's inner activations: the input of the FFN
            # output projection (layer.N.output.dense, not attention.output.dense).
            ia3_targets = r".*layer\.\d+\.(attention\.self\.(key|value)|output\.dense)"
            feedforward = r".*layer\.\d+\.output\.dense"
        return peft.IA3Config(target_modules=ia3_targets, feedforward_modules=feedforward, **common)
    if a.method == "loha":
        return peft.LoHaConfig(r=a.lora_r, alpha=a.lora_alpha, target_modules=targets, **common)
    if a.method == "lokr":
        return peft.LoKrConfig(r=a.lora_r, alpha=a.lora_alpha, target_modules=targets, **common)
    prompt_common = dict(
        task_type=task_type, num_virtual_tokens=a.num_virtual_tokens, modules_to_save=to_save or None
    )
    if a.method == "prompt_tuning":
        return peft.PromptTuningConfig(**prompt_common)
    if a.method == "p_tuning":
        return peft.PromptEncoderConfig(encoder_hidden_size=model.config.hidden_size, **prompt_common)
    return peft.PrefixTuningConfig(**prompt_common)


__all__ = [
    "BOTTLENECK",
    "LORA_LIKE",
    "METHODS",
    "MethodInfo",
    "PEFT_TASK_TYPES",
    "PROMPT_METHODS",
    "apply_method",
    "check_supported",
    "default_learning_rate",
    "default_modules_to_save",
    "default_target_modules",
]

"""ERNIE 4.5 decoders (Baidu 2025, "ERNIE 4.5 Technical Report"): transformers' own dense and MoE causal LMs,
registered in the project's registry as they are, so a `baidu/ERNIE-4.5-0.3B-PT`-format directory (config.json
with `architectures: ["Ernie4_5ForCausalLM"]`, safetensors) loads unchanged, with plain
`AutoModelForCausalLM.from_pretrained` and without trust_remote_code. Nothing here re-implements a layer.

    dense  Ernie4_5ForCausalLM:      embed -> L x [RMSNorm, GQA attention (RoPE), RMSNorm, SwiGLU MLP] -> RMSNorm -> lm_head
    MoE    Ernie4_5_MoeForCausalLM:  the same, with the MLP of layers moe_layer_start_index..end (every
           moe_layer_interval-th) replaced by a router over moe_num_experts SwiGLU experts, top moe_k per token,
           plus moe_num_shared_experts always-on experts

Presets (0.3B, 21B-A3B, 300B-A47B shapes and smaller/larger ones) are in `presets.DECODER_PRESETS`. The
pinyin/radical/stroke character features are an encoder option only (docs/decoders.md).

Chat format: `chat_template_for(tokenizer)` is the template instruction fine-tuning (`ernie-finetune --task
instruction`) saves with the tokenizer -- the tokenizer's own if it has one, else ERNIE 4.5's `User: ... /
Assistant: ...` turns between the tokenizer's begin and end tokens; `chat_prompt_ids` is what a prompt becomes.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM, Ernie4_5Config, Ernie4_5ForCausalLM
from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeSparseMoeBlock

from .registry import register

register("text-generation", what="an ERNIE 4.5 dense decoder")(Ernie4_5ForCausalLM)
register("text-generation", what="an ERNIE 4.5 MoE decoder")(Ernie4_5_MoeForCausalLM)

DECODER_CLASSES: dict[type, type] = {
    Ernie4_5Config: Ernie4_5ForCausalLM,
    Ernie4_5_MoeConfig: Ernie4_5_MoeForCausalLM,
}

#: config.json `model_type`s of the decoders
DECODER_MODEL_TYPES = frozenset(config.model_type for config in DECODER_CLASSES)


def is_decoder_config(config: Any) -> bool:
    """Whether `config` is an ERNIE 4.5 decoder's (dense or MoE)."""
    return type(config) in DECODER_CLASSES


def is_moe(config: Any) -> bool:
    return isinstance(config, Ernie4_5_MoeConfig)


def decoder_config(moe: bool = False, **fields: Any):
    """transformers' `Ernie4_5_MoeConfig` (moe) or `Ernie4_5Config` with `fields` over its defaults."""
    return (Ernie4_5_MoeConfig if moe else Ernie4_5Config)(**fields)


def build_decoder(config: Any, device: str | None = None):
    """The causal LM of `config`, random weights; device "meta" allocates nothing (any size)."""
    cls = DECODER_CLASSES.get(type(config))
    if cls is None:
        raise TypeError(f"not an ERNIE 4.5 decoder config: {type(config).__name__}")
    if device is None:
        return cls(config)
    with torch.device(device):
        return cls(config)


#: ERNIE 4.5's chat format (`User: ` / `Assistant: ` turns after the begin token, each answer closed by the end
#: token), as a Jinja template with the tokenizer's begin / end token texts in place of BOS / EOS: the zoo's
#: character tokenizer has [CLS] / [SEP] and no bos_token / eos_token for a template to refer to.
CHAT_TEMPLATE = (
    "{{- 'BOS' -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] + '\n' }}"
    "{%- elif message['role'] == 'user' -%}{{ 'User: ' + message['content'] + '\n' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'Assistant: ' + message['content'] + 'EOS' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant: ' }}{%- endif -%}"
)


def begin_end_tokens(tokenizer) -> tuple[str, str]:
    """(begin, end) token texts of a decoder's sequences: bos / eos, else [CLS] / [SEP] (the zoo's tokenizer, as
    decoder pretraining uses them)."""
    bos = tokenizer.bos_token or tokenizer.cls_token
    eos = tokenizer.eos_token or tokenizer.sep_token
    if bos is None or eos is None:
        raise ValueError(
            "a decoder's chat format needs a tokenizer with begin and end tokens (bos/eos or [CLS]/[SEP])"
        )
    return bos, eos


def chat_template_for(tokenizer) -> str:
    """The tokenizer's own chat template if it has one (an instruction-tuned model keeps its format), else
    `CHAT_TEMPLATE` with its begin / end tokens."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.chat_template
    bos, eos = begin_end_tokens(tokenizer)
    for token in (bos, eos):
        if "'" in token or "\\" in token:
            raise ValueError(f"cannot write the token {token!r} into a chat template")
    return CHAT_TEMPLATE.replace("'BOS'", f"'{bos}'").replace("'EOS'", f"'{eos}'")


def chat_prompt_ids(tokenizer, prompt: str | list[dict[str, str]]) -> list[int]:
    """The ids a decoder fine-tuned by `InstructionObjective` answers `prompt` from: the chat template applied to one
    user turn (or to a conversation: a list of {"role", "content"} messages) with the generation prompt, tokenized
    without adding special tokens -- what `tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
    add_generation_prompt=True)` gives."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def chat_ids_and_labels(
    tokenizer, messages: list[dict[str, str]], ignore: int = -100
) -> tuple[list[int], list[int]]:
    """(input ids, labels) of a conversation in the chat template: labels are the ids of every assistant turn (its
    content and what the template closes it with, the end token) and `ignore` elsewhere (system and user turns,
    the template's `Assistant: ` prompts). Turns after the last assistant turn are left out (nothing to learn).

    The text is `apply_chat_template(messages)`'s, tokenized piece by piece at the turn boundaries (each assistant
    turn on its own, as it is generated after its prompt): a template whose text for the first k turns is not a
    prefix of its text for k + 1 turns cannot be cut so, and is an error."""

    def render(turns: list[dict[str, str]], prompt: bool) -> str:
        if not turns:
            return ""
        return tokenizer.apply_chat_template(turns, add_generation_prompt=prompt, tokenize=False)

    ids: list[int] = []
    labels: list[int] = []
    consumed = ""
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        head, full = render(messages[:k], True), render(messages[: k + 1], False)
        if not head.startswith(consumed) or not full.startswith(head):
            raise ValueError(
                "the tokenizer's chat template does not render a conversation as a prefix of its continuation, so "
                "its assistant turns cannot be told apart; give the tokenizer a template that does (or none)"
            )
        for text, learnt in ((head[len(consumed) :], False), (full[len(head) :], True)):
            piece = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            ids += piece
            labels += piece if learnt else [ignore] * len(piece)
        consumed = full
    return ids, labels


def moe_blocks(model) -> list[Ernie4_5_MoeSparseMoeBlock]:
    """The sparse MoE blocks of `model`, in layer order (none for a dense model)."""
    return [m for m in model.modules() if isinstance(m, Ernie4_5_MoeSparseMoeBlock)]


def router_load_sums(router_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """The partial sums of transformers' load-balancing loss (`load_balancing_loss_func`, no attention mask) over one
    MoE layer's router logits (tokens, E): a (3, E) tensor, row 0 the top-k assignments per expert (no gradient),
    row 1 the routing probabilities summed per expert, row 2 the tokens (in every column). The loss pools its
    sums over every MoE layer before it multiplies them, so a pipeline stage adds its layers' sums to the ones it
    received and the last stage takes `load_balancing_loss` of the total: the one-process loss of that batch.

        aux = E x sum_e (assignments_e / rows) x (probabilities_e / rows)
    """
    probs = torch.softmax(router_logits.float(), dim=-1)  # (tokens, E)
    num_experts = probs.shape[-1]
    with torch.no_grad():
        _, chosen = torch.topk(probs, top_k, dim=-1)
        counts = torch.zeros(num_experts, device=probs.device).index_add_(
            0, chosen.reshape(-1), torch.ones(chosen.numel(), device=probs.device)
        )
        rows = torch.full((num_experts,), float(probs.shape[0]), device=probs.device)
    return torch.stack([counts, probs.sum(0), rows])


def load_balancing_loss(sums: torch.Tensor) -> torch.Tensor:
    """transformers' load-balancing loss from the `router_load_sums` added up over every MoE layer."""
    counts, probs, rows = sums
    return (counts / rows[0] * (probs / rows[0])).sum() * sums.shape[-1]


def decoder_counts(model) -> dict[str, int]:
    """Exact counts of a decoder (a meta-device one costs nothing), tied weights once:

    total     every parameter
    experts   the routed experts' parameters (what expert parallelism splits)
    active    what one token uses: every parameter except the routed experts it is not sent to, i.e.
              total - experts + experts x top_k / num_experts (router, shared experts, attention, embeddings
              and lm_head all count as active)
    moe_layers  layers with a sparse MoE block
    """
    total = sum(p.numel() for p in model.parameters())
    experts = active_experts = 0
    blocks = moe_blocks(model)
    for block in blocks:
        n = sum(p.numel() for p in block.experts.parameters())
        if n % block.num_experts:
            raise AssertionError(
                f"expert parameters {n} do not split evenly over {block.num_experts} experts"
            )
        experts += n
        active_experts += n // block.num_experts * block.top_k
    return {
        "total": total,
        "experts": experts,
        "active": total - experts + active_experts,
        "moe_layers": len(blocks),
    }


__all__ = [
    "DECODER_CLASSES",
    "DECODER_MODEL_TYPES",
    "CHAT_TEMPLATE",
    "begin_end_tokens",
    "build_decoder",
    "chat_ids_and_labels",
    "chat_prompt_ids",
    "chat_template_for",
    "decoder_config",
    "decoder_counts",
    "is_decoder_config",
    "is_moe",
    "load_balancing_loss",
    "moe_blocks",
    "router_load_sums",
]

"""Expert parallelism of the ERNIE 4.5 MoE decoder on gloo CPU ranks, through transformers' own EP plan
(`Ernie4_5_MoeConfig.base_model_ep_plan`: the fused experts sharded on their expert axis, `ep_dispatch_experts`
routing tokens with all-to-alls) and FSDP2, as `from_pretrained(..., distributed_config=DistributedConfig(
fsdp_size=2, ep_size=2, ep_implementation="all_to_all"))` builds it. Nothing of ours is in the way: this is the
evidence that EP works on these classes on CPU, and the layout docs/decoders.md plans for `ernie-pretrain`.

2 ranks, each with its own row of 16 tokens (4 experts, top-2, one shared expert, the router's
load-balancing loss in the loss) against one process running the two rows as two micro batches: each rank's
loss equals the row's (1e-6 relative), the gradients (FSDP's mean over the ranks) equal the single process's
mean to 1e-6, and after one AdamW step (lr 1e-2) every weight equals the single process's to 1e-5 (Adam's first
step divides by |g| + eps: a 1e-10 grad difference on a 1e-8 grad moves a weight by ~1e-6); each rank holds 2
of the 4 experts of the MoE layer. The worker is this file run under torchrun (`--worker`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

VOCAB, SEQ, LR = 300, 16, 1e-2


def _config():
    from ernie_zoo.models.decoder import decoder_config

    return decoder_config(
        True,
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        moe_num_experts=4,
        moe_k=2,
        moe_num_shared_experts=1,
        moe_intermediate_size=16,
        moe_layer_start_index=1,
        moe_layer_end_index=1,
        router_aux_loss_coef=0.1,
    )


def _rows() -> torch.Tensor:
    return torch.randint(5, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(5))


def _loss(model, ids: torch.Tensor) -> torch.Tensor:
    # labels: transformers' shifted LM loss + router_aux_loss_coef x the load-balancing loss
    return model(input_ids=ids, labels=ids, output_router_logits=True, use_cache=False).loss


@pytest.mark.distributed
@pytest.mark.slow
def test_expert_parallel_two_ranks_match_single_process(tmp_path):
    from safetensors.torch import load_file

    from ernie_zoo.models.decoder import DECODER_CLASSES
    from ernie_zoo.parallel.distributed import run_local_ranks
    from ernie_zoo.training.causal_lm import build_decoder_model

    model = build_decoder_model(_config(), seed=0)
    model.save_pretrained(tmp_path / "model")
    model = DECODER_CLASSES[type(_config())].from_pretrained(tmp_path / "model")
    ids = _rows()
    losses = []
    for row in range(2):  # the two ranks' rows as two micro batches
        loss = _loss(model, ids[row : row + 1])
        (loss / 2).backward()
        losses.append(loss.item())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    torch.optim.AdamW(model.parameters(), lr=LR).step()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}

    run_local_ranks([__file__, "--worker", str(tmp_path)], nproc=2, timeout=600)
    for rank in range(2):
        res = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert res["loss"] == pytest.approx(losses[rank], rel=1e-6)
        # EP 2: this rank holds 2 of the 4 experts (FSDP shards the rest of the model over the same 2 ranks)
        assert res["local_experts"] == [2, 32, 32] and res["global_experts"] == [4, 32, 32]
    ep_grads = load_file(str(tmp_path / "grads.safetensors"))
    ep_weights = load_file(str(tmp_path / "weights.safetensors"))
    assert ep_grads.keys() == grads.keys()
    assert any(".mlp.experts." in n for n in grads)
    for name, grad in grads.items():
        assert torch.allclose(ep_grads[name], grad, rtol=0, atol=1e-6), name
    for name, weight in weights.items():
        assert torch.allclose(ep_weights[name], weight, rtol=0, atol=1e-5), name
    initial = build_decoder_model(_config(), seed=0).state_dict()
    assert max((weights[n] - initial[n]).abs().max().item() for n in weights) > 1e-3  # the step moved them


def _worker(out_dir: str) -> None:
    import torch.distributed as dist
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor
    from transformers.distributed import DistributedConfig

    from ernie_zoo.models.decoder import DECODER_CLASSES

    torch.set_num_threads(1)
    out = Path(out_dir)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    layout = DistributedConfig(fsdp_size=2, ep_size=2, ep_implementation="all_to_all")
    model = DECODER_CLASSES[type(_config())].from_pretrained(out / "model", distributed_config=layout)
    experts = model.model.layers[1].mlp.experts.gate_up_proj
    assert isinstance(experts, DTensor), type(experts)
    loss = _loss(model, _rows()[rank : rank + 1])
    loss.backward()

    def full(t):
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone().contiguous()

    grads = {n: full(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    torch.optim.AdamW(model.parameters(), lr=LR).step()
    weights = {n: full(p) for n, p in model.named_parameters()}
    if rank == 0:
        save_file(grads, str(out / "grads.safetensors"))
        save_file(weights, str(out / "weights.safetensors"))
    result = {
        "loss": loss.item(),
        "local_experts": list(experts.to_local().shape),
        "global_experts": list(experts.shape),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--worker":
    _worker(sys.argv[2])

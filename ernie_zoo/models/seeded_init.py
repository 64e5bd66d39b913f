"""Initial weights that depend on a seed and each tensor's name only, so any part of a model can be built alone.

A model built from scratch the usual way (`cls(config)` after `torch.manual_seed`) draws its weights from one random
stream in construction order: the values of layer 40 depend on everything drawn before it, so a rank that holds
layers 40-47 only (a pipeline stage) or a shard of every layer (ZeRO-3) must replay the whole model's draws to get
them. Here every random draw of the initialisation is seeded by (seed, the name of the tensor it fills):

    with torch.device("meta"):          # no memory, no draws
        model = cls(config)
    ... keep only a part of it (parallel.pipeline.prune_to_stages) ...
    materialize(model, seed, device)    # allocate what is left and initialise it

gives every tensor the same values as `materialize` on the whole model, whatever else was pruned. The
initialisation itself is transformers' (`PreTrainedModel.initialize_weights`: each module's `_init_weights`, as
`from_pretrained` initialises the weights a checkpoint lacks); only its random draws are redirected, each into a
CPU tensor seeded by the name, then copied to the tensor's device (so a GPU build equals a CPU build). A tensor
drawn twice (a parent's `_init_weights` redoing a child's) gets the same values twice; tied tensors take their
first name, so the word embeddings have the same values on the first and the last pipeline stage.

Tensors that are already real when `materialize` runs (say the character tables, loaded before) are left as they
are. Any tensor the initialisation leaves untouched is an error naming it, not uninitialised memory.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["materialize", "name_seed", "seeded_draws"]

#: The in-place random fills an initialisation can use: Tensor methods, and torch.nn.init's functions (a mode sees
#: those, not the methods they call; transformers' guarded versions of them carry the same names).
INIT_FILLS = frozenset(
    {
        "uniform_",
        "normal_",
        "trunc_normal_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "sparse_",
    }
)
INIT_MODULES = ("torch.nn.init", "transformers.initialization")
RANDOM_FILLS = frozenset(
    {
        torch.Tensor.normal_,
        torch.Tensor.uniform_,
        torch.Tensor.bernoulli_,
        torch.Tensor.random_,
        torch.Tensor.exponential_,
        torch.Tensor.geometric_,
        torch.Tensor.log_normal_,
        torch.Tensor.cauchy_,
    }
)


def name_seed(seed: int, name: str) -> int:
    """The seed of tensor `name` in a model initialised with `seed` (stable across processes and versions)."""
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer once, under its first name (tied tensors once)."""
    seen: set[int] = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            yield name, t


class seeded_draws(TorchFunctionMode):  # noqa: N801 (used as a context manager, like torch.no_grad)
    """While active, a random fill of one of `model`'s tensors draws from `name_seed(seed, its name)` on the CPU
    (the global random state is left alone); a random fill of any other tensor is an error."""

    def __init__(self, model: nn.Module, seed: int):
        super().__init__()
        self.model, self.seed = model, seed
        self.names = {id(t): name for name, t in _named_tensors(model)}
        owners = Counter(
            id(t)
            for _, t in (
                *model.named_parameters(remove_duplicate=False),
                *model.named_buffers(remove_duplicate=False),
            )
        )
        #: tensors with several names (tied): only their first fill counts (see `__torch_function__`)
        self.tied = {self.names[i] for i, n in owners.items() if n > 1}
        self.filled: set[str] = set()

    def _name_of(self, t: torch.Tensor) -> str:
        name = self.names.get(id(t))
        if name is None:  # `weight.data` and the like: another tensor object over the same memory
            with torch._C.DisableTorchFunction():
                name = next(
                    (
                        n
                        for n, p in _named_tensors(self.model)
                        if p.data_ptr() == t.data_ptr() and p.shape == t.shape
                    ),
                    None,
                )
        if name is None:
            raise RuntimeError(
                f"a random fill of a tensor of shape {tuple(t.shape)} that is not one of the model's parameters or "
                "buffers: seeded initialisation draws per named tensor only"
            )
        return name

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        is_fill = func in RANDOM_FILLS or (
            getattr(func, "__name__", None) in INIT_FILLS
            and getattr(func, "__module__", None) in INIT_MODULES
        )
        if not is_fill or kwargs.get("generator") is not None:
            return func(*args, **kwargs)
        # torch.nn.init's functions reach a mode with every argument by keyword (tensor=...)
        target = args[0] if args else kwargs["tensor"]
        if getattr(target, "_is_hf_initialized", False):  # loaded (transformers' init functions skip it too)
            return target
        name = self._name_of(target)
        if name in self.tied and name in self.filled:
            # A tied tensor is filled by each module holding it (the word embeddings, then the output layer after
            # the padding row was zeroed); the first fill only, so a part holding one of those modules (a
            # pipeline's first stage) gets the same values as the whole model.
            return target
        self.filled.add(name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(name_seed(self.seed, name))
            scratch = torch.empty(target.shape, dtype=target.dtype)
            if args:
                func(scratch, *args[1:], **kwargs)
            else:
                func(**{**kwargs, "tensor": scratch})
        with torch.no_grad():
            target.copy_(scratch)
        return target


def _sentinel(t: torch.Tensor) -> float | int | None:
    """What a fresh tensor holds until initialised: NaN, or the smallest integer (None: a bool, not checked)."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return float("nan")
    if t.dtype == torch.bool:
        return None
    return torch.iinfo(t.dtype).min


def _unfilled(t: torch.Tensor) -> bool:
    sentinel = _sentinel(t)
    if sentinel is None or not t.numel():
        return False
    return bool(t.isnan().any() if t.dtype.is_floating_point or t.dtype.is_complex else (t == sentinel).any())


def materialize(model: nn.Module, seed: int, device: torch.device | str = "cpu") -> list[str]:
    """Allocate `model`'s meta tensors on `device` (tied tensors stay tied) and initialise them with transformers'
    initialisation under `seeded_draws(model, seed)`; tensors already allocated keep their values. Returns the
    names of the tensors initialised. Raises ValueError naming any tensor the initialisation did not fill."""
    device = torch.device(device)
    fresh: dict[int, tuple[str, torch.Tensor]] = {}
    kept: list[torch.Tensor] = []
    for name, t in _named_tensors(model):
        if t.is_meta:
            new = torch.empty(t.shape, dtype=t.dtype, device=device)
            sentinel = _sentinel(new)
            if sentinel is not None:
                new.fill_(sentinel)
            fresh[id(t)] = (
                name,
                nn.Parameter(new, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else new,
            )
        else:
            kept.append(t)
    for module in model.modules():  # every owner of a tensor gets the new one (ties kept)
        for table in (module._parameters, module._buffers):
            for key, t in table.items():
                if t is not None and id(t) in fresh:
                    table[key] = fresh[id(t)][1]
        if hasattr(module, "_is_hf_initialized"):
            del module._is_hf_initialized
    # Put back afterwards rather than flagged as loaded (`_is_hf_initialized`): transformers skips a module of
    # custom code whose tensors are all flagged, and a parent's `_init_weights` can fill its children's tensors.
    saved = [(t, t.detach().clone()) for t in kept]
    with torch.no_grad(), seeded_draws(model, seed):
        model.initialize_weights()
        for t, value in saved:
            t.copy_(value)
    unfilled = sorted(name for name, t in fresh.values() if _unfilled(t))
    if unfilled:
        raise ValueError(
            f"the initialisation left tensors unfilled (no _init_weights rule fills them): {unfilled[:8]}"
        )
    return [name for name, _ in fresh.values()]

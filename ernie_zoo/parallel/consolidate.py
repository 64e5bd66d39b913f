"""Turn a sharded checkpoint (DeepSpeed ZeRO 0-3, optionally AutoTP; or the pipeline backend's logical checkpoint of
any PP x TP x DP layout: `read_logical_checkpoint`) into a plain `from_pretrained` directory.

Every rank of a `DeepSpeedEngine` run writes `zero/rank<NNNNN>.safetensors` (its fp32 master partition as
`fp32_flat.<i>`, plus Adam moments) and `.json` (the layout: which parameters each flat group holds, in which
order, with which shapes). Reading them back needs no process group and no DeepSpeed:

    rank files ──> fp32_flat.<i>[offset : offset + partition]      one ZeRO partition of a parameter
               ──> concat over the ZeRO ranks of one TP rank, [:numel], view(ds_shape)   the TP shard
               ──> concat over TP ranks along the split dimension (found from the full shape)   the weight

At ZeRO stages 0-2 (layout kind "flat") a rank's `fp32_flat.<i>` is its piece of param group i's flat buffer
instead (the parameters back to back at recorded offsets): the pieces are joined first, then each parameter is
cut out at its offset.

The result holds the fp32 master weights (not the 16-bit copy rank 0 exports under bf16/fp16), the model's
character tables and the tokenizer, written atomically, then loaded with `AutoModelForMaskedLM` and
checked against the run's own export before the directory is published.

Memory: the consolidated state dict (4 bytes per parameter in fp32) is held once; shards are read parameter
by parameter through safetensors' lazy slices.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

ZERO_DIR = "zero"
MODEL_FILE = "model.safetensors"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LAYOUT_FORMAT = 1


def _load_rank_meta(zero: Path) -> list[dict[str, Any]]:
    """Every rank's JSON metadata, checked for completeness and a consistent layout."""
    first = zero / "rank00000.json"
    if not first.is_file():
        raise ValueError(f"{zero} holds no rank00000.json: not a checkpoint of the DeepSpeed backend")
    metas = []
    head = _read_json(first)
    world = head.get("world_size")
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"{first}: no valid world_size")
    missing = [
        name
        for r in range(world)
        for name in (f"rank{r:05d}.json", f"rank{r:05d}.safetensors")
        if not (zero / name).is_file()
    ]
    if missing:
        raise ValueError(
            f"{zero}: the checkpoint was written by {world} ranks, but {', '.join(missing)} missing"
        )
    for r in range(world):
        meta = head if r == 0 else _read_json(zero / f"rank{r:05d}.json")
        layout = meta.get("layout")
        if not isinstance(layout, dict) or layout.get("format") != LAYOUT_FORMAT:
            raise ValueError(
                f"{zero / f'rank{r:05d}.json'} has no partition layout (format {LAYOUT_FORMAT}): the checkpoint "
                "was written by an older ernie-zoo; resume it for one step and save again"
            )
        for key in ("world_size", "tp_size", "zero_stage"):
            if meta.get(key) != head.get(key):
                raise ValueError(f"rank {r} says {key}={meta.get(key)!r}, rank 0 says {head.get(key)!r}")
        metas.append(meta)
    flat = head["layout"].get("kind") == "flat"
    if flat == (head.get("zero_stage") == 3) or head.get("zero_stage") not in (0, 1, 2, 3):
        raise ValueError(
            f"{first}: a layout of kind {head['layout'].get('kind', 'zero3')!r} for ZeRO stage "
            f"{head.get('zero_stage')!r} (flat buffers: stages 0-2; per-parameter partitions: stage 3)"
        )
    return metas


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable or corrupt JSON ({err})") from None


class _Shard:
    """One rank's safetensors file, opened lazily; parameters are read as slices of its flat groups."""

    def __init__(self, path: Path, groups: list[dict[str, Any]]):
        from safetensors import safe_open

        self.path = path
        try:
            self._file = safe_open(str(path), framework="pt")
            keys = set(self._file.keys())
        except Exception as err:  # safetensors raises its own error types for a bad header or a short file
            raise ValueError(f"{path}: corrupt or truncated shard ({err})") from None
        self.offsets: dict[str, tuple[int, int, int]] = {}  # name -> (group, offset, partition numel)
        for i, group in enumerate(groups):
            key = f"fp32_flat.{i}"
            if key not in keys:
                raise ValueError(f"{path}: {key} is missing (corrupt shard?)")
            shape = self._file.get_slice(key).get_shape()
            expected = sum(p[3] for p in group["params"])
            if shape != [expected]:
                raise ValueError(
                    f"{path}: {key} has shape {shape}, its metadata describes {expected} elements (corrupt shard?)"
                )
            offset = 0
            for name, _shape, _numel, part in group["params"]:
                self.offsets[name] = (i, offset, part)
                offset += part

    def partition(self, name: str) -> torch.Tensor:
        i, offset, part = self.offsets[name]
        try:
            return self._file.get_slice(f"fp32_flat.{i}")[offset : offset + part]
        except Exception as err:
            raise ValueError(f"{self.path}: cannot read {name} ({err}); the shard is corrupt") from None


def read_zero_checkpoint(checkpoint_dir: str | os.PathLike) -> tuple[Any, dict[str, torch.Tensor]]:
    """(ErnieZooConfig, {parameter name: full fp32 tensor}) from a sharded DeepSpeed checkpoint.

    Raises ValueError naming the problem for a directory that is not such a checkpoint, a missing or
    corrupt shard, or a checkpoint whose manifest does not match its files.
    """
    from ernie_zoo.utils import MANIFEST, verify_manifest

    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    zero = path / ZERO_DIR
    if not zero.is_dir():
        hint = " (it is already a from_pretrained directory)" if (path / MODEL_FILE).is_file() else ""
        raise ValueError(
            f"{path} is not a sharded DeepSpeed checkpoint: it has no {ZERO_DIR}/ directory{hint}"
        )
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} has no config.json: not a checkpoint of the DeepSpeed backend")
    if (path / MANIFEST).is_file():  # written by ernie-pretrain: sizes and sha256 of every file
        verify_manifest(path)  # ManifestError (a ValueError) naming the file
    metas = _load_rank_meta(zero)
    config, skeleton = _config_and_skeleton(path)
    full_shapes = {name: list(p.shape) for name, p in skeleton.named_parameters()}
    if metas[0]["layout"].get("kind") == "flat":
        return config, _read_flat_groups(path, metas, full_shapes)
    shards = [_Shard(zero / f"rank{r:05d}.safetensors", m["layout"]["groups"]) for r, m in enumerate(metas)]

    # rank -> (tp rank, ZeRO partition rank) for each parameter's flat group
    tp_size = int(metas[0].get("tp_size") or 1)
    layouts = []
    for meta in metas:
        layout = meta["layout"]
        entries = {}
        for group in layout["groups"]:
            for name, shape, numel, part in group["params"]:
                entries[name] = (group["partition_rank"], group["partition_count"], shape, numel, part)
        layouts.append((int(layout["tp_rank"]), entries))
    names = list(layouts[0][1])
    state = _frozen_from_export(path, names, full_shapes)
    for name in names:
        pieces: dict[int, dict[int, tuple[torch.Tensor, list[int], int]]] = {}
        counts: dict[int, int] = {}
        for rank, (tp_rank, entries) in enumerate(layouts):
            if name not in entries:
                raise ValueError(f"rank {rank}'s shard has no {name}")
            part_rank, count, shape, numel, _ = entries[name]
            # a weight TP leaves whole is the same on every TP rank, and ZeRO may partition it over the TP ranks
            # too (TP 2 x DP 1: over both ranks): its partitions are read from any rank, as one TP rank's
            replicated = shape == full_shapes[name]
            key = 0 if replicated else tp_rank
            pieces.setdefault(key, {})[part_rank] = (shards[rank].partition(name), shape, numel)
            counts[key] = count
        expected = [0] if replicated else list(range(tp_size))
        if sorted(pieces) != expected:
            raise ValueError(f"{name}: TP ranks {sorted(pieces)} in the shards, expected 0..{tp_size - 1}")
        tp_shards = []
        for tp_rank in expected:
            parts, count = pieces[tp_rank], counts[tp_rank]
            if sorted(parts) != list(range(count)):
                raise ValueError(
                    f"{name}: ZeRO partitions {sorted(parts)} of TP rank {tp_rank}, expected {count}"
                )
            _, shape, numel = parts[0]
            flat = torch.cat([parts[i][0] for i in range(count)])
            if flat.numel() < numel:
                raise ValueError(f"{name}: {flat.numel()} elements in the partitions, {numel} expected")
            tp_shards.append(flat[:numel].view(shape))
        state[name] = _merge_tp(name, tp_shards, full_shapes[name])
    return config, state


def _read_flat_groups(
    path: Path, metas: list[dict[str, Any]], full_shapes: dict[str, list[int]]
) -> dict[str, torch.Tensor]:
    """{name: full fp32 tensor} from the flat buffers of a ZeRO stage 0-2 checkpoint (layout kind "flat"): per TP
    rank and param group, the ranks' pieces joined in partition order, each parameter read at its offset, then
    the TP shards joined (`_merge_tp`). Stage 0 writes the whole buffer on every rank (one partition)."""
    from safetensors import safe_open

    tp_size = int(metas[0].get("tp_size") or 1)
    pieces: dict[tuple[int, int], dict[int, torch.Tensor]] = {}  # (tp rank, group) -> {partition rank: piece}
    groups: dict[tuple[int, int], dict[str, Any]] = {}
    for rank, meta in enumerate(metas):
        file = path / ZERO_DIR / f"rank{rank:05d}.safetensors"
        tp_rank = int(meta["layout"]["tp_rank"])
        try:
            with safe_open(str(file), framework="pt") as f:
                for i, group in enumerate(meta["layout"]["groups"]):
                    piece = f.get_tensor(f"fp32_flat.{i}")
                    if list(piece.shape) != [group["partition_numel"]]:
                        raise ValueError(
                            f"fp32_flat.{i} has shape {list(piece.shape)}, not [{group['partition_numel']}]"
                        )
                    pieces.setdefault((tp_rank, i), {})[int(group["partition_rank"])] = piece
                    groups.setdefault((tp_rank, i), group)
        except Exception as err:  # safetensors raises its own error types for a bad header or a short file
            raise ValueError(f"{file}: corrupt or truncated shard ({err})") from None
    shards: dict[str, dict[int, torch.Tensor]] = {}
    for (tp_rank, i), parts in pieces.items():
        count = int(groups[tp_rank, i]["partition_count"])
        if sorted(parts) != list(range(count)):
            raise ValueError(
                f"group {i} of TP rank {tp_rank}: partitions {sorted(parts)} in the shards, expected {count}"
            )
        flat = torch.cat([parts[r] for r in range(count)])
        for name, shape, numel, offset in groups[tp_rank, i]["params"]:
            if offset + numel > flat.numel():
                raise ValueError(
                    f"{name}: offset {offset} + {numel} elements past group {i}'s {flat.numel()}"
                )
            shards.setdefault(name, {})[tp_rank] = flat[offset : offset + numel].view(shape).clone()
    state = _frozen_from_export(path, list(shards), full_shapes)
    for name, by_tp in shards.items():
        if sorted(by_tp) != list(range(tp_size)):
            raise ValueError(f"{name}: TP ranks {sorted(by_tp)} in the shards, expected 0..{tp_size - 1}")
        state[name] = _merge_tp(name, [by_tp[t] for t in range(tp_size)], full_shapes[name])
    return state


def _frozen_from_export(
    path: Path, names: list[str], full_shapes: dict[str, list[int]]
) -> dict[str, torch.Tensor]:
    """The parameters the optimizer never held (frozen ones, e.g. an MoE router's `e_score_correction_bias`): no
    rank has a master copy of them, the model's own weight is their value, read from rank 0's export
    (`model.safetensors`). Raises ValueError for a shard name the model does not have, or a parameter neither
    the shards nor the export hold."""
    unknown = [n for n in names if n not in full_shapes]
    absent = [n for n in full_shapes if n not in names]
    export = path / MODEL_FILE
    frozen: dict[str, torch.Tensor] = {}
    if absent and not unknown and export.is_file():
        from safetensors import safe_open

        with safe_open(str(export), framework="pt") as f:
            frozen = {n: f.get_tensor(n).float() for n in absent if n in f.keys()}
    missing = [n for n in absent if n not in frozen or list(frozen[n].shape) != full_shapes[n]]
    if unknown or missing:
        raise ValueError(
            f"{path}: the shards do not match config.json's model: unknown {unknown[:5]}, absent {missing[:5]}"
        )
    return frozen


def _config_and_skeleton(path: Path) -> tuple[Any, torch.nn.Module]:
    """The checkpoint's config (an encoder's ErnieZooConfig or an ERNIE 4.5 decoder's, by config.json's
    model_type) and its model on the meta device."""
    from ernie_zoo.models import ErnieZooConfig, ErnieZooForMaskedLM
    from ernie_zoo.models.decoder import DECODER_CLASSES

    model_type = (
        _read_json(path / "config.json").get("model_type") if (path / "config.json").is_file() else None
    )
    decoder = next((c for c in DECODER_CLASSES if c.model_type == model_type), None)  # an ERNIE 4.5 decoder
    config = (decoder or ErnieZooConfig).from_pretrained(str(path))
    with torch.device("meta"):
        skeleton = DECODER_CLASSES[decoder](config) if decoder else ErnieZooForMaskedLM(config)
    return config, skeleton


def _merge_tp(name: str, shards: list[torch.Tensor], full: list[int]) -> torch.Tensor:
    """One weight from its TP shards: replicated (every shard whole) or split along the one dimension whose
    size differs from the full shape, in TP-rank order (AutoTP splits contiguously)."""
    if list(shards[0].shape) == full:
        return shards[0].clone()
    dims = [d for d in range(len(full)) if shards[0].shape[d] != full[d]]
    if len(dims) != 1:
        raise ValueError(f"{name}: TP shard shape {list(shards[0].shape)} does not split full shape {full}")
    merged = torch.cat(shards, dim=dims[0])
    if list(merged.shape) != full:
        raise ValueError(f"{name}: TP shards join to {list(merged.shape)}, the model expects {full}")
    return merged


def read_logical_checkpoint(checkpoint_dir: str | os.PathLike) -> tuple[Any, dict[str, torch.Tensor]]:
    """(config, {name: full tensor}) from a logical checkpoint (`dcp/`, `parallel.resharding`: the pipeline
    backend's, of any PP x TP x DP layout; an encoder's ErnieZooConfig or an ERNIE 4.5 decoder's, by config.json's
    model_type): the model's weights and buffers, each joined whole from the ranks' pieces (TP shards, stages) by
    DCP; tied copies once (as `save_pretrained`)."""
    from ernie_zoo.utils import MANIFEST, tied_names, verify_manifest

    from .resharding import DCP_DIR, read_full

    path = Path(checkpoint_dir)
    if not (path / DCP_DIR).is_dir():
        raise ValueError(f"{path} has no {DCP_DIR}/: not a checkpoint of the pipeline backend")
    if (path / MANIFEST).is_file():  # a published checkpoint: sizes and sha256 of every file
        verify_manifest(path)  # ManifestError (a ValueError) naming the file
    config, skeleton = _config_and_skeleton(path)
    tied = tied_names(skeleton)
    full = {k: list(v.shape) for k, v in skeleton.state_dict().items() if k not in tied}
    try:
        state = read_full(path)
    except Exception as err:  # safetensors / DCP raise their own error types for a bad header or a short file
        raise ValueError(f"{path}: corrupt logical checkpoint ({err})") from None
    unknown = sorted(set(state) - set(full))
    if unknown:
        raise ValueError(f"{path}: {unknown[:5]} are not tensors of the model config.json describes")
    absent = [k for k in full if k not in state]
    if absent:
        raise ValueError(f"{path}: no rank wrote {absent[:5]} ({len(absent)} tensors)")
    wrong = [k for k in full if list(state[k].shape) != full[k]]
    if wrong:
        raise ValueError(f"{path}: {wrong[:5]} have other shapes than the model config.json describes")
    return config, state


def _find_tokenizer(checkpoint_dir: Path) -> Path | None:
    """The checkpoint's own tokenizer files, else the run directory's `tokenizer/` (what ernie-pretrain saves)."""
    for candidate in (checkpoint_dir, checkpoint_dir.parent / "tokenizer"):
        if (candidate / "tokenizer_config.json").is_file():
            return candidate
    return None


def consolidate_checkpoint(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | None = "auto",
    dtype: str = "fp32",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write `out_dir` = config.json + model.safetensors (+ tokenizer files) from a sharded checkpoint, atomically.

    Args:
        checkpoint_dir: a `checkpoint-<step>` directory of a `distributed.backend: deepspeed` or `pipeline` run.
        out_dir: the `from_pretrained` directory to create.
        tokenizer: a tokenizer directory to copy; "auto": the checkpoint's own, else `<run>/tokenizer`
            (raises ValueError if there is none); None: weights only.
        dtype: fp32 (the master weights), bf16 or fp16.
        overwrite: replace an existing `out_dir`.

    Before `out_dir` appears, the written directory is loaded with `AutoModelForMaskedLM` and its MLM logits
    on a fixed batch are compared with those of the run's own export (`checkpoint_dir/model.safetensors`,
    rank 0's gathered copy), when there is one. Returns a report: parameters, dtype, tokenizer, max logit
    difference.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    from ernie_zoo.models import ErnieZooForMaskedLM
    from ernie_zoo.models.decoder import DECODER_CLASSES, is_decoder_config
    from ernie_zoo.utils import atomic_directory, tied_names

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    path, out = Path(checkpoint_dir), Path(out_dir)
    if out.exists() and not overwrite:
        raise ValueError(f"{out} exists; choose another output directory or overwrite it")
    if out.resolve() == path.resolve():
        raise ValueError("the output directory must differ from the checkpoint directory")
    from .resharding import DCP_DIR

    logical = (path / DCP_DIR).is_dir()
    config, params = read_logical_checkpoint(path) if logical else read_zero_checkpoint(path)

    tok_dir = None
    if tokenizer == "auto":
        tok_dir = _find_tokenizer(path)
        if tok_dir is None:
            raise ValueError(
                f"no tokenizer in {path} or {path.parent / 'tokenizer'}: pass the run's tokenizer directory"
            )
    elif tokenizer is not None:
        tok_dir = Path(tokenizer)
        if not (tok_dir / "tokenizer_config.json").is_file():
            raise ValueError(f"{tok_dir} is not a tokenizer directory (no tokenizer_config.json)")
    decoder = is_decoder_config(
        config
    )  # an ERNIE 4.5 decoder (a pipeline checkpoint of causal-LM pretraining)
    tok = None
    if tok_dir is not None:
        from transformers import AutoTokenizer

        from ernie_zoo.tokenization import ErnieZooTokenizerFast

        tok = (AutoTokenizer if decoder else ErnieZooTokenizerFast).from_pretrained(str(tok_dir))
        if len(tok) > config.vocab_size:
            raise ValueError(
                f"the tokenizer in {tok_dir} has {len(tok)} tokens, the model only {config.vocab_size} rows"
            )

    # Buffers (the character tables): the run's own, from rank 0's export; else from the tokenizer.
    with torch.device("meta"):
        skeleton = DECODER_CLASSES[type(config)](config) if decoder else ErnieZooForMaskedLM(config)
    tied = tied_names(skeleton)
    param_names = {name for name, _ in skeleton.named_parameters()}
    buffer_names = [k for k in skeleton.state_dict() if k not in param_names and k not in tied]
    export = path / MODEL_FILE
    # a pipeline checkpoint carries the first stage's buffers (the character tables) with its weights
    buffers = {k: params.pop(k) for k in buffer_names if k in params}
    if len(buffers) < len(buffer_names) and export.is_file():
        with safe_open(str(export), framework="pt") as f:
            buffers = {k: f.get_tensor(k) for k in buffer_names if k in f.keys()}
    if len(buffers) < len(buffer_names):
        if tok is None:
            raise ValueError(
                f"{export} is missing and no tokenizer was given: the character tables "
                f"({', '.join(buffer_names)}) cannot be rebuilt"
            )
        features = skeleton.ernie.embeddings.char_features
        features.to_empty(device="cpu")  # only the small feature module; the rest stays on meta
        skeleton.load_char_tables(tok)
        own = dict(skeleton.state_dict())
        buffers = {k: own[k].detach().clone() for k in buffer_names}

    target = DTYPES[dtype]
    state = {k: v.to(target).contiguous() for k, v in params.items() if k not in tied}
    state.update({k: v.contiguous() for k, v in buffers.items()})
    report: dict[str, Any] = {
        "parameters": sum(v.numel() for v in params.values()),
        "dtype": dtype,
        "tokenizer": str(tok_dir) if tok_dir is not None else None,
        "compared_with": None,
        "max_logit_diff": None,
    }
    with atomic_directory(out) as tmp:
        config.save_pretrained(str(tmp))
        save_file(state, str(tmp / MODEL_FILE), metadata={"format": "pt"})
        if tok is not None:
            tok.save_pretrained(str(tmp))
        report.update(_verify(tmp, export if export.is_file() else None, config, dtype))
    logger.info(
        "consolidated %s -> %s: %d parameters (%s)%s",
        path,
        out,
        report["parameters"],
        dtype,
        f", max |logit diff| {report['max_logit_diff']:.3g} vs {export}" if report["compared_with"] else "",
    )
    return report


@torch.no_grad()
def _verify(directory: Path, export: Path | None, config: Any, dtype: str) -> dict[str, Any]:
    """Load `directory` with AutoModelForMaskedLM (a decoder: AutoModelForCausalLM) and compare its logits on a
    fixed batch with the run's export (`export`, same architecture); raises ValueError if they disagree beyond the
    precision's tolerance."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from ernie_zoo.models import ErnieZooForMaskedLM  # importing ernie_zoo registers the Auto classes
    from ernie_zoo.models.decoder import DECODER_CLASSES, is_decoder_config

    expected_cls = DECODER_CLASSES[type(config)] if is_decoder_config(config) else ErnieZooForMaskedLM
    auto = AutoModelForCausalLM if is_decoder_config(config) else AutoModelForMaskedLM
    model = auto.from_pretrained(str(directory), dtype=torch.float32).eval()
    if not isinstance(model, expected_cls):
        raise ValueError(f"{directory} loads as {type(model).__name__}, not {expected_cls.__name__}")
    g = torch.Generator().manual_seed(0)
    seq = min(16, config.max_position_embeddings)
    ids = torch.randint(1, config.vocab_size, (2, seq), generator=g)
    logits = model(input_ids=ids).logits
    if not torch.isfinite(logits).all():
        raise ValueError(f"{directory}: the consolidated model produces non-finite logits")
    if export is None:
        return {"compared_with": None, "max_logit_diff": None}
    reference = expected_cls.from_pretrained(str(export.parent), dtype=torch.float32).eval()
    expected = reference(input_ids=ids).logits
    diff = float((logits - expected).abs().max())
    # fp32 masters vs a 16-bit export (or a 16-bit output) differ by 16-bit rounding of the weights
    sixteen = dtype != "fp32" or _file_dtype(export) != torch.float32
    tolerance = 5e-2 * max(1.0, float(expected.abs().max())) if sixteen else 1e-4
    if diff > tolerance:
        raise ValueError(
            f"the consolidated model's logits differ from {export}'s by {diff:.3g} (tolerance {tolerance:.3g}): "
            "the shards and the export disagree"
        )
    return {"compared_with": str(export), "max_logit_diff": diff}


def _file_dtype(path: Path) -> torch.dtype:
    """The dtype of the first floating tensor of a safetensors file (fp32 if it has none)."""
    from safetensors import safe_open

    names = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():
            dtype = names.get(f.get_slice(key).get_dtype())
            if dtype is not None:
                return dtype
    return torch.float32


__all__ = ["DTYPES", "consolidate_checkpoint", "read_logical_checkpoint", "read_zero_checkpoint"]

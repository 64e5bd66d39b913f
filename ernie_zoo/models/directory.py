"""Checks on a model directory before anything in it is loaded, each error naming the file, the field and the fix.

Every loader of a local or shipped model directory runs `check_model_dir` first (Taskflow, `load_finetuned`,
`ernie-finetune`'s `model.model_name_or_path` / `model.tokenizer`):

- links: a symbolic link that resolves outside the directory is refused, and so is any entry (linked or not)
  that is not a regular file or directory (`model.safetensors -> /dev/zero`, a pipe). A model directory holds its
  own files; a link out of it would let a directory handed to a server or a script load any file on the machine.
  The one exception is the transformers hub cache's own layout: a file of `.../snapshots/<rev>/` linking into
  the same repository's `.../blobs/`.
- `config.json`: a JSON object whose sizes are positive integers (`num_hidden_layers`, `hidden_size`, ...),
  dropout probabilities in [0, 1), and `id2label` / `label2id` objects of the right shape;
- `tokenizer.json`: a JSON object as the tokenizers library saves it (`model`, `added_tokens`);
- every `*.safetensors` file: a readable safetensors header, and not every tensor all zeros (a blank or wiped
  file would load and answer with constant nonsense).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: config.json fields that count something: each must be an integer >= 1 where present.
POSITIVE_INT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "task_type_vocab_size",
    "num_labels",
    "num_radicals",
    "max_strokes",
    "stroke_seq_len",
    "pinyin_vocab_size",
    "char_feature_dim",
)
#: config.json dropout probabilities: a number in [0, 1) where present (null allowed).
PROBABILITY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")
# a safetensors header larger than this is not a header (transformers' own files have headers of a few MB at most)
_MAX_HEADER_BYTES = 100_000_000


def _fail(path: Path, problem: str, fix: str) -> ValueError:
    return ValueError(f"{path}: {problem}; {fix}")


# ----------------------------------------------------------------------------------------------- links
def _hub_blobs(root: Path) -> Path | None:
    """`<repo>/blobs` when `root` is a transformers hub cache snapshot (`<repo>/snapshots/<rev>`)."""
    return root.parent.parent / "blobs" if root.parent.name == "snapshots" else None


def check_links(directory: str | os.PathLike) -> None:
    """Refuse entries of `directory` (recursively; hidden names skipped) that are not regular files or
    directories, and symbolic links that resolve outside it (see the module docstring)."""
    root = Path(os.path.realpath(directory))
    blobs = _hub_blobs(root)
    pending = [Path(directory)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                path = Path(entry.path)
                if entry.is_symlink():
                    target = Path(os.path.realpath(path))
                    if not target.exists():
                        raise _fail(
                            path, f"a symbolic link to {target}, which does not exist", "restore the file"
                        )
                    inside = target.is_relative_to(root) or (
                        blobs is not None and target.is_relative_to(blobs)
                    )
                    if not inside:
                        raise _fail(
                            path,
                            f"a symbolic link to {target}, outside the model directory {root}; links out of a "
                            "model directory are refused (they would let a directory load any file on this machine)",
                            f"replace the link with a copy of the file: cp --remove-destination {target} {path}",
                        )
                    if not (target.is_file() or target.is_dir()):
                        raise _fail(
                            path,
                            f"a symbolic link to {target}, which is not a regular file (a device, pipe or socket)",
                            "a model file must be a regular file: replace the link with the real file",
                        )
                    continue  # a link to a directory inside the directory: its entries are reached directly
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                elif not entry.is_file(follow_symlinks=False):
                    raise _fail(
                        path,
                        "not a regular file (a device, pipe or socket)",
                        "a model file must be a regular file: replace it with the real file",
                    )


# ----------------------------------------------------------------------------------------------- json files
def _read_json_object(path: Path, what: str, fix: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a valid JSON file ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise _fail(path, f"{what} must be a JSON object, got {type(data).__name__}", fix)
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def check_config_values(config: dict[str, Any], path: str | os.PathLike) -> None:
    """Raise ValueError naming `path` and the field where a value of `config` (a config.json dict) cannot make a
    working model: a size that is not a positive integer, a dropout outside [0, 1), `hidden_size` not a multiple of
    `num_attention_heads`, `id2label` / `label2id` that are not objects of label ids and names."""
    path = Path(path)
    fix = "fix the field in config.json, or re-save the model with save_pretrained"
    for name in POSITIVE_INT_FIELDS:
        value = config.get(name)
        if value is not None and not (_is_int(value) and value >= 1):
            raise _fail(path, f"field {name!r} must be a positive integer, got {value!r}", fix)
    for name in PROBABILITY_FIELDS:
        value = config.get(name)
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            raise _fail(path, f"field {name!r} must be a number in [0, 1), got {value!r}", fix)
        if value is not None and not 0 <= value < 1:
            raise _fail(path, f"field {name!r} must be in [0, 1), got {value!r}", fix)
    eps = config.get("layer_norm_eps")
    if eps is not None and not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
        raise _fail(path, f"field 'layer_norm_eps' must be a positive number, got {eps!r}", fix)
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if _is_int(hidden) and _is_int(heads) and hidden % heads:
        raise _fail(
            path, f"field 'hidden_size' ({hidden}) must be a multiple of 'num_attention_heads' ({heads})", fix
        )
    for name, what, example, key_ok, value_ok in (
        (
            "id2label",
            "label ids to names",
            '{"0": "neg", ...}',
            lambda k: str(k).lstrip("-").isdigit(),
            _is_str,
        ),
        ("label2id", "label names to integer ids", '{"neg": 0, ...}', lambda k: True, _is_int),
    ):
        table = config.get(name)
        if table is not None and not isinstance(table, dict):
            raise _fail(
                path,
                f"field {name!r} must be an object mapping {what} ({example}), got {type(table).__name__} "
                f"{table!r:.60}",
                fix,
            )
        for key, value in (table or {}).items():
            if not (key_ok(key) and value_ok(value)):
                raise _fail(path, f"field {name!r} must map {what}, got {key!r}: {value!r}", fix)


def check_config_file(path: str | os.PathLike) -> None:
    """A config.json, where present, must be a JSON object with sane values (`check_config_values`)."""
    path = Path(path)
    if path.is_file():
        fix = "restore the file, or re-save the model with save_pretrained"
        check_config_values(_read_json_object(path, "config.json", fix), path)


def check_tokenizer_file(path: str | os.PathLike) -> None:
    """A tokenizer.json, where present, must be what the tokenizers library saves: an object with a `model` object
    and an `added_tokens` list (anything else fails inside transformers with a bare KeyError)."""
    path = Path(path)
    if not path.is_file():
        return
    fix = "re-save the tokenizer with tokenizer.save_pretrained(directory)"
    data = _read_json_object(path, "tokenizer.json", fix)
    for key, kind, name in (("model", dict, "an object"), ("added_tokens", list, "a list")):
        if key not in data:
            raise _fail(path, f"not a tokenizer.json saved by the tokenizers library (no {key!r} key)", fix)
        if not isinstance(data[key], kind):
            raise _fail(
                path,
                f"key {key!r} must be {name}, got {type(data[key]).__name__} (not a tokenizers file)",
                fix,
            )


# ----------------------------------------------------------------------------------------------- weights
def check_safetensors_file(path: str | os.PathLike) -> None:
    """A safetensors file must have a valid header and at least one tensor that is not all zeros. Stops at the
    first non-zero tensor, so a real file costs one tensor read."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    fix = "restore the directory (or re-export the model)"
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
    length = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 0 < length <= min(size - 8, _MAX_HEADER_BYTES):
        what = "all zero bytes" if head == bytes(8) else f"a header length of {length} in a {size}-byte file"
        raise _fail(path, f"the weights file is corrupt or truncated: not a safetensors file ({what})", fix)
    try:
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            for name in names:
                if f.get_tensor(name).any():
                    return
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise _fail(path, f"the weights file is corrupt or truncated ({exc})", fix) from None
    if names:
        raise _fail(
            path,
            f"every one of its {len(names)} tensors is all zeros: a blank or wiped weights file, not a trained model",
            fix,
        )


def check_model_dir(directory: str | os.PathLike) -> None:
    """Everything `check_links`, `check_config_file`, `check_tokenizer_file` and `check_safetensors_file` check,
    on a directory about to be loaded. Raises ValueError naming the file, the field and the fix."""
    directory = Path(directory)
    check_links(directory)
    check_config_file(directory / "config.json")
    check_tokenizer_file(directory / "tokenizer.json")
    for path in sorted(directory.glob("*.safetensors")):
        check_safetensors_file(path)


__all__ = [
    "check_config_file",
    "check_config_values",
    "check_links",
    "check_model_dir",
    "check_safetensors_file",
    "check_tokenizer_file",
]

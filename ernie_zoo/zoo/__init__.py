"""The models shipped inside the package (`ernie_zoo/zoo/<name>/`) and how a model name finds its directory.

`resolve_model_source(name)` is the one name -> location rule, used by Taskflow's `model=` and by
`ernie-finetune`'s `model.model_name_or_path` / `model.tokenizer`:

1. a shipped name (`ernie-zoo-mini-zh`, ..., or anything starting with `ernie-zoo-`): the directory
   `ernie_zoo/zoo/<name>/` of the installed package; a name that is not shipped, or a shipped model whose
   directory is missing, raises `ModelNotFoundError` listing the shipped names;
2. an existing directory: that directory;
3. a name that can only be a local path (`./x`, `/x`, `~/x`, `a/b/c`) but is not a directory: `ModelNotFoundError`;
4. anything else (`org/name`): a hub id, left to transformers' cache (Taskflow decides how it is loaded).

This module imports nothing from the rest of ernie_zoo but `ernie_zoo.utils`, so every layer can use it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ernie_zoo.utils import MANIFEST, looks_like_local_path, read_manifest, sha256_file

ZOO_DIR = Path(__file__).resolve().parent
SHIPPED_MODELS = (
    "ernie-zoo-mini-sentiment",
    "ernie-zoo-mini-ner",
    "ernie-zoo-mini-ner-fast",
    "ernie-zoo-mini-poetry",
    "ernie-zoo-mini-generator",
    "ernie-zoo-mini-zh",
    "ernie-zoo-mini-csc",
    "ernie-zoo-e5-small-zh",
    "ernie-zoo-e5-small-zh-pieces",
    "ernie-zoo-e5-sentiment",
    "ernie-zoo-e5-ie",
)
#: The pretrained encoder (masked LM) that fine-tuning starts from by default.
BASE_ENCODER = "ernie-zoo-mini-zh"
_PREFIX = "ernie-zoo-"


class ModelNotFoundError(FileNotFoundError):
    """A model could not be found: a shipped model that is not installed, a missing directory, or a hub id
    that is not in the local cache while offline."""


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: `kind` is "shipped", "local" or "hub"; `location` a directory or a hub id."""

    kind: str
    location: str


def is_shipped_name(name: str) -> bool:
    """Whether `name` is resolved as a shipped model (a shipped name, or any name starting with `ernie-zoo-`)."""
    return name in SHIPPED_MODELS or name.startswith(_PREFIX)


def resolve_model_source(
    name: str | os.PathLike, *, zoo_dir: str | os.PathLike | None = None, hint: str = ""
) -> ModelSource:
    """Where the model `name` comes from (see the module docstring); raises `ModelNotFoundError`.

    `zoo_dir` replaces the package's zoo directory (tests); `hint` is appended to the error of a shipped model
    that is not installed (what to pass instead)."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise TypeError(
            f"a model must be a str (a shipped name, a directory or a hub id), got {type(name).__name__}"
        )
    if is_shipped_name(name):
        known = ", ".join(SHIPPED_MODELS)
        if name not in SHIPPED_MODELS:
            raise ModelNotFoundError(f"{name!r} is not a shipped model. Shipped models: {known}.{hint}")
        directory = Path(zoo_dir if zoo_dir is not None else ZOO_DIR) / name
        if not directory.is_dir():
            raise ModelNotFoundError(
                f"the shipped model {name!r} is not installed (expected at {directory}). "
                f"Shipped models: {known}.{hint}"
            )
        return ModelSource("shipped", str(directory))
    path = Path(name).expanduser()
    if path.is_dir():
        return ModelSource("local", str(path.resolve()))
    if looks_like_local_path(name):
        raise ModelNotFoundError(f"model directory {name!r} does not exist")
    return ModelSource("hub", name)


def shipped_model_dir(name: str) -> Path:
    """The directory of the shipped model `name`; `ModelNotFoundError` (listing the shipped names) otherwise."""
    source = resolve_model_source(name)
    if source.kind != "shipped":
        raise ModelNotFoundError(
            f"{name!r} is not a shipped model. Shipped models: {', '.join(SHIPPED_MODELS)}."
        )
    return Path(source.location)


def weights_file(directory: str | os.PathLike) -> str:
    """The weights file of a model directory: `adapter_model.safetensors` for an adapter (a LoRA on a base, as
    `ernie-finetune` writes and the zoo ships), else `model.safetensors`."""
    return "adapter_model.safetensors" if (Path(directory) / "adapter_config.json").is_file() else "model.safetensors"


def weights_sha256(directory: str | os.PathLike) -> str | None:
    """sha256 of a model directory's weights (`weights_file`), which tells one release of a model from the next:
    from its manifest when it has one (nothing hashed), else by hashing the file; None when there is no such file."""
    directory = Path(directory)
    name = weights_file(directory)
    if (directory / MANIFEST).is_file():
        return read_manifest(directory).get(name, {}).get("sha256")
    path = directory / name
    return sha256_file(path) if path.is_file() else None


__all__ = [
    "BASE_ENCODER",
    "ModelNotFoundError",
    "ModelSource",
    "SHIPPED_MODELS",
    "ZOO_DIR",
    "is_shipped_name",
    "resolve_model_source",
    "shipped_model_dir",
    "weights_file",
    "weights_sha256",
]

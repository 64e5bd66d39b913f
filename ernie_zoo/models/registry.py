"""The one registry of model classes: which class loads a configuration.

Each model class registers itself with the task it serves (`@register(task, ...)` on its definition); a task's
`default` class is what transformers' Auto class of the task builds (`ernie_zoo.auto`). `config.architectures`
names the class and a task's `flag` picks a variant: `use_crf` turns the token classifier into the CRF tagger (and
`use_crf: false` the CRF tagger back). Every lookup goes through here: `ernie_zoo.auto`, `load_finetuned`, Taskflow,
the fine-tuning tasks' heads and `from_pretrained`'s refusal of a class that would silently load another model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODEL_CLASSES: dict[str, type] = {}  # architecture name -> class
TASK_OF: dict[type, str] = {}  # class -> the task it serves
TASK_DEFAULTS: dict[str, type] = {}  # task -> the class its transformers Auto class builds
_FLAGS: dict[str, tuple[str, type]] = {}  # task -> (config flag, the class the flag picks)
_EXCLUSIVE: set[type] = set()  # classes whose weights load into no other class (nothing under its names)
_WHAT: dict[type, str] = {}  # how a refusal names a directory's model


def register(task: str, *, default=False, flag: str | None = None, exclusive=False, what: str | None = None):
    """Class decorator: `cls` serves `task`; `default`: it is what the task's Auto class builds; `flag`: a config
    field that picks it over the task's default; `exclusive`: its weights load into no other class."""

    def add(cls: type) -> type:
        MODEL_CLASSES[cls.__name__], TASK_OF[cls], _WHAT[cls] = cls, task, what or f"a {cls.__name__}"
        TASK_DEFAULTS.update({task: cls} if default else {})
        _FLAGS.update({task: (flag, cls)} if flag else {})
        _EXCLUSIVE.update({cls} if exclusive else ())
        return cls

    return add


def model_class_for(config: Any, task: str | None = None, default: type | None = None) -> type:
    """The class that loads `config` (a config or its dict): the first registered class in `architectures` (one
    serving `task`, if given), then its task's flag (`use_crf`) where the config sets it. Naming none: the flag's
    class when the flag is set, else `default`, else the default class of `task`; else ValueError."""
    field = config.get if isinstance(config, Mapping) else lambda name: getattr(config, name, None)
    names = list(field("architectures") or [])
    found = [MODEL_CLASSES[n] for n in names if n in MODEL_CLASSES]
    cls = next((c for c in found if task in (None, TASK_OF[c])), None)
    flag, variant = _FLAGS.get(TASK_OF[cls] if cls else task, (None, None))
    value = field(flag) if flag else None
    if cls is None:
        cls = variant if value else default or TASK_DEFAULTS.get(task)
    elif value is not None and cls in (variant, TASK_DEFAULTS.get(TASK_OF[cls])):
        cls = variant if value else TASK_DEFAULTS[TASK_OF[cls]]
    if cls is None:
        raise ValueError(f"config.architectures {names} names none of {sorted(MODEL_CLASSES)}")
    return cls


def check_loadable(cls: type, directory: str | os.PathLike, config: Any = None) -> None:
    """Refuse to load `directory` with `cls` where it would silently be another model: an exclusive class (the
    ensemble: every weight would be random), or a flag's variant (the CRF tagger) by its task's default class,
    which would drop what the variant adds. A `config` passed sets the flags (a plain head fine-tuned from a CRF
    tagger is meant)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    if config is not None:  # the caller's flags
        saved.update({flag: getattr(config, flag, False) for flag, _ in _FLAGS.values()})
    target = model_class_for(saved, default=cls)  # no registered class: transformers names what is missing
    dropped = target in {v for _, v in _FLAGS.values()} and cls is TASK_DEFAULTS.get(TASK_OF[target])
    if target is cls or not (target in _EXCLUSIVE or dropped):
        return
    # Only token classification has variants (the CRF tagger, the ensemble): hence the CRF and Taskflow('ner').
    why = "cannot load it" if target in _EXCLUSIVE else "would drop its CRF and decode each token on its own"
    raise ValueError(
        f"{directory} holds {_WHAT[target]} ({target.__name__}); {cls.__name__} {why} (transformers' "
        f"token-classification pipeline cannot decode a CRF). Use ernie_zoo.models.{target.__name__}"
        ".from_pretrained, Taskflow('ner', task_path=...) or ernie_zoo.finetune.load_finetuned"
    )

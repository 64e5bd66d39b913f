"""The one registry of model classes: which class loads a configuration.

Each model class registers itself with the transformers pipeline tag it serves (`@register(pipeline_tag, ...)` on
its definition: "token-classification", "text-generation", ...; not a fine-tuning recipe's `task:` nor a Taskflow
task); a tag's `default` class is what transformers' Auto class of the tag builds (`ernie_zoo.auto`).
`config.architectures` names the class and a tag's `flag` picks a variant: `use_crf` turns the token classifier into the CRF tagger (and
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
PIPELINE_TAG_OF: dict[type, str] = {}  # class -> the pipeline tag it serves
PIPELINE_DEFAULTS: dict[str, type] = {}  # pipeline tag -> the class its transformers Auto class builds
_FLAGS: dict[str, tuple[str, type]] = {}  # pipeline tag -> (config flag, the class the flag picks)
_EXCLUSIVE: set[type] = set()  # classes whose weights load into no other class (nothing under its names)
_WHAT: dict[type, str] = {}  # how a refusal names a directory's model


def register(
    pipeline_tag: str, *, default=False, flag: str | None = None, exclusive=False, what: str | None = None
):
    """Class decorator: `cls` serves `pipeline_tag`; `default`: it is what the tag's Auto class builds; `flag`: a
    config field that picks it over the tag's default; `exclusive`: its weights load into no other class."""

    def add(cls: type) -> type:
        MODEL_CLASSES[cls.__name__], PIPELINE_TAG_OF[cls] = cls, pipeline_tag
        _WHAT[cls] = what or f"a {cls.__name__}"
        PIPELINE_DEFAULTS.update({pipeline_tag: cls} if default else {})
        _FLAGS.update({pipeline_tag: (flag, cls)} if flag else {})
        _EXCLUSIVE.update({cls} if exclusive else ())
        return cls

    return add


def model_class_for(config: Any, pipeline_tag: str | None = None, default: type | None = None) -> type:
    """The class that loads `config` (a config or its dict): the first registered class in `architectures` (one
    serving `pipeline_tag`, if given), then its tag's flag (`use_crf`) where the config sets it. Naming none: the
    flag's class when the flag is set, else `default`, else the default class of `pipeline_tag`; else ValueError."""
    field = config.get if isinstance(config, Mapping) else lambda name: getattr(config, name, None)
    names = list(field("architectures") or [])
    found = [MODEL_CLASSES[n] for n in names if n in MODEL_CLASSES]
    cls = next((c for c in found if pipeline_tag in (None, PIPELINE_TAG_OF[c])), None)
    flag, variant = _FLAGS.get(PIPELINE_TAG_OF[cls] if cls else pipeline_tag, (None, None))
    value = field(flag) if flag else None
    if cls is None:
        cls = variant if value else default or PIPELINE_DEFAULTS.get(pipeline_tag)
    elif value is not None and cls in (variant, PIPELINE_DEFAULTS.get(PIPELINE_TAG_OF[cls])):
        cls = variant if value else PIPELINE_DEFAULTS[PIPELINE_TAG_OF[cls]]
    if cls is None:
        raise ValueError(f"config.architectures {names} names none of {sorted(MODEL_CLASSES)}")
    return cls


def check_loadable(cls: type, directory: str | os.PathLike, config: Any = None) -> None:
    """Refuse to load `directory` with `cls` where it would silently be another model: an exclusive class (the
    ensemble: every weight would be random), or a flag's variant (the CRF tagger) by its tag's default class,
    which would drop what the variant adds. A `config` passed sets the flags (a plain head fine-tuned from a CRF
    tagger is meant)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    if config is not None:  # the caller's flags
        saved.update({flag: getattr(config, flag, False) for flag, _ in _FLAGS.values()})
    target = model_class_for(saved, default=cls)  # no registered class: transformers names what is missing
    dropped = target in {v for _, v in _FLAGS.values()} and cls is PIPELINE_DEFAULTS.get(
        PIPELINE_TAG_OF[target]
    )
    if target is cls or not (target in _EXCLUSIVE or dropped):
        return
    # Only token classification has variants (the CRF tagger, the ensemble): hence the CRF and Taskflow('ner').
    why = "cannot load it" if target in _EXCLUSIVE else "would drop its CRF and decode each token on its own"
    raise ValueError(
        f"{directory} holds {_WHAT[target]} ({target.__name__}); {cls.__name__} {why} (transformers' "
        f"token-classification pipeline cannot decode a CRF). Use ernie_zoo.models.{target.__name__}"
        ".from_pretrained, Taskflow('ner', task_path=...) or ernie_zoo.finetune.load_finetuned"
    )

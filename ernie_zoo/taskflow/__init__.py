"""Taskflow: one-line inference for Chinese NLP tasks.

    >>> from ernie_zoo.taskflow import Taskflow
    >>> Taskflow("pos_tagging")("他去重庆")
    {'text': '他去重庆', 'words': ['他', '去', '重庆'], 'tags': ['r', 'v', 'ns']}

Tasks (one file each, registered by name; `list_tasks()` lists them with their options):
sentiment_analysis, ner (= named_entity_recognition), text_generation, word_segmentation, pos_tagging,
fill_mask, feature_extraction (= text_embedding), text_similarity (pairs of texts in), text_correction,
information_extraction (= ie). `Taskflow(task).help()` prints a task's usage example.

Models: shipped models live in `ernie_zoo/zoo/<name>/` and are verified against their `manifest.json`
(`verify_manifest`); `task_path=` takes any local save_pretrained directory; hub ids go through transformers'
cache (see `ernie_zoo.taskflow.models`).
"""

from . import (  # noqa: F401  (importing a task module registers it)
    feature_extraction,
    fill_mask,
    information_extraction,
    ner,
    pos_tagging,
    sentiment_analysis,
    text_correction,
    text_generation,
    text_similarity,
    word_segmentation,
)
from .models import (
    SHIPPED_MODELS,
    ManifestError,
    ModelNotFoundError,
    clear_model_cache,
    verify_manifest,
    write_manifest,
)
from .task import TASKS, EncoderTask, Task, get_task, list_tasks, register_task
from .taskflow import Taskflow, task_usage

__all__ = [
    "EncoderTask",
    "ManifestError",
    "ModelNotFoundError",
    "SHIPPED_MODELS",
    "TASKS",
    "Task",
    "Taskflow",
    "clear_model_cache",
    "get_task",
    "list_tasks",
    "register_task",
    "task_usage",
    "verify_manifest",
    "write_manifest",
]

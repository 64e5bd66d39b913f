"""ernie-zoo: ERNIE-style Chinese encoders with pinyin/radical/stroke features, knowledge masking, Taskflow."""

from . import auto as _auto  # noqa: F401  (registers the Auto classes)
from .models import (
    ErnieZooConfig,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
)
from .taskflow import Taskflow
from .tokenization import ErnieZooTokenizerFast
from .version import __version__

__all__ = [
    "ErnieZooConfig",
    "ErnieZooForCausalLM",
    "ErnieZooForMaskedLM",
    "ErnieZooForSequenceClassification",
    "ErnieZooForTokenClassification",
    "ErnieZooModel",
    "ErnieZooTokenizerFast",
    "Taskflow",
    "__version__",
]

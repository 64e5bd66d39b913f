"""ERNIE-style models with pinyin/radical/stroke features; size presets; checkpoint conversion."""

from .configuration import ErnieZooConfig
from .modeling import (
    CharFeatureEmbeddings,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
    ErnieZooPreTrainedModel,
)

__all__ = [
    "CharFeatureEmbeddings",
    "ErnieZooConfig",
    "ErnieZooForCausalLM",
    "ErnieZooForMaskedLM",
    "ErnieZooForSequenceClassification",
    "ErnieZooForTokenClassification",
    "ErnieZooModel",
    "ErnieZooPreTrainedModel",
]

"""Registration with transformers' Auto classes, so `AutoModel.from_pretrained(dir)` works after `import ernie_zoo`:
each Auto class builds the default class of its pipeline tag in the registry (`ernie_zoo.models.registry`)."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .models import ErnieZooConfig
from .models.registry import PIPELINE_DEFAULTS
from .tokenization import ErnieZooTokenizerFast

AUTO_CLASSES = {
    "feature-extraction": AutoModel,
    "fill-mask": AutoModelForMaskedLM,
    "text-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
    "text-generation": AutoModelForCausalLM,
}


def register() -> None:
    AutoConfig.register(ErnieZooConfig.model_type, ErnieZooConfig, exist_ok=True)
    for tag, auto_cls in AUTO_CLASSES.items():
        auto_cls.register(ErnieZooConfig, PIPELINE_DEFAULTS[tag], exist_ok=True)
    AutoTokenizer.register(ErnieZooConfig, tokenizer_class=ErnieZooTokenizerFast, exist_ok=True)


register()

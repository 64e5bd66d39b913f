"""Registration with transformers' Auto classes, so `AutoModel.from_pretrained(dir)` works after `import ernie_zoo`."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .models import (
    ErnieZooConfig,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
)
from .tokenization import ErnieZooTokenizerFast

_AUTO_MODELS = [
    (AutoModel, ErnieZooModel),
    (AutoModelForMaskedLM, ErnieZooForMaskedLM),
    (AutoModelForSequenceClassification, ErnieZooForSequenceClassification),
    (AutoModelForTokenClassification, ErnieZooForTokenClassification),
    (AutoModelForCausalLM, ErnieZooForCausalLM),
]


def register() -> None:
    AutoConfig.register(ErnieZooConfig.model_type, ErnieZooConfig, exist_ok=True)
    for auto_cls, model_cls in _AUTO_MODELS:
        auto_cls.register(ErnieZooConfig, model_cls, exist_ok=True)
    AutoTokenizer.register(ErnieZooConfig, tokenizer_class=ErnieZooTokenizerFast, exist_ok=True)


register()

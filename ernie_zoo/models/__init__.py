"""Every model class (encoder, heads, CRF tagger with entity-lexicon input, ensemble, spelling correction,
prompt-conditioned span extraction (UIE), and transformers' ERNIE 4.5 dense and MoE decoders, registered as they are) and the registry mapping a config to its
class (`registry`); the inputs every head's `forward` names (`heads`); size presets; int8 storage; checkpoint
conversion."""

from .configuration import ErnieZooConfig
from .correction import ErnieZooForSpellingCorrection
from .crf import LinearChainCRF
from .crf_tagger import ErnieZooForTokenClassificationCRF
from .decoder import build_decoder, decoder_counts
from .ensemble import ErnieZooEnsembleForTokenClassificationCRF
from .modeling import (
    CharFeatureEmbeddings,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
    ErnieZooPreTrainedModel,
)
from .span_extraction import ErnieZooForSpanExtraction

__all__ = [
    "CharFeatureEmbeddings",
    "ErnieZooConfig",
    "ErnieZooEnsembleForTokenClassificationCRF",
    "ErnieZooForCausalLM",
    "ErnieZooForMaskedLM",
    "ErnieZooForSequenceClassification",
    "ErnieZooForSpanExtraction",
    "ErnieZooForSpellingCorrection",
    "ErnieZooForTokenClassification",
    "ErnieZooForTokenClassificationCRF",
    "ErnieZooModel",
    "ErnieZooPreTrainedModel",
    "LinearChainCRF",
    "build_decoder",
    "decoder_counts",
]

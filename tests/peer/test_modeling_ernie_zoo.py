"""transformers' own common model tests (`ModelTesterMixin`, vendored in modeling_common.py with its licence and a
note of the changes) run against the ErnieZoo classes in three feature settings: features off, pinyin + radical +
strokes added (ERNIE-style, the shipped models' setting) and all four concatenated (ChineseBERT-style, with the
stroke sequence).

The model tester builds tiny configs and random inputs the way transformers' ERNIE tester does (13 x 7 token ids,
hidden 32, 2 layers), plus random `pinyin_ids`. Stock ERNIE's pretraining, next-sentence, multiple-choice and
question-answering heads have no ErnieZoo counterpart, so they are not in `all_model_classes`. The skips below are
harness-only, each with its reason.
"""

from __future__ import annotations

import unittest

import ernie_zoo  # noqa: F401  (registers the Auto classes)
from ernie_zoo import (
    ErnieZooConfig,
    ErnieZooForCausalLM,
    ErnieZooForMaskedLM,
    ErnieZooForSequenceClassification,
    ErnieZooForTokenClassification,
    ErnieZooModel,
)

from .modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

# transformers' mixin looks heads up by class name in its static `*_MAPPING_NAMES` tables (which heads get labels,
# which are base models); a model inside transformers is listed there, so for the tests ours are too.
NAME_TABLES = {
    "MODEL_MAPPING_NAMES": ErnieZooModel,
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": ErnieZooForMaskedLM,
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": ErnieZooForCausalLM,
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": ErnieZooForSequenceClassification,
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": ErnieZooForTokenClassification,
}


def setUpModule():
    from transformers.models.auto import modeling_auto

    for table, cls in NAME_TABLES.items():
        getattr(modeling_auto, table)[ErnieZooConfig.model_type] = cls.__name__


def tearDownModule():
    from transformers.models.auto import modeling_auto

    for table in NAME_TABLES:
        getattr(modeling_auto, table).pop(ErnieZooConfig.model_type, None)


class ErnieZooModelTester:
    def __init__(self, parent, features: dict, batch_size=13, seq_length=7, vocab_size=99, hidden_size=32):
        self.parent = parent
        self.features = features
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = True
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 37
        self.type_vocab_size = 16
        self.num_labels = 3
        self.pinyin_vocab_size = 60  # 10 syllables x 6 tones

    def get_config(self) -> ErnieZooConfig:
        return ErnieZooConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act="gelu",
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            max_position_embeddings=512,
            type_vocab_size=self.type_vocab_size,
            initializer_range=0.02,
            num_labels=self.num_labels,
            pinyin_vocab_size=self.pinyin_vocab_size,
            **self.features,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        inputs = {
            "input_ids": input_ids,
            "token_type_ids": ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size),
            "attention_mask": random_attention_mask([self.batch_size, self.seq_length]),
            "pinyin_ids": ids_tensor([self.batch_size, self.seq_length], self.pinyin_vocab_size),
        }
        return self.get_config(), inputs


class _ErnieZooCommonTests(ModelTesterMixin):
    features: dict = {}
    all_model_classes = tuple(NAME_TABLES.values())

    def setUp(self):
        self.model_tester = ErnieZooModelTester(self, self.features)

    @unittest.skip("harness: needs GenerationTesterMixin, which the transformers sdist does not ship")
    def test_generation_tester_mixin_inheritance(self):
        pass


class ErnieZooFeaturesOffTest(_ErnieZooCommonTests, unittest.TestCase):
    features = dict(use_pinyin=False, use_radical=False, use_strokes=False)


class ErnieZooAdditiveTest(_ErnieZooCommonTests, unittest.TestCase):
    features = dict(use_pinyin=True, use_radical=True, use_strokes=True)


class ErnieZooConcatStrokeSequenceTest(_ErnieZooCommonTests, unittest.TestCase):
    features = dict(use_stroke_sequence=True, feature_fusion="concat", char_feature_dim=8)

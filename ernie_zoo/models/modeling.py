"""ErnieZoo models: transformers' ERNIE plus one module, `CharFeatureEmbeddings`.

Everything but the embeddings is transformers' ERNIE/BERT code, unchanged (the pattern of transformers'
`modular_ernie.py`, which writes ERNIE as a diff over BERT). The added module turns each token into its
character features and fuses them with the word embedding before ERNIE adds positions and token types:

    input_ids (B, T) ──┬── word_embeddings ───────────────────────────┐
                       ├── radical_ids[id]  ── radical embedding ──────┤  add:    w + p + r + s (+ q)
                       ├── stroke_counts[id] ─ stroke-count embedding ─┤  concat: Linear([w; p; r; s (; q)])
                       └── stroke_seqs[id] ─── stroke-type seq, mean ──┤
    pinyin_ids (B, T) ──── syllable embedding + tone embedding ────────┘
                                   │
               ERNIE embeddings (+ position, token type, task type, LayerNorm) → encoder → heads

The per-token tables (radical, strokes, stroke sequence, default pinyin) are persistent buffers: they are
saved in model.safetensors and filled from the tokenizer's vocabulary by `load_char_tables`, never read from
a path in `__init__`, so meta-device and ZeRO-3 initialisation work.

Feature embeddings are initialised so that a model converted from a plain ERNIE/BERT checkpoint computes
exactly what the original did: additive features start at zero; with concat fusion the features start random
and the fusion layer starts as [I | 0] (a zero block would never receive a gradient if the features were zero
too).
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import LogitsProcessorList
from transformers import initialization as init
from transformers.models.ernie.modeling_ernie import (
    ErnieEmbeddings,
    ErnieEncoder,
    ErnieForCausalLM,
    ErnieForMaskedLM,
    ErnieForSequenceClassification,
    ErnieForTokenClassification,
    ErnieModel,
    ErnieOnlyMLMHead,
    ErniePooler,
    ErniePreTrainedModel,
)
from transformers.utils import cached_file

from ernie_zoo.text.lexicon import token_masks
from ernie_zoo.text.sentiment import SentimentLexicon, char_features, load_sentiment_lexicon

from .configuration import ErnieZooConfig
from .crf import LinearChainCRF
from .generation import decoding_processors
from .heads import HeadInputs, HeadInputsMixin, head_forward
from .registry import check_loadable, register
from .storage import load_stored_state_dict, stored_weights_file

logger = logging.getLogger(__name__)

NUM_TONES = 6  # 0 = none, 1-4, 5 = neutral; pinyin_id = syllable_id * NUM_TONES + tone
CHAR_TABLES = ("default_pinyin_ids", "radical_ids", "stroke_counts", "stroke_seqs")


class CharFeatureEmbeddings(nn.Module):
    """Pinyin, radical and stroke embeddings of each token, fused with its word embedding."""

    def __init__(self, config: ErnieZooConfig):
        super().__init__()
        self.fusion_mode = config.feature_fusion
        dim = config.hidden_size if self.fusion_mode == "add" else config.char_feature_dim
        vocab = config.vocab_size
        n_features = 0
        # Row 0 of every table means "not a Han character": padding_idx keeps it a zero vector.
        if config.use_pinyin:
            self.pinyin_syllable = nn.Embedding(config.pinyin_vocab_size // NUM_TONES, dim, padding_idx=0)
            self.pinyin_tone = nn.Embedding(NUM_TONES, dim, padding_idx=0)
            self.default_pinyin_ids = nn.Buffer(torch.zeros(vocab, dtype=torch.long))
            n_features += 1
        if config.use_radical:
            self.radical = nn.Embedding(config.num_radicals + 1, dim, padding_idx=0)
            self.radical_ids = nn.Buffer(torch.zeros(vocab, dtype=torch.long))
            n_features += 1
        if config.use_strokes:
            self.strokes = nn.Embedding(config.max_strokes + 1, dim, padding_idx=0)
            self.stroke_counts = nn.Buffer(torch.zeros(vocab, dtype=torch.long))
            n_features += 1
        if config.use_stroke_sequence:
            self.stroke_types = nn.Embedding(6, dim, padding_idx=0)  # 1..5 = h s p n z
            self.stroke_positions = nn.Embedding(config.stroke_seq_len, dim)
            self.stroke_seqs = nn.Buffer(torch.zeros(vocab, config.stroke_seq_len, dtype=torch.long))
            n_features += 1
        if self.fusion_mode == "concat":
            self.fusion = nn.Linear(config.hidden_size + n_features * dim, config.hidden_size)
        self._warned_empty = False

    def _stroke_sequence(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Pool once per distinct token in the batch, not per position: (U, L, d) instead of (B, T, L, d).
        unique, inverse = torch.unique(input_ids, return_inverse=True)
        seqs = self.stroke_seqs[unique]  # (U, L)
        valid = (seqs > 0).unsqueeze(-1).to(self.stroke_types.weight.dtype)  # (U, L, 1)
        emb = (self.stroke_types(seqs) + self.stroke_positions.weight) * valid  # (U, L, d)
        pooled = emb.sum(1) / valid.sum(1).clamp(min=1)  # (U, d)
        return pooled[inverse]  # (B, T, d)

    def forward(
        self, word_embeds: torch.Tensor, input_ids: torch.Tensor, pinyin_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not self._warned_empty and hasattr(self, "radical_ids") and not torch.jit.is_tracing():
            self._warned_empty = True
            if self.radical_ids.device.type != "meta" and int(self.radical_ids.max()) == 0:
                logger.warning(
                    "Character tables are empty: call model.load_char_tables(tokenizer) so radical/stroke "
                    "features see real values."
                )
        features = []
        if hasattr(self, "pinyin_syllable"):
            if pinyin_ids is None:
                pinyin_ids = self.default_pinyin_ids[input_ids]
            elif pinyin_ids.shape != input_ids.shape:
                raise ValueError(
                    f"pinyin_ids shape {tuple(pinyin_ids.shape)} != input_ids shape {tuple(input_ids.shape)}"
                )
            features.append(
                self.pinyin_syllable(pinyin_ids // NUM_TONES) + self.pinyin_tone(pinyin_ids % NUM_TONES)
            )
        if hasattr(self, "radical"):
            features.append(self.radical(self.radical_ids[input_ids]))
        if hasattr(self, "strokes"):
            features.append(self.strokes(self.stroke_counts[input_ids]))
        if hasattr(self, "stroke_types"):
            features.append(self._stroke_sequence(input_ids))
        if self.fusion_mode == "add":
            return word_embeds + sum(features)
        return self.fusion(torch.cat([word_embeds, *features], dim=-1))


class ErnieZooEmbeddings(ErnieEmbeddings):
    def __init__(self, config: ErnieZooConfig):
        super().__init__(config)
        self.char_features = CharFeatureEmbeddings(config) if config.use_char_features else None

    def embed_tokens(self, input_ids: torch.Tensor, pinyin_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Word embedding fused with the character features: (B, T) -> (B, T, hidden)."""
        embeds = self.word_embeddings(input_ids)
        if self.char_features is not None:
            embeds = self.char_features(embeds, input_ids, pinyin_ids)
        return embeds


class ErnieZooPreTrainedModel(ErniePreTrainedModel):
    config_class = ErnieZooConfig
    config: ErnieZooConfig
    base_model_prefix = "ernie"

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' `from_pretrained`, which also reads a local directory whose model.safetensors is in a
        storage format (`ernie_zoo.models.storage`: int8 rows, Q4_0 blocks): dequantised to float, then loaded as
        usual; then the files a head keeps next to its weights (`load_saved_files`: a lexicon) are read."""
        path = pretrained_model_name_or_path
        hub = {k: kwargs[k] for k in ("cache_dir", "revision", "local_files_only", "token") if k in kwargs}
        stored = None
        if path is not None and os.path.isdir(path):
            check_loadable(cls, path, kwargs.get("config"))
            if "state_dict" not in kwargs:
                stored = stored_weights_file(path)
        if stored is None:
            loaded = super().from_pretrained(path, *args, **kwargs)
        else:
            config = kwargs.pop("config", None)
            if config is None:
                config, kwargs = cls.config_class.from_pretrained(path, return_unused_kwargs=True, **kwargs)
            kwargs["state_dict"] = load_stored_state_dict(*stored)
            loaded = super().from_pretrained(None, *args, config=config, **kwargs)
        if path is not None:
            (loaded[0] if isinstance(loaded, tuple) else loaded).load_saved_files(path, **hub)
        return loaded

    def load_saved_files(self, model_name_or_path: str | os.PathLike, **hub_kwargs) -> None:
        """Read what this head saves next to its weights (`save_saved_files`; from a local directory, or a hub repo
        through the hub cache, found with `saved_file`): nothing here; the lexicon-reading heads read their lexicon,
        the spelling corrector its confusion sets and n-gram LM."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        self.save_saved_files(Path(save_directory))

    def save_saved_files(self, directory: Path) -> None:
        """Write what this head keeps next to its weights (read back by `load_saved_files`): nothing here."""

    def _add_classifier(self, config: ErnieZooConfig, add_pooling_layer: bool) -> None:
        """`ernie`, `dropout` and `classifier` of a classification head, as transformers' ERNIE heads name them."""
        self.num_labels = config.num_labels
        self.ernie = ErnieZooModel(config, add_pooling_layer=add_pooling_layer)
        dropout = config.classifier_dropout
        self.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def _init_weights(self, module):
        super()._init_weights(module)
        # `apply` visits children before parents, so this overrides the generic Embedding/Linear init.
        # A pooler missing from the checkpoint (our masked-LM bases have none) starts as tanh(h_[CLS]): the same on
        # every load, so a classifier trained on top of it (a peft adapter, whose files hold no pooler) reloads to
        # the same logits. Its Linear is matched, as ErniePooler itself holds no tensors and is never visited.
        pooler = getattr(self.base_model, "pooler", None)
        if pooler is not None and module is pooler.dense:
            init.copy_(module.weight, torch.eye(*module.weight.shape, dtype=module.weight.dtype))
            init.zeros_(module.bias)
        if module is getattr(self, "lexicon_proj", None):
            init.zeros_(module.weight)  # a lexicon added to a trained model changes nothing at first
        if isinstance(module, LinearChainCRF):  # zero transitions: a CRF starts as the per-token classifier
            for p in module.parameters():
                init.zeros_(p)
        if isinstance(module, CharFeatureEmbeddings):
            # Tables missing from a checkpoint (one saved by a stock ERNIE/BERT) would otherwise stay uninitialised
            # memory; zeros mean "not a Han character" until `load_char_tables` fills them.
            for table in module.buffers(recurse=False):  # the CHAR_TABLES it has
                init.zeros_(table)
            for emb in module.children():  # the feature embeddings it has (and `fusion`, set below)
                if not isinstance(emb, nn.Embedding):
                    continue
                if module.fusion_mode == "add":
                    init.zeros_(emb.weight)
                elif not getattr(emb.weight, "_is_hf_initialized", False):
                    init.normal_(emb.weight, std=self.config.initializer_range)
                    if emb.padding_idx is not None:
                        init.zeros_(emb.weight[emb.padding_idx])
            if module.fusion_mode == "concat":
                hidden = self.config.hidden_size
                identity = torch.zeros_like(module.fusion.weight)
                identity[:, :hidden] = torch.eye(hidden, dtype=identity.dtype, device=identity.device)
                init.copy_(module.fusion.weight, identity)
                init.zeros_(module.fusion.bias)

    def resize_token_embeddings(
        self,
        new_num_tokens: int | None = None,
        pad_to_multiple_of: int | None = None,
        mean_resizing: bool = True,
        tokenizer=None,
    ) -> nn.Embedding:
        """transformers' `resize_token_embeddings`, which also resizes the per-token character tables.

        Rows of new tokens are looked up in the packaged character tables when `tokenizer` (the tokenizer the new
        tokens were added to) is given, and are neutral (zero: "not a Han character") otherwise;
        `load_char_tables(tokenizer)` afterwards fills them too. Kept rows are left as they are.
        """
        features = self.base_model.embeddings.char_features
        old = self.config.vocab_size
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        new = embeddings.weight.shape[0]
        if features is None or new == old:
            return embeddings
        looked_up = tokenizer.char_feature_tables(vocab_size=new) if tokenizer is not None else None
        for name, table in list(features.named_buffers(recurse=False)):  # the CHAR_TABLES it has
            resized = table.new_zeros((new, *table.shape[1:]))
            kept = min(old, new)
            resized[:kept] = table[:kept]
            if looked_up is not None and new > old:
                rows = torch.as_tensor(looked_up[name][old:new], device=table.device)
                if name == "stroke_seqs":
                    rows = rows[:, : table.shape[1]]
                if name == "stroke_counts":
                    rows = rows.clamp(max=self.config.max_strokes)
                resized[old:] = rows
            setattr(features, name, nn.Buffer(resized))
        if tokenizer is None and new > old:
            logger.info(
                "resize_token_embeddings: the %d new tokens get neutral character-table rows; pass tokenizer= "
                "(or call load_char_tables(tokenizer)) to give new Han characters their pinyin/radical/strokes",
                new - old,
            )
        return embeddings

    def load_char_tables(self, tables) -> None:
        """Fill the per-token feature tables from a tokenizer (or a dict of tensors from it).

        `tables` is an `ErnieZooTokenizerFast` or the dict its `char_feature_tables()` returns.
        """
        if hasattr(tables, "char_feature_tables"):
            tables = tables.char_feature_tables(vocab_size=self.config.vocab_size)
        features = self.base_model.embeddings.char_features
        if features is None:
            return
        for name, buffer in features.named_buffers(recurse=False):  # the CHAR_TABLES it has
            value = torch.as_tensor(tables[name])
            if name == "stroke_seqs":
                value = value[:, : buffer.shape[1]]
            if value.shape != buffer.shape:
                raise ValueError(
                    f"char table {name!r} has shape {tuple(value.shape)}, the model expects {tuple(buffer.shape)} "
                    "(does the tokenizer vocabulary match config.vocab_size?)"
                )
            if name == "stroke_counts":
                value = value.clamp(max=self.config.max_strokes)
            buffer.copy_(value)
        features._warned_empty = False


@register("feature-extraction", default=True)
class ErnieZooModel(ErnieZooPreTrainedModel, ErnieModel):
    """ERNIE encoder (or decoder, with `is_decoder=True`) whose token embeddings carry character features."""

    def __init__(self, config: ErnieZooConfig, add_pooling_layer: bool = True):
        ErnieZooPreTrainedModel.__init__(self, config)
        self.gradient_checkpointing = False
        self.embeddings = ErnieZooEmbeddings(config)
        self.encoder = ErnieEncoder(config)
        self.pooler = ErniePooler(config) if add_pooling_layer else None
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        *,
        pinyin_ids: torch.Tensor | None = None,
        **kwargs,
    ):
        r"""
        pinyin_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Context-aware pinyin of each token, `syllable_id * 6 + tone` (0 for non-Han tokens), as produced by
            `ErnieZooTokenizerFast`. Without them each token's most common reading is used. Ignored when
            `inputs_embeds` is given (the character features need token ids).
        """
        tokens = input_ids if input_ids is not None else inputs_embeds
        if tokens is not None and position_ids is None:
            past = kwargs.get("cache", kwargs.get("past_key_values"))
            length = tokens.shape[1] + (past.get_seq_length() if past is not None else 0)
            if length > self.config.max_position_embeddings:
                raise ValueError(
                    f"sequence length {length} exceeds max_position_embeddings "
                    f"({self.config.max_position_embeddings}); tokenize with truncation=True, max_length=..."
                )
        if input_ids is not None and inputs_embeds is None and self.embeddings.char_features is not None:
            inputs_embeds = self.embeddings.embed_tokens(input_ids, pinyin_ids)
            input_ids = None
        outputs = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            task_type_ids=task_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        if self.pooler is not None and getattr(self.config, "pooling", "cls") == "mean":
            hidden = outputs.last_hidden_state  # (B, T, H)
            if attention_mask is None or attention_mask.dim() != 2:
                weights = torch.ones(hidden.shape[:2], dtype=hidden.dtype, device=hidden.device)
            else:
                weights = attention_mask.to(hidden.dtype)
            mean = (hidden * weights[..., None]).sum(1) / weights.sum(1, keepdim=True).clamp(min=1)  # (B, H)
            outputs["pooler_output"] = self.pooler(mean[:, None, :])  # the pooler reads position 0
        return outputs


def _forward_of(parent: type):
    """`parent.forward` (a transformers ERNIE head's) with the shared head inputs (`heads.head_forward`): the heads
    below differ from transformers' only in building an ErnieZooModel and in the inputs they name."""

    @head_forward
    def forward(self, inputs: HeadInputs, **kwargs):
        return parent.forward(self, labels=inputs.labels, **self.encoder_inputs(inputs, kwargs))

    return forward


@register("fill-mask", default=True)
class ErnieZooForMaskedLM(HeadInputsMixin, ErnieZooPreTrainedModel, ErnieForMaskedLM):
    def __init__(self, config: ErnieZooConfig):
        ErnieZooPreTrainedModel.__init__(self, config)
        self.ernie = ErnieZooModel(config, add_pooling_layer=False)
        self.cls = ErnieOnlyMLMHead(config)
        # SKEP's sentiment-word polarity head, next to the MLM head: `config.num_word_polarities` (2 when
        # ernie-pretrain has a sentiment masking stage; absent or 0: no head) classes from the final hidden state
        # of each masked sentiment-word token. Trained by ernie_zoo.training.mlm.masked_lm_loss, never used by
        # forward(); other heads loading this checkpoint leave its weights unused.
        n_polarities = int(getattr(config, "num_word_polarities", 0) or 0)
        self.word_polarity = nn.Linear(config.hidden_size, n_polarities) if n_polarities else None
        self.post_init()

    forward = _forward_of(ErnieForMaskedLM)


SENTIMENT_LEXICON_FILE = "sentiment_lexicon.tsv"
# an [UNK] token's text when the lexicon bits are computed from token ids (never a lexicon word)
_UNKNOWN = "\u25a1"


def token_texts(vocab: dict[str, int], special: Iterable[str], unk_token: str | None = None) -> list[str]:
    """Each token id's text as it stands in the input: WordPiece's `##` dropped, '' for special tokens ([CLS],
    [SEP], [PAD], [MASK]), a placeholder for [UNK]."""
    special = set(special)
    out = [""] * (max(vocab.values(), default=-1) + 1)
    for token, i in vocab.items():
        if token == unk_token:
            out[i] = _UNKNOWN
        elif token not in special:
            out[i] = token[2:] if token.startswith("##") and len(token) > 2 else token
    return out


def sentiment_lexicon_ids(
    rows: Sequence[Sequence[int]], texts: Sequence[str], lexicon: SentimentLexicon
) -> list[list[int]]:
    """The sentiment-lexicon bits (`lexicon_ids`) of rows of token ids: the text the tokens spell (`texts`:
    `token_texts` of the vocabulary) read by `char_features`, each token the OR of its characters' bits."""
    out = []
    for row in rows:
        pieces = [texts[i] if 0 <= i < len(texts) else _UNKNOWN for i in row]
        offsets, end = [], 0
        for piece in pieces:
            offsets.append((end, end + len(piece)))
            end += len(piece)
        out.append(token_masks(char_features("".join(pieces), lexicon), offsets))
    return out


def saved_file(model_name_or_path: str | os.PathLike, name: str, **hub_kwargs) -> str | None:
    """The file `name` saved next to a model (a local directory, or a hub repo through the hub cache, as the weights
    are found), or None when it has none."""
    return cached_file(
        str(model_name_or_path), name, _raise_exceptions_for_missing_entries=False, **hub_kwargs
    )


def _tokenizer_texts(model_name_or_path: str | os.PathLike, **hub_kwargs) -> list[str] | None:
    """`token_texts` of the tokenizer.json saved next to a model, or None when there is none."""
    path = saved_file(model_name_or_path, "tokenizer.json", **hub_kwargs)
    if path is None:
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    special = [t["content"] for t in data.get("added_tokens", []) if t.get("special")]
    return token_texts(data["model"]["vocab"], special, data["model"].get("unk_token"))


@register("text-classification", default=True)
class ErnieZooForSequenceClassification(
    HeadInputsMixin, ErnieZooPreTrainedModel, ErnieForSequenceClassification
):
    """Sequence classification; with `config.sentiment_features` (the bit names of
    `ernie_zoo.text.sentiment.FEATURES`) it also reads each token's sentiment-lexicon bits (`lexicon_ids`), added
    before the encoder by `lexicon_proj` as the NER tagger reads its entity lexicon.

    The model computes the bits itself from `input_ids`: the tokens' texts joined (`token_texts` of the vocabulary
    it was trained with) are read by `ernie_zoo.text.sentiment.char_features` and each token gets the OR of its
    characters' bits. So `forward(input_ids)` is all a caller gives, and transformers' pipeline, peft, Taskflow and
    the fine-tuning loop all compute the same bits. The lexicon is saved next to the weights
    (`sentiment_lexicon.tsv`) and read back, with the vocabulary of the tokenizer.json beside it, by
    `from_pretrained`; explicit `lexicon_ids` are used as given."""

    sentiment_lexicon: SentimentLexicon | None = None  # set by from_pretrained or the fine-tuning loop
    _token_texts: list[str] | None = None

    def __init__(self, config: ErnieZooConfig):
        ErnieZooPreTrainedModel.__init__(self, config)
        self._add_classifier(config, add_pooling_layer=True)
        self._add_lexicon_input(len(getattr(config, "sentiment_features", None) or []))
        self.post_init()

    @property
    def reads_lexicon(self) -> bool:
        return self.lexicon_proj is not None

    def set_sentiment_lexicon(
        self, lexicon: SentimentLexicon | None, texts: Sequence[str] | None = None
    ) -> None:
        """Attach the lexicon whose bits `lexicon_ids` encode (a model with `config.sentiment_features`) and the
        text of each token id (`token_texts` of the tokenizer's vocabulary), which the bits are computed from."""
        if lexicon is not None and not self.reads_lexicon:
            raise ValueError("this classifier reads no lexicon bits (config.sentiment_features is not set)")
        if texts is not None and len(texts) > self.config.vocab_size:
            raise ValueError(f"{len(texts)} token texts for a vocabulary of {self.config.vocab_size}")
        self.sentiment_lexicon = lexicon
        self._token_texts = list(texts) if texts is not None else self._token_texts

    def save_saved_files(self, directory: Path) -> None:
        if self.sentiment_lexicon is not None:
            self.sentiment_lexicon.save(directory / SENTIMENT_LEXICON_FILE)

    def load_sentiment_lexicon(self, model_name_or_path: str | os.PathLike, **hub_kwargs) -> None:
        """Attach the lexicon saved with a model (a local directory, or a hub repo through the hub cache) and its
        tokenizer's token texts, if it has them and this classifier reads lexicon bits."""
        if not self.reads_lexicon:
            return
        path = saved_file(model_name_or_path, SENTIMENT_LEXICON_FILE, **hub_kwargs)
        if path is not None:
            self.set_sentiment_lexicon(
                load_sentiment_lexicon(path), _tokenizer_texts(model_name_or_path, **hub_kwargs)
            )

    load_saved_files = load_sentiment_lexicon

    def _lexicon_ids_for(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        if self.sentiment_lexicon is None or self._token_texts is None:
            return None
        rows = sentiment_lexicon_ids(input_ids.tolist(), self._token_texts, self.sentiment_lexicon)
        return torch.tensor(rows, dtype=torch.long, device=input_ids.device)

    forward = _forward_of(ErnieForSequenceClassification)


@register("token-classification", default=True)
class ErnieZooForTokenClassification(HeadInputsMixin, ErnieZooPreTrainedModel, ErnieForTokenClassification):
    def __init__(self, config: ErnieZooConfig):
        ErnieZooPreTrainedModel.__init__(self, config)
        self._add_classifier(config, add_pooling_layer=False)
        self.post_init()

    forward = _forward_of(ErnieForTokenClassification)


@register("text-generation", default=True)
class ErnieZooForCausalLM(HeadInputsMixin, ErnieZooPreTrainedModel, ErnieForCausalLM):
    """Left-to-right ERNIE decoder for `generate()` (greedy, sampling, beam search; KV cache).

    Set `is_decoder=True` in the config (done automatically here, on a copy) so attention is causal. `generate()`
    also applies the ernie-zoo decoding keys of generation_config.json (`eos_min_prob`, `poem_format`; see
    `ernie_zoo.models.generation`), so transformers' text-generation pipeline decodes as Taskflow does.
    """

    def __init__(self, config: ErnieZooConfig):
        if not config.is_decoder:  # on a copy: the caller's config may build an encoder next
            config = copy.deepcopy(config)
            config.is_decoder = True
        ErnieZooPreTrainedModel.__init__(self, config)
        self.ernie = ErnieZooModel(config, add_pooling_layer=False)
        self.cls = ErnieOnlyMLMHead(config)
        self.post_init()

    forward = _forward_of(ErnieForCausalLM)

    def _get_logits_processor(self, generation_config, *args, **kwargs):
        # `eos_min_prob` / `poem_format` of generation_config.json (models/generation.py), where the caller has not
        # passed processors of those types itself; inserted with the caller's, before the sampling warpers.
        names = ("input_ids_seq_length", "encoder_input_ids", "prefix_allowed_tokens_fn", "logits_processor")
        bound = dict(zip(names, args)) | kwargs
        own = list(bound.get("logits_processor") or [])
        features = self.ernie.embeddings.char_features
        radical_ids = getattr(features, "radical_ids", None) if features is not None else None
        extra = decoding_processors(generation_config, radical_ids, bound.get("encoder_input_ids"), own)
        if extra:
            bound["logits_processor"] = LogitsProcessorList([*own, *extra])
        return super()._get_logits_processor(generation_config, **bound)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        next_sequence_length: int | None = None,
        cache=None,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        is_first_iteration: bool | None = False,
        pinyin_ids: torch.Tensor | None = None,
        **kwargs,
    ):
        # Tokens produced by generate() have no context-aware pinyin, and per-step slicing of a prompt-length
        # tensor would misalign with the KV cache; every position uses its token's default reading instead,
        # so the prompt and the continuation are embedded the same way. The parameters are spelled out because
        # generate() reads this signature (`inputs_embeds` must appear in it).
        return super().prepare_inputs_for_generation(
            input_ids,
            next_sequence_length=next_sequence_length,
            cache=cache,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            is_first_iteration=is_first_iteration,
            **kwargs,
        )


__all__ = [
    "CharFeatureEmbeddings",
    "ErnieZooForCausalLM",
    "ErnieZooForMaskedLM",
    "ErnieZooForSequenceClassification",
    "ErnieZooForTokenClassification",
    "ErnieZooModel",
    "ErnieZooPreTrainedModel",
]

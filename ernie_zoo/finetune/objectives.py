"""The fine-tuning tasks (the recipe's `task:` values), each an `Objective`: read examples, encode them, pick the
model head, evaluate predictions. (`run.FinetuneJob` is the run that trains an objective, on
`training.supervised`; a Taskflow task is inference, in ernie_zoo.taskflow.)

| task                    | head                                            | default dev metric            |
|-------------------------|-------------------------------------------------|-------------------------------|
| sequence_classification | ErnieZooForSequenceClassification               | accuracy (micro_f1 multi-label)|
| token_classification    | ErnieZooForTokenClassification (or ...CRF)      | entity f1 (exact spans)       |
| generation              | ErnieZooForCausalLM                             | loss (lower is better)        |
| text_correction         | ErnieZooForSpellingCorrection                   | sentence_f1                   |
| instruction             | Ernie4_5ForCausalLM / Ernie4_5_MoeForCausalLM   | loss (lower is better)        |
| information_extraction  | ErnieZooForSpanExtraction                       | span f1 over prompts          |
| preference              | an ERNIE 4.5 decoder, trained by a `PreferenceLoss`       | loss (lower is better)        |

`generation` continues a text with the zoo's encoder-style causal LM (`[CLS] prompt continuation [SEP]`, no
template); `instruction` teaches an ERNIE 4.5 decoder to answer prompts in a chat format that is saved with the
tokenizer (`chat_template`), so plain transformers' `apply_chat_template` gives the prompts it was trained on
(rows are prompt / response pairs or whole conversations, learnt on their assistant turns); `preference` tunes the
same decoders on prompt / chosen / rejected rows with DPO, IPO, ORPO or SimPO (`training.preference`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ernie_zoo.data.annotations import (
    PromptExample,
    detect_annotation_format,
    prompt_examples,
    read_annotations,
    read_prompt_examples,
)
from ernie_zoo.data.labelled import read_text_file, seeded_split
from ernie_zoo.models import ErnieZooForCausalLM, ErnieZooForSequenceClassification
from ernie_zoo.models.correction import ErnieZooForSpellingCorrection, candidate_table, decode_corrections
from ernie_zoo.models.crf_tagger import LEXICON_FILE
from ernie_zoo.models.decoder import begin_end_tokens, chat_ids_and_labels, chat_prompt_ids, chat_template_for
from ernie_zoo.models.generation import greedy_continuations
from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE, saved_file, sentiment_lexicon_ids, token_texts
from ernie_zoo.models.registry import model_class_for
from ernie_zoo.models.span_extraction import END, START, ErnieZooForSpanExtraction, pair_pointers
from ernie_zoo.text.confusion import ConfusionSets, is_cjk
from ernie_zoo.text.correction import correction_scores
from ernie_zoo.text.lexicon import EntityLexicon
from ernie_zoo.text.metrics import char_f1, classification_scores, entity_scores, multilabel_scores
from ernie_zoo.text.sentences import chunk_spans
from ernie_zoo.text.sentiment import FEATURES, SentimentLexicon, load_sentiment_lexicon
from ernie_zoo.text.tags import Span, label_names, spans_to_tags, tags_to_spans
from ernie_zoo.tokenization import ErnieZooTokenizerFast
from ernie_zoo.training.preference import PreferenceLoss, metric_means
from ernie_zoo.training.supervised import IGNORE, collate

from .data import (
    ClassificationExample,
    CorrectionExample,
    GenerationExample,
    InstructionExample,
    NerExample,
    PreferenceExample,
    check_labels,
    load_split,
)

logger = logging.getLogger(__name__)

LOWER_IS_BETTER = {"loss", "perplexity"}


def batches(features: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for i in range(0, len(features), size):
        yield features[i : i + size]


class Objective:
    """Base class: reads the splits named in `args.data`; subclasses encode, pick heads and score."""

    name = ""
    default_metric = "loss"
    decoder = False  # fine-tunes an ERNIE 4.5 decoder (transformers' classes), not an ErnieZoo model

    def __init__(self, args):
        self.args = args
        self.data_args = args.data
        self.splits: dict[str, list[Any]] = {}
        self.where: dict[str, str] = {}

    # --------------------------------------------------------------- data
    def read(self) -> None:
        for split in ("train", "dev", "test"):
            loaded = load_split(self.data_args, self.name, split)
            if loaded is not None:
                self.splits[split], self.where[split] = loaded
        self.setup_labels()

    def setup_labels(self) -> None:
        """Fix the label set from the arguments or the training data; check every split against it."""

    def vocab_texts(self) -> Iterator[str]:
        raise NotImplementedError

    def encode(self, examples: Sequence[Any], tokenizer) -> list[dict[str, Any]]:
        raise NotImplementedError

    # --------------------------------------------------------------- model
    def model_class(self) -> type:
        raise NotImplementedError

    def config_updates(self) -> dict[str, Any]:
        return {}

    def attach(self, model: nn.Module, tokenizer) -> list[str]:
        """Give the freshly built model what it needs besides weights (the NER entity lexicon); returns the
        modules that adapter methods must train in full (the lexicon's input projection)."""
        return []

    def _lexicon_path(self, saved_name: str) -> str | Path | None:
        """data.lexicon (it must exist), else the file `saved_name` a base model was saved with, else None."""
        if self.data_args.lexicon:
            path = Path(self.data_args.lexicon).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"data.lexicon: no such file: {path}")
            return path
        base = self.args.model.model_name_or_path
        return saved_file(Path(base).expanduser(), saved_name) if base else None

    # --------------------------------------------------------------- evaluation
    @property
    def metric(self) -> str:
        return self.args.train.metric or self.default_metric

    def greater_is_better(self) -> bool:
        return self.metric not in LOWER_IS_BETTER

    @torch.no_grad()
    def _forward_all(self, model: nn.Module, features, batch_size: int, device, pad_id: int):
        """Yield (batch features, model outputs) in eval mode; the model's train/eval mode is restored."""
        was_training = model.training
        model.eval()
        try:
            for chunk in batches(features, batch_size):
                inputs = {k: v.to(device) for k, v in collate(chunk, pad_id).items()}
                yield chunk, inputs, model(**inputs)
        finally:
            model.train(was_training)

    def evaluate(
        self, model: nn.Module, features, examples, tokenizer, batch_size: int, device
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _generation_scores(
        self, model, features, examples, tokenizer, batch_size, device, reference: str
    ) -> dict[str, Any]:
        """A generating objective's scores: the loss (a mean over predicted tokens: batches weighted by their
        token count) and perplexity on every example, and char F1 of greedy continuations of the first
        `n_samples` prompts against each example's `reference` attribute (the first four kept as samples)."""
        loss_sum, tokens = 0.0, 0
        for _, inputs, out in self._forward_all(model, features, batch_size, device, tokenizer.pad_token_id):
            n_tok = int((inputs["labels"][:, 1:] != IGNORE).sum())
            loss_sum += float(out.loss) * n_tok
            tokens += n_tok
        loss = loss_sum / max(tokens, 1)
        sample = [examples[f["_index"]] for f in features[: self.n_samples]]
        refs = [getattr(ex, reference) for ex in sample]
        max_new = min(64, max(len(r) for r in refs) + 1) if sample else 1
        hyps = self.generate(model, tokenizer, [ex.prompt for ex in sample], max_new, device)
        return {
            "loss": loss,
            "perplexity": math.exp(min(loss, 50.0)),
            "char_f1": sum(char_f1(h, r) for r, h in zip(refs, hyps)) / max(len(sample), 1),
            "samples": [
                {"prompt": ex.prompt, "reference": r, "generated": h}
                for ex, r, h in zip(sample[:4], refs[:4], hyps[:4])
            ],
        }


# ===================================================================== sequence classification


class SequenceClassificationObjective(Objective):
    name = "sequence_classification"

    @property
    def default_metric(self) -> str:  # type: ignore[override]
        return "micro_f1" if self.data_args.multi_label else "accuracy"

    def setup_labels(self) -> None:
        if self.data_args.labels:
            labels = list(self.data_args.labels)
            if len(set(labels)) != len(labels):
                raise ValueError(f"data.labels has duplicates: {labels}")
        else:
            labels = sorted({label for ex in self.splits["train"] for label in ex.labels})
        if len(labels) < 2 and not self.data_args.multi_label:
            raise ValueError(f"{self.where['train']}: need at least 2 distinct labels, found {labels}")
        for split, examples in self.splits.items():
            check_labels(examples, labels, self.where[split], "label")
        self.labels = labels
        self.lexicon = self._read_lexicon()

    def _read_lexicon(self) -> SentimentLexicon | None:
        """data.lexicon (a sentiment lexicon), else the lexicon a base model was saved with."""
        path = self._lexicon_path(SENTIMENT_LEXICON_FILE)
        if path is None:
            return None
        lexicon = load_sentiment_lexicon(path)
        if not lexicon.words:
            raise ValueError(f"data.lexicon: {path} holds no sentiment words")
        logger.info("sentiment lexicon %s: %d entries", path, len(lexicon))
        return lexicon

    def attach(self, model: nn.Module, tokenizer) -> list[str]:
        if self.lexicon is None:
            return []
        # the model computes the bits from its input ids: it spells them with the tokenizer's token texts
        model.set_sentiment_lexicon(self.lexicon, self._token_texts(tokenizer))
        return ["lexicon_proj"]

    @staticmethod
    def _token_texts(tokenizer) -> list[str]:
        return token_texts(tokenizer.get_vocab(), tokenizer.all_special_tokens, tokenizer.unk_token)

    def vocab_texts(self) -> Iterator[str]:
        for ex in self.splits["train"]:
            yield ex.text
            if ex.text_pair:
                yield ex.text_pair

    def encode(self, examples: Sequence[ClassificationExample], tokenizer) -> list[dict[str, Any]]:
        texts = [ex.text for ex in examples]
        pairs = [ex.text_pair for ex in examples] if self.data_args.text_pair_column else None
        enc = tokenizer(texts, pairs, truncation=True, max_length=self.data_args.max_length)
        index = {label: i for i, label in enumerate(self.labels)}
        # The bits the model would compute from the ids (ErnieZooForSequenceClassification), computed here once,
        # before token_dropout replaces tokens by [MASK]: a masked token keeps its bits, as the NER tagger's do.
        lexicon_ids = (
            sentiment_lexicon_ids(enc["input_ids"], self._token_texts(tokenizer), self.lexicon)
            if self.lexicon is not None
            else None
        )
        features = []
        for i, ex in enumerate(examples):
            f = {k: enc[k][i] for k in enc.keys()}
            if lexicon_ids is not None:
                f["lexicon_ids"] = lexicon_ids[i]
            if self.data_args.multi_label:
                hot = [0.0] * len(self.labels)
                for label in ex.labels:
                    hot[index[label]] = 1.0
                f["labels"] = hot
            else:
                f["labels"] = index[ex.labels[0]]
            f["_index"] = i
            features.append(f)
        return features

    def model_class(self) -> type:
        return ErnieZooForSequenceClassification

    def config_updates(self) -> dict[str, Any]:
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
            "problem_type": "multi_label_classification"
            if self.data_args.multi_label
            else "single_label_classification",
            **({"sentiment_features": list(FEATURES)} if self.lexicon is not None else {}),
        }

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        gold, pred, loss_sum, n = [], [], 0.0, 0
        for chunk, inputs, out in self._forward_all(
            model, features, batch_size, device, tokenizer.pad_token_id
        ):
            loss_sum += float(out.loss) * len(chunk)
            n += len(chunk)
            if self.data_args.multi_label:
                pred += (out.logits.sigmoid() > 0.5).long().tolist()
                gold += inputs["labels"].long().tolist()
            else:
                pred += out.logits.argmax(-1).tolist()
                gold += inputs["labels"].tolist()
        if self.data_args.multi_label:
            scores = multilabel_scores(gold, pred)
        else:
            scores = classification_scores(gold, pred, len(self.labels))
            scores["per_label"] = {self.labels[k]: v for k, v in scores["per_label"].items()}
        scores["loss"] = loss_sum / max(n, 1)
        return scores


# ===================================================================== token classification


class TokenClassificationObjective(Objective):
    name = "token_classification"
    default_metric = "f1"

    def setup_labels(self) -> None:
        if self.data_args.entity_types:
            types = list(self.data_args.entity_types)
        else:
            types = sorted({s.type for ex in self.splits["train"] for s in ex.entities})
        if not types:
            raise ValueError(f"{self.where['train']}: no entities found; check the tags or data.entity_types")
        for split, examples in self.splits.items():
            check_labels(examples, types, self.where[split], "entity type")
        self.entity_types = types
        self.labels = label_names(types, self.data_args.tag_scheme)
        self.lexicon = self._read_lexicon()

    def _read_lexicon(self) -> EntityLexicon | None:
        """data.lexicon, else the lexicon a base model was saved with (a lexicon tagger fine-tuned further)."""
        path = self._lexicon_path(LEXICON_FILE)
        if path is None:
            return None
        lexicon = EntityLexicon.load(path)
        if self.data_args.lexicon and not lexicon.types:
            raise ValueError(f"data.lexicon: {path} gives its words no entity types")
        logger.info("entity lexicon %s: %d words, types %s", path, len(lexicon), ", ".join(lexicon.types))
        return lexicon

    def attach(self, model: nn.Module, tokenizer) -> list[str]:
        if self.lexicon is None:
            return []
        if not hasattr(model, "set_entity_lexicon"):
            raise ValueError("an entity lexicon needs the CRF tagger: set model.use_crf true")
        model.set_entity_lexicon(self.lexicon)
        return ["lexicon_proj"]

    def vocab_texts(self) -> Iterator[str]:
        for ex in self.splits["train"]:
            yield ex.text

    def encode(self, examples: Sequence[NerExample], tokenizer) -> list[dict[str, Any]]:
        enc = tokenizer(
            [ex.text for ex in examples],
            truncation=True,
            max_length=self.data_args.max_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        index = {label: i for i, label in enumerate(self.labels)}
        lost = 0
        features = []
        for i, ex in enumerate(examples):
            offsets = enc["offset_mapping"][i]
            special = enc["special_tokens_mask"][i]
            char_to_token: dict[int, int] = {}
            for t, ((s, e), sp) in enumerate(zip(offsets, special)):
                if not sp:
                    for c in range(s, e):
                        char_to_token[c] = t
            token_spans: list[Span] = []
            taken: set[int] = set()
            for ent in ex.entities:
                toks = sorted({char_to_token[c] for c in range(ent.start, ent.end) if c in char_to_token})
                if not toks or taken & set(range(toks[0], toks[-1] + 1)):
                    lost += 1  # truncated away, whitespace only, or sharing a token with another entity
                    continue
                taken |= set(range(toks[0], toks[-1] + 1))
                token_spans.append(Span(toks[0], toks[-1] + 1, ent.type))
            tags = spans_to_tags(token_spans, len(offsets), self.data_args.tag_scheme)
            labels = [IGNORE if sp else index[tag] for tag, sp in zip(tags, special)]
            f = {
                k: enc[k][i]
                for k in ("input_ids", "token_type_ids", "attention_mask", "pinyin_ids")
                if k in enc
            }
            if self.lexicon is not None:
                f["lexicon_ids"] = self.lexicon.token_features(ex.text, offsets, special)
            f["labels"] = labels
            f["_offsets"] = [None if sp else tuple(o) for o, sp in zip(offsets, special)]
            f["_index"] = i
            features.append(f)
        if lost:
            logger.warning(
                "%d of %d entities have no token of their own (truncated at max_length=%d or sharing a "
                "token); they are not trained on and count as misses in evaluation",
                lost,
                sum(len(ex.entities) for ex in examples),
                self.data_args.max_length,
            )
        return features

    def model_class(self) -> type:
        return model_class_for({"use_crf": self.args.model.use_crf}, pipeline_tag="token-classification")

    def config_updates(self) -> dict[str, Any]:
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
            "use_crf": bool(self.args.model.use_crf),
            "tag_scheme": self.data_args.tag_scheme,
            **({"lexicon_types": list(self.lexicon.types)} if self.lexicon is not None else {}),
        }

    def decode(self, tag_ids: Sequence[int], offsets: Sequence[tuple[int, int] | None]) -> list[Span]:
        """Character spans from per-token tag ids (positions with offsets None are skipped)."""
        positions = [t for t, o in enumerate(offsets) if o is not None and t < len(tag_ids)]
        tags = [self.labels[tag_ids[t]] if 0 <= tag_ids[t] < len(self.labels) else "O" for t in positions]
        return [
            Span(offsets[positions[s.start]][0], offsets[positions[s.end - 1]][1], s.type)
            for s in tags_to_spans(tags)
        ]

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        gold, pred, loss_sum, n = [], [], 0.0, 0
        for chunk, _, out in self._forward_all(model, features, batch_size, device, tokenizer.pad_token_id):
            loss_sum += float(out.loss) * len(chunk)
            n += len(chunk)
            ids = getattr(out, "predictions", None)
            ids = (ids if ids is not None else out.logits.argmax(-1)).tolist()
            for f, row in zip(chunk, ids):
                pred.append(self.decode(row, f["_offsets"]))
                gold.append(examples[f["_index"]].entities)
        scores = entity_scores(gold, pred)
        scores["loss"] = loss_sum / max(n, 1)
        return scores


# ===================================================================== generation


class GenerationObjective(Objective):
    name = "generation"
    default_metric = "loss"
    n_samples = 16  # dev prompts decoded greedily at each evaluation for the char_f1 score

    def vocab_texts(self) -> Iterator[str]:
        for ex in self.splits["train"]:
            yield ex.prompt
            yield ex.target

    def encode(self, examples: Sequence[GenerationExample], tokenizer) -> list[dict[str, Any]]:
        """`[CLS] prompt continuation [SEP]`, the loss on the continuation and [SEP] only.

        The prompt is not closed by [SEP]: generation (here and in Taskflow's text_generation) continues
        `[CLS] prompt` directly and stops at [SEP].
        """
        max_len = self.data_args.max_length
        prompts = tokenizer([ex.prompt for ex in examples], add_special_tokens=False)
        targets = tokenizer([ex.target for ex in examples], add_special_tokens=False)
        cls, eos = tokenizer.cls_token_id, tokenizer.sep_token_id
        features = []
        for i in range(len(examples)):
            p = [cls] + prompts["input_ids"][i][: max(1, max_len // 2 - 1)]
            t = (targets["input_ids"][i] + [eos])[: max_len - len(p)]
            # No pinyin_ids: generate() embeds every token with its default reading, so training does too.
            features.append(
                {
                    "input_ids": p + t,
                    "attention_mask": [1] * (len(p) + len(t)),
                    "labels": [IGNORE] * len(p) + t,
                    "_index": i,
                }
            )
        return features

    def model_class(self) -> type:
        return ErnieZooForCausalLM

    def config_updates(self) -> dict[str, Any]:
        return {"is_decoder": True}

    @torch.no_grad()
    def generate(
        self, model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 64, device="cpu"
    ) -> list[str]:
        """Greedy continuations of `prompts` (stopping at [SEP]), decoded without spaces, one prompt at a time."""
        limit = max(1, self.data_args.max_length // 2 - 1)
        encoded = [
            [tokenizer.cls_token_id, *tokenizer(p, add_special_tokens=False)["input_ids"][:limit]]
            for p in prompts
        ]
        was_training = model.training
        model.eval()
        try:
            return greedy_continuations(
                model,
                encoded,
                eos_token_id=tokenizer.sep_token_id,
                pad_token_id=tokenizer.pad_token_id,
                max_new_tokens=max_new_tokens,
                decode=lambda new: tokenizer.decode(new, skip_special_tokens=True).replace(" ", ""),
                batch_size=1,
                device=device,
            )
        finally:
            model.train(was_training)

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        return self._generation_scores(model, features, examples, tokenizer, batch_size, device, "target")


# ===================================================================== instruction (decoders)


class InstructionObjective(Objective):
    """Prompt / response pairs on an ERNIE 4.5 decoder (transformers' `Ernie4_5ForCausalLM` or
    `Ernie4_5_MoeForCausalLM`, as they are): the prompt in the chat template, then the response and the end
    token; the loss on the response and the end token only (labels -100 on the prompt and on padding).

    The template (`chat_template_for`) is set on the tokenizer, so it is saved with the model
    (tokenizer_config.json) and `apply_chat_template` in plain transformers reproduces the training prompts.
    Truncation: a templated prompt that leaves no room for a response token within data.max_length is an error
    naming the row; a response is cut at the end (losing its end token: counted in a warning)."""

    name = "instruction"
    default_metric = "loss"
    decoder = True
    n_samples = 8  # dev prompts answered greedily at each evaluation for the char_f1 score

    def vocab_texts(self) -> Iterator[str]:
        yield "User: Assistant: "  # the template's words, for a vocabulary trained on the data
        for ex in self.splits["train"]:
            for message in ex.messages or ():
                yield message["content"]
            yield ex.prompt
            yield ex.response

    def _where(self, examples: Sequence[Any]) -> str:
        split = next((s for s, exs in self.splits.items() if exs is examples), None)
        return self.where.get(split, "data") if split else "data"

    def _encode_conversation(self, i: int, messages, tokenizer, where: str) -> tuple[dict[str, Any], bool]:
        """A conversation row: every assistant turn learnt (`chat_ids_and_labels`), cut at data.max_length (an
        error naming the row if no assistant token is left); (features, whether it was cut)."""
        max_len = self.data_args.max_length
        ids, labels = chat_ids_and_labels(tokenizer, messages, IGNORE)
        if all(label == IGNORE for label in labels[:max_len]):
            raise ValueError(
                f"{where} row {i + 1}: no assistant token falls within data.max_length = {max_len} (the conversation "
                f"is {len(ids)} tokens); shorten it or raise data.max_length"
            )
        return {
            "input_ids": ids[:max_len],
            "attention_mask": [1] * min(len(ids), max_len),
            "labels": labels[:max_len],
            "_index": i,
        }, len(ids) > max_len

    def encode(self, examples: Sequence[InstructionExample], tokenizer) -> list[dict[str, Any]]:
        tokenizer.chat_template = chat_template_for(tokenizer)
        max_len = self.data_args.max_length
        eos = tokenizer.convert_tokens_to_ids(begin_end_tokens(tokenizer)[1])
        responses = tokenizer([ex.response for ex in examples], add_special_tokens=False)["input_ids"]
        features, cut = [], 0
        where = self._where(examples)
        for i, ex in enumerate(examples):
            if ex.messages is not None:
                feature, was_cut = self._encode_conversation(i, ex.messages, tokenizer, where)
                features.append(feature)
                cut += was_cut
                continue
            p = chat_prompt_ids(tokenizer, ex.prompt)
            if len(p) >= max_len:
                raise ValueError(
                    f"{where} row {i + 1}: the prompt is {len(p)} tokens in the chat template, leaving no room "
                    f"for the response within data.max_length = {max_len}; shorten it or raise data.max_length"
                )
            full = responses[i] + [eos]
            r = full[: max_len - len(p)]
            cut += len(r) < len(full)
            features.append(
                {
                    "input_ids": p + r,
                    "attention_mask": [1] * (len(p) + len(r)),
                    "labels": [IGNORE] * len(p) + r,
                    "_index": i,
                }
            )
        if cut:
            logger.warning(
                "%d of %d responses were cut to fit data.max_length = %d (they lose their end token; a "
                "conversation counts as one response)",
                cut,
                len(examples),
                max_len,
            )
        return features

    def model_class(self) -> type:
        raise TypeError(
            "an instruction model's class follows its config: ernie_zoo.models.decoder.DECODER_CLASSES"
        )

    @torch.no_grad()
    def generate(
        self, model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 64, device="cpu"
    ) -> list[str]:
        """Greedy answers to `prompts` in the chat template (stopping at the end token), one prompt at a time."""
        eos = tokenizer.convert_tokens_to_ids(begin_end_tokens(tokenizer)[1])
        spaced = isinstance(
            tokenizer, ErnieZooTokenizerFast
        )  # the zoo's tokenizer spaces its tokens when decoding

        def decode(new: list[int]) -> str:
            text = tokenizer.decode(new, skip_special_tokens=True)
            return text.replace(" ", "") if spaced else text

        was_training = model.training
        model.eval()
        try:
            return greedy_continuations(
                model,
                [chat_prompt_ids(tokenizer, prompt) for prompt in prompts],
                eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id,
                max_new_tokens=max_new_tokens,
                decode=decode,
                batch_size=1,
                device=device,
            )
        finally:
            model.train(was_training)

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        return self._generation_scores(model, features, examples, tokenizer, batch_size, device, "response")


# ===================================================================== preference (decoders)


class PreferenceObjective(InstructionObjective):
    """Prompt / chosen / rejected rows on an ERNIE 4.5 decoder (`data.preference_examples`: TRL's text and
    conversational formats), trained by `training.preference.PreferenceLoss` (dpo, ipo, orpo or simpo; the
    recipe's `preference:` section). Each response is encoded as an instruction response is: the prompt in the
    chat template (a text prompt is one user turn, as instruction tuning puts it, so a model tuned with task
    instruction is preference-tuned in the format it learnt), then the response and the end token, labels -100 on
    the prompt. Dev scores: the loss, the rewards and the reward accuracy, means over the rows."""

    name = "preference"

    def vocab_texts(self) -> Iterator[str]:
        yield "User: Assistant: "
        for ex in self.splits["train"]:
            for message in ex.prompt:
                yield message["content"]
            yield ex.chosen
            yield ex.rejected

    def encode(self, examples: Sequence[PreferenceExample], tokenizer) -> list[dict[str, Any]]:
        tokenizer.chat_template = chat_template_for(tokenizer)
        max_len = self.data_args.max_length
        eos = tokenizer.convert_tokens_to_ids(begin_end_tokens(tokenizer)[1])
        where = self._where(examples)
        features, cut = [], 0
        for i, ex in enumerate(examples):
            p = chat_prompt_ids(tokenizer, ex.prompt)
            if len(p) >= max_len:
                raise ValueError(
                    f"{where} row {i + 1}: the prompt is {len(p)} tokens in the chat template, leaving no room "
                    f"for the responses within data.max_length = {max_len}; shorten it or raise data.max_length"
                )
            feature: dict[str, Any] = {"_index": i}
            for side, text in (("chosen", ex.chosen), ("rejected", ex.rejected)):
                full = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
                r = full[: max_len - len(p)]
                cut += len(r) < len(full)
                feature[f"{side}_input_ids"] = p + r
                feature[f"{side}_attention_mask"] = [1] * (len(p) + len(r))
                feature[f"{side}_labels"] = [IGNORE] * len(p) + r
            features.append(feature)
        if cut:
            logger.warning(
                "%d of %d responses were cut to fit data.max_length = %d (they lose their end token)",
                cut,
                2 * len(examples),
                max_len,
            )
        return features

    def wrap(self, policy: nn.Module, reference: nn.Module | None) -> PreferenceLoss:
        """The module the run trains: `policy` under the recipe's preference loss, against `reference` (the frozen
        base under full fine-tuning; None: a peft policy is its own reference, adapter disabled)."""
        p = self.args.preference
        return PreferenceLoss(
            policy,
            p.loss,
            p.beta,
            reference=reference,
            simpo_gamma=p.simpo_gamma,
            label_smoothing=p.label_smoothing,
            sft_weight=p.sft_weight,
        )

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        sums: dict[str, float] = {}
        loss_sum = 0.0
        for chunk, _, out in self._forward_all(model, features, batch_size, device, tokenizer.pad_token_id):
            loss_sum += float(out.loss) * len(chunk)
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v
        return {"loss": loss_sum / max(len(features), 1), **metric_means(sums)}


# ===================================================================== text correction


class TextCorrectionObjective(Objective):
    """Chinese spelling correction: (text as written, corrected text) pairs of the same length; the model
    (`ErnieZooForSpellingCorrection`) learns the right character at every Chinese character and whether it was
    wrong. Dev score: sentence-level correction F1 as pycorrector defines it (`ernie_zoo.text.correction`)."""

    name = "text_correction"
    default_metric = "sentence_f1"
    #: decoding margins reported on dev besides the model's own (config.correction_min_prob)
    sweep = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

    def setup_labels(self) -> None:
        path = self.data_args.confusion_sets
        self.confusion = ConfusionSets.load(Path(path).expanduser()) if path else None

    def vocab_texts(self) -> Iterator[str]:
        for ex in self.splits["train"]:
            yield ex.target

    def encode(self, examples: Sequence[CorrectionExample], tokenizer) -> list[dict[str, Any]]:
        """Labels: the target character's id at each single-Chinese-character token; -100 elsewhere (special
        tokens, Latin, digits, punctuation, characters the vocabulary lacks), which the model never changes."""
        enc = tokenizer(
            [ex.source for ex in examples],
            truncation=True,
            max_length=self.data_args.max_length,
            return_offsets_mapping=True,
        )
        vocab = tokenizer.get_vocab()
        features = []
        for i, ex in enumerate(examples):
            labels = []
            for start, end in enc["offset_mapping"][i]:
                ch = ex.target[start] if end - start == 1 else ""
                labels.append(vocab[ch] if is_cjk(ex.source[start:end] or "x") and ch in vocab else IGNORE)
            f = {k: enc[k][i] for k in enc.keys() if k != "offset_mapping"}
            f["labels"] = labels
            f["_index"] = i
            f["_offsets"] = enc["offset_mapping"][i]
            features.append(f)
        return features

    def model_class(self) -> type:
        return ErnieZooForSpellingCorrection

    def config_updates(self) -> dict[str, Any]:
        # Defaults recorded in config.json unless model.config_overrides sets them.
        defaults = {"detection_loss_weight": 0.3, "correction_min_prob": 0.0}
        return {k: v for k, v in defaults.items() if k not in self.args.model.config_overrides}

    def attach(self, model: nn.Module, tokenizer) -> list[str]:
        """The confusion sets travel with the model (saved as confusion_sets.json); the detector is new."""
        target = getattr(model, "base_model", model)
        for m in (model, target, getattr(target, "model", None)):
            if isinstance(m, ErnieZooForSpellingCorrection):
                if self.confusion is not None:
                    m.confusion_sets = self.confusion
                elif m.confusion_sets is not None:
                    self.confusion = m.confusion_sets  # a correction model's own sets
        return []

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        vocab = tokenizer.get_vocab()
        id_to_char = {i: t for t, i in vocab.items()}
        candidates = candidate_table(self.confusion, vocab) if self.confusion is not None else None
        proposals: list[list[tuple[int, str, float]]] = []  # per example: (char offset, new char, margin)
        loss_sum, n = 0.0, 0
        for chunk, inputs, out in self._forward_all(
            model, features, batch_size, device, tokenizer.pad_token_id
        ):
            loss_sum += float(out.loss) * len(chunk)
            n += len(chunk)
            eligible = inputs["labels"] != IGNORE
            rows = decode_corrections(out.logits, inputs["input_ids"], eligible, candidates, min_prob=-1.0)
            for f, row in zip(chunk, rows):
                proposals.append([(f["_offsets"][t][0], id_to_char[tid], margin) for t, tid, margin in row])
        sources = [examples[f["_index"]].source for f in features]
        targets = [examples[f["_index"]].target for f in features]

        def predict(min_prob: float) -> list[str]:
            preds = []
            for src, props in zip(sources, proposals):
                chars = list(src)
                for pos, ch, margin in props:
                    if margin >= min_prob:
                        chars[pos] = ch
                preds.append("".join(chars))
            return preds

        own = float(getattr(model.config, "correction_min_prob", 0.0))
        scores: dict[str, Any] = correction_scores(sources, targets, predict(own))
        scores["loss"] = loss_sum / max(n, 1)
        scores["min_prob"] = own
        sweep = {
            f"{m:.1f}": correction_scores(sources, targets, predict(m))["sentence_f1"] for m in self.sweep
        }
        scores["sweep_sentence_f1"] = sweep
        best = max(sweep, key=sweep.get)
        scores["best_min_prob"] = float(best)
        scores["best_sentence_f1"] = sweep[best]
        return scores


# ===================================================================== information extraction (UIE)


class InformationExtractionObjective(Objective):
    """Schema-driven extraction (`ErnieZooForSpanExtraction`): doccano / Label Studio exports
    (`ernie_zoo.data.annotations`, format detected; or UIE prompt-example JSONL, read as it is) turned into prompt
    examples -- entity prompts, relation prompts
    ("李明的毕业院校"), negative prompts -- each `[CLS] prompt [SEP] text [SEP]` with start/end bits on the text's
    tokens. Without data.dev_file, data.dev_fraction of the training texts (seeded by train.seed) is the dev set.
    Dev score: span F1 over every prompt (a span counts when its start and end are exact)."""

    name = "information_extraction"
    default_metric = "f1"

    def read(self) -> None:
        d, seed = self.data_args, self.args.train.seed
        rows: dict[str, list] = {}  # annotated texts (doccano, Label Studio) or prompt examples (UIE JSONL)
        for split in ("train", "dev", "test"):
            path = getattr(d, f"{split}_file")
            if path is None:
                continue
            path = Path(path).expanduser()
            if not path.is_file():
                raise ValueError(f"data.{split}_file: {path} does not exist")
            if detect_annotation_format(read_text_file(path, d.max_line_bytes)) == "uie":
                rows[split] = read_prompt_examples(path, d.max_line_bytes)
            else:
                rows[split] = read_annotations(path, d.max_line_bytes)
            self.where[split] = str(path)
        if "train" not in rows:
            raise ValueError(
                "no training data: set data.train_file (a doccano JSONL or Label Studio JSON export)"
            )
        if "dev" not in rows and d.dev_fraction > 0:
            texts = list(dict.fromkeys(r.text for r in rows["train"]))
            held = set(seeded_split(texts, (1 - d.dev_fraction, d.dev_fraction, 0.0), seed)["dev"])
            if held and len(held) < len(texts):
                rows["dev"] = [r for r in rows["train"] if r.text in held]
                rows["train"] = [r for r in rows["train"] if r.text not in held]
                self.where["dev"] = (
                    f"{self.where['train']} (held out: {d.dev_fraction:g} of the texts, seed {seed})"
                )
        for split, read in rows.items():
            limit = d.max_train_samples if split == "train" else d.max_eval_samples
            if read and isinstance(read[0], PromptExample):
                self.splits[split] = read[:limit]
            else:
                self.splits[split] = prompt_examples(read[:limit], d.negative_ratio, seed)
        counts = {s: len(v) for s, v in self.splits.items()}
        logger.info("information extraction prompt examples: %s", counts)

    def vocab_texts(self) -> Iterator[str]:
        for ex in self.splits["train"]:
            yield ex.prompt
            yield ex.text

    def windows(self, examples: Sequence[PromptExample], tokenizer) -> list[tuple[int, int, int]]:
        """(example, start, end): each example's text cut into the windows Taskflow would cut it into at
        data.max_length (`chunk_spans` on the room the prompt leaves), so a long text trains on all of its spans."""
        prompts = list(dict.fromkeys(ex.prompt for ex in examples))
        lengths = dict(zip(prompts, map(len, tokenizer(prompts, add_special_tokens=False)["input_ids"])))
        n_special = tokenizer.num_special_tokens_to_add(pair=True)
        out = []
        for i, ex in enumerate(examples):
            room = max(1, self.data_args.max_length - n_special - lengths[ex.prompt])
            out += [(i, a, b) for a, b in chunk_spans(ex.text, room)]
        return out

    def encode(self, examples: Sequence[PromptExample], tokenizer) -> list[dict[str, Any]]:
        """`[CLS] prompt [SEP] window [SEP]` per window of each example (`windows`), labels on the window's tokens;
        a span crossing two windows, or cut off where a window's tokens overflow max_length, is lost (counted)."""
        windows = self.windows(examples, tokenizer)
        enc = tokenizer(
            [examples[i].prompt for i, _, _ in windows],
            [examples[i].text[a:b] for i, a, b in windows],
            truncation="only_second",
            max_length=self.data_args.max_length,
            return_offsets_mapping=True,
        )
        features: list[dict[str, Any]] = []
        kept: dict[int, int] = {}  # example -> its spans some window holds
        first: dict[int, int] = {}  # example -> its first window's feature
        for w, (i, a, b) in enumerate(windows):
            offsets = enc["offset_mapping"][w]
            in_text = [s == 1 for s in enc.sequence_ids(w)]
            starts = {o[0]: t for t, o in enumerate(offsets) if in_text[t] and o[1] > o[0]}
            ends = {o[1]: t for t, o in enumerate(offsets) if in_text[t] and o[1] > o[0]}
            labels = [0 if inside else IGNORE for inside in in_text]
            gold = []
            for start, end in examples[i].spans:
                if a <= start and end <= b and start - a in starts and end - a in ends:
                    labels[starts[start - a]] |= START
                    labels[ends[end - a]] |= END
                    gold.append((start - a, end - a))
            kept[i] = kept.get(i, 0) + len(gold)
            first.setdefault(i, w)
            f = {
                k: enc[k][w]
                for k in ("input_ids", "token_type_ids", "attention_mask", "pinyin_ids")
                if k in enc
            }
            f["labels"] = labels
            f["_offsets"] = [tuple(o) if inside else None for o, inside in zip(offsets, in_text)]
            f["_gold"] = gold  # in the window's offsets
            f["_window"] = (a, b)
            f["_index"] = i
            f["_missed"] = 0
            features.append(f)
        for i, w in first.items():  # the spans no window holds count as misses once, on the first window
            features[w]["_missed"] = len(examples[i].spans) - kept[i]
        total, lost = sum(len(ex.spans) for ex in examples), sum(f["_missed"] for f in features)
        if lost:
            logger.warning(
                "%d of %d spans cross two %d-token windows or are not on token boundaries: not trained on, "
                "and misses in evaluation",
                lost,
                total,
                self.data_args.max_length,
            )
        return features

    def model_class(self) -> type:
        return ErnieZooForSpanExtraction

    def config_updates(self) -> dict[str, Any]:
        # Taskflow cuts texts to the length the model was trained on (EncoderTask, TRAINED_LENGTH_KEY)
        return {"taskflow_max_seq_len": int(self.data_args.max_length)}

    def evaluate(self, model, features, examples, tokenizer, batch_size, device) -> dict[str, Any]:
        tp = n_pred = n_gold = 0
        loss_sum, n = 0.0, 0
        for chunk, _, out in self._forward_all(model, features, batch_size, device, tokenizer.pad_token_id):
            loss_sum += float(out.loss) * len(chunk)
            n += len(chunk)
            start_probs, end_probs = out.start_logits.sigmoid().tolist(), out.end_logits.sigmoid().tolist()
            for f, sp, ep in zip(chunk, start_probs, end_probs):
                offsets = f["_offsets"]
                positions = [t for t, o in enumerate(offsets) if o is not None]
                pred = {(offsets[s][0], offsets[e][1]) for s, e, _ in pair_pointers(sp, ep, 0.5, positions)}
                gold = set(f["_gold"])
                tp += len(pred & gold)
                n_pred += len(pred)
                n_gold += len(gold)
                n_gold += f["_missed"]
        precision = tp / n_pred if n_pred else 0.0
        recall = tp / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "loss": loss_sum / max(n, 1)}


OBJECTIVES: dict[str, type[Objective]] = {
    "sequence_classification": SequenceClassificationObjective,
    "token_classification": TokenClassificationObjective,
    "generation": GenerationObjective,
    "text_correction": TextCorrectionObjective,
    "instruction": InstructionObjective,
    "information_extraction": InformationExtractionObjective,
    "preference": PreferenceObjective,
}


def make_objective(args) -> Objective:
    return OBJECTIVES[args.task](args)


__all__ = [
    "GenerationObjective",
    "InformationExtractionObjective",
    "InstructionObjective",
    "SequenceClassificationObjective",
    "OBJECTIVES",
    "Objective",
    "PreferenceObjective",
    "TextCorrectionObjective",
    "TokenClassificationObjective",
    "make_objective",
]

"""Named entity recognition: entities with their type and character offsets into the original text.

Usage with the shipped default model, ernie-zoo-mini-ner (real output):

>>> from ernie_zoo.taskflow import Taskflow
>>> [(e["text"], e["type"], e["start"]) for e in Taskflow("ner")("新华社北京三月五日电，李明在北京大学发表讲话。")["entities"]]
[('新华社', 'ORG', 0), ('北京', 'LOC', 3), ('李明', 'PER', 11), ('北京大学', 'ORG', 14)]

With a local model directory (task_path=; here a tiny model the test-suite trains on template sentences):

>>> ner = Taskflow("ner", task_path=ner_dir)
>>> ner("张伟在上海工作")  # doctest: +ELLIPSIS
{'text': '张伟在上海工作', 'entities': [{'text': '张伟', 'type': 'PER', 'start': 0, 'end': 2, 'score': 0.9...}, {'text': '上海', 'type': 'LOC', 'start': 3, 'end': 5, 'score': 0.9...}]}
>>> [(e["text"], e["start"], e["end"]) for e in ner("Ｈｉ！李娜在北京上学")["entities"]]
[('李娜', 3, 5), ('北京', 6, 8)]

`start`/`end` index the string you passed (`text[start:end] == entity["text"]`), also for Latin words, digits,
full-width characters and emoji: offsets come from the tokenizer's offset_mapping, not from counting tokens.
Tags are read from the model's `config.id2label` and may use BIO, BIOES or BMES (MSRA) prefixes (`B-PER`,
`I-`/`M-` inside, `E-` end, `S-` single, `O`), decoded leniently by `ernie_zoo.text.tags` (an `I-X` after `O`
starts an entity). A word split into several word pieces takes the tag of its first piece. Long texts are split
by sentences and the entity offsets are shifted back into the original string (an entity never spans two chunks).

A tagger fine-tuned with an entity lexicon (`ernie-finetune --data.lexicon FILE`) carries it in its directory
(`entity_lexicon.txt`); Taskflow marks each character's lexicon matches and passes them to the model as
`lexicon_ids`. The lexicon is a hint the model weighs against the context, not a dictionary lookup.

`user_dict` (a path or a list of `word [freq] tag` lines, jieba's format; the tag PER/LOC/ORG or jieba's nr/ns/nt)
is a dictionary intervention, as in PaddleNLP: every occurrence of a user word (longest first) is an entity of its
type, with score None, and replaces the model's entities it overlaps. A model with an entity lexicon also sees the
words as lexicon matches.

>>> Taskflow("ner", user_dict=["蓝鲸科技 nt"])("蓝鲸科技发布了新产品。")["entities"]
[{'text': '蓝鲸科技', 'type': 'ORG', 'start': 0, 'end': 4, 'score': None}]

Options: `entity_only=False` returns every span of the text, the gaps between entities with type "O".

A text without a letter of any script (punctuation, digits, emoji alone) has no entities, whatever the model tags
(the same rule as sentiment_analysis' no-label texts; `ernie_zoo.taskflow.text.has_letters`):

>>> Taskflow("ner")(["😀😂🎉👍🏽", "？！……"])
[{'text': '😀😂🎉👍🏽', 'entities': []}, {'text': '？！……', 'entities': []}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ernie_zoo.models.crf_tagger import LEXICON_FILE
from ernie_zoo.text.lexicon import EntityLexicon
from ernie_zoo.text.segment import JIEBA_NAME_TYPES, read_user_dict
from ernie_zoo.text.tags import parse_tag, tags_to_spans
from ernie_zoo.text.traditional import to_simplified

from .task import Chunk, EncoderTask, Prepared, Result, register_task
from .text import has_letters


@dataclass
class NerOptions:
    """Options of ner.

    entity_only: True returns entities only; False returns a segmentation of the whole text in which the
        stretches between entities appear with type "O".
    """

    entity_only: bool = True


@dataclass
class Entity:
    text: str
    type: str
    start: int
    end: int
    score: float | None  # mean probability of the entity's tags; None for the "O" gaps of entity_only=False


@dataclass
class NerResult(Result):
    text: str
    entities: list[Entity] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:  # dataclasses.asdict's deep copy, without its recursion (a hot path)
        return {
            "text": self.text,
            "entities": [
                {"text": e.text, "type": e.type, "start": e.start, "end": e.end, "score": e.score}
                for e in self.entities
            ],
        }


@register_task("ner", aliases=("named_entity_recognition",), default_model="ernie-zoo-mini-ner")
class NamedEntityRecognition(EncoderTask):
    auto_class = "AutoModelForTokenClassification"
    modes = {"accurate": "ernie-zoo-mini-ner", "fast": "ernie-zoo-mini-ner-fast"}
    Options = NerOptions
    uses_user_dict = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        id2label = self.model.config.id2label
        self.tags = [str(id2label[i]) for i in range(len(id2label))]
        try:
            parsed = [parse_tag(t) for t in self.tags]
        except ValueError as exc:
            raise ValueError(f"model config id2label is not a NER tag set: {exc}") from exc
        if not any(p != "O" for p, _ in parsed):
            raise ValueError(f"model config id2label has no entity tags: {self.tags}")
        self.entity_types = sorted({kind for _, kind in parsed if kind})
        # A tagger trained with an entity lexicon reads its matches as `lexicon_ids` (models/crf_tagger.py).
        self.lexicon = getattr(self.model, "entity_lexicon", None)
        if getattr(self.model.config, "lexicon_types", None) and self.lexicon is None:
            raise ValueError(
                f"{self.loaded.source.location}: the model was trained with an entity lexicon "
                f"(config.lexicon_types) but its directory has no {LEXICON_FILE}"
            )
        self.user_words: dict[str, str] = {}
        if self.settings.user_dict is not None:
            self.user_words = self._read_user_words(self.settings.user_dict)
            if self.lexicon is not None:  # the model also sees them as lexicon matches
                self.lexicon = self.lexicon.with_words({w: {t} for w, t in self.user_words.items()})
            self.user_lexicon = EntityLexicon(self.user_words)

    def _read_user_words(self, user_dict: Any) -> dict[str, str]:
        types = set(self.entity_types)
        words: dict[str, str] = {}
        for n, (word, _, tag) in enumerate(read_user_dict(user_dict), 1):
            kind = JIEBA_NAME_TYPES.get(tag or "", tag)
            if kind not in types:
                raise ValueError(
                    f"user_dict entry {n} ({word!r}) needs an entity type of the model ({', '.join(sorted(types))}) "
                    f"or a jieba name tag ({', '.join(JIEBA_NAME_TYPES)}), got {tag!r}"
                )
            word = to_simplified(word)  # matched against the text converted to Simplified
            if words.get(word, kind) != kind:
                raise ValueError(f"user_dict gives {word!r} two types: {words[word]} and {kind}")
            words[word] = kind
        return words

    def _intervene(self, text: str, entities: list[Entity]) -> list[Entity]:
        """Every user_dict word in `text` (leftmost-longest, non-overlapping) becomes an entity of its type, replacing
        the model's entities it overlaps."""
        found = [
            Entity(text[s:e], kind, s, e, None)
            for s, e, kind in self.user_lexicon.find_typed(to_simplified(text))
        ]
        if not found:
            return entities
        kept = [e for e in entities if not any(e.start < f.end and f.start < e.end for f in found)]
        return sorted(kept + found, key=lambda e: e.start)

    def encode(self, texts: list[str]) -> list[dict[str, Any]]:
        items = super().encode(texts)
        if self.lexicon is not None:
            for text, item in zip(texts, items):
                item["lexicon_ids"] = self.lexicon.token_features(text, item["offsets"], item["special"])
        return items

    def run_batch(
        self, batch: dict[str, torch.Tensor], chunks: list[Chunk]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = self.model(**batch)
        probs = torch.softmax(out.logits.float(), dim=-1)  # (B, T, num_tags)
        score, label = probs.max(-1)  # (B, T)
        predictions = getattr(out, "predictions", None)
        if predictions is not None:  # a CRF model: its Viterbi path (-100 at [CLS]/[SEP]/padding)
            label = torch.where(predictions >= 0, predictions, label)
            score = probs.gather(-1, label[..., None])[..., 0]
        lengths = batch["attention_mask"].sum(1).tolist()
        return [(label[i, :n].cpu(), score[i, :n].cpu()) for i, n in enumerate(lengths)]

    def postprocess(self, prepared: Prepared, outputs: list[Any]) -> list[NerResult]:
        results = []
        for text, pairs in zip(prepared.texts, self.group(prepared, outputs)):
            entities: list[Entity] = []
            for chunk, (labels, scores) in pairs if has_letters(text) else ():
                entities.extend(self._chunk_entities(text, chunk, labels.tolist(), scores.tolist()))
            if self.user_words:
                entities = self._intervene(text, entities)
            if not self.options.entity_only:
                entities = self._fill_gaps(text, entities)
            results.append(NerResult(text, entities))
        return results

    def _chunk_entities(
        self, text: str, chunk: Chunk, labels: list[int], scores: list[float]
    ) -> list[Entity]:
        # Words: runs of non-special tokens sharing a word id; a word takes the tag of its first piece.
        words: list[tuple[int, int, str, float]] = []  # (start, end, tag, score) in chunk coordinates
        last_word = None
        for t, (start, end) in enumerate(chunk.offsets):
            if chunk.special[t] or end <= start:
                last_word = None
                continue
            word = chunk.word_ids[t]
            if word is not None and word == last_word and words:
                s, _, tag, sc = words[-1]
                words[-1] = (s, end, tag, sc)
            else:
                words.append((start, end, self.tags[labels[t]], scores[t]))
            last_word = word
        entities = []
        for first, stop, kind in tags_to_spans([w[2] for w in words]):
            start, end = chunk.start + words[first][0], chunk.start + words[stop - 1][1]
            score = sum(w[3] for w in words[first:stop]) / (stop - first)
            entities.append(Entity(text[start:end], kind, start, end, score))
        return entities

    @staticmethod
    def _fill_gaps(text: str, entities: list[Entity]) -> list[Entity]:
        out: list[Entity] = []
        pos = 0
        for e in entities:
            if e.start > pos:
                out.append(Entity(text[pos : e.start], "O", pos, e.start, None))
            out.append(e)
            pos = e.end
        if pos < len(text):
            out.append(Entity(text[pos:], "O", pos, len(text), None))
        return out

"""Information extraction from a schema (PaddleNLP's UIE task): entities, their relations, and deeper nesting.

The default model, ernie-zoo-e5-ie (the e5 character base fine-tuned on MSRA's people, places and organisations
under several names each, rule-labelled 时间 / 金额 and 职务 / 任职机构; its card says what it finds), answers
`Taskflow("information_extraction", schema=["时间", "人物", "机构"])` zero-shot on such types. For your own types and
relations fine-tune from a doccano or Label Studio export (docs/information_extraction.md; from the default model:
`--model_name_or_path ernie-zoo-e5-ie`) and pass the output directory. Usage with such a model (`task_path=`; here
the tiny model the test-suite fine-tunes for a few steps on template sentences):

>>> ie = Taskflow("information_extraction", schema=["人物", "学校"], task_path=ie_dir)
>>> ie("王芳毕业于南京大学。")  # doctest: +ELLIPSIS
{'人物': [{'text': '王芳', 'start': 0, 'end': 2, 'probability': 0.9...}], '学校': [{'text': '南京大学', 'start': 5, 'end': 9, 'probability': 0.9...}]}
>>> ie.set_schema({"人物": ["毕业院校"]})
>>> ie("王芳毕业于南京大学。")  # doctest: +ELLIPSIS
{'人物': [{'text': '王芳', 'start': 0, 'end': 2, 'probability': 0.9..., 'relations': {'毕业院校': [{'text': '南京大学', 'start': 5, 'end': 9, 'probability': 0.9...}]}}]}

Output, per input text, PaddleNLP's shape: `{type: [{"text", "start", "end", "probability", "relations"?}]}`, a
type only when something of it was found, "relations" only on a finding with relations found, nested as deep as
the schema. `text[start:end] == item["text"]` (character offsets into the string you passed). A `str` in gives one
such dict, a `list[str]` a list of them (PaddleNLP always returns a list: pass a list to keep its post-processing).

How: every schema name is a prompt for `ErnieZooForSpanExtraction` (`[CLS] prompt [SEP] text [SEP]` -> a start and
an end probability per text token); tokens above `position_prob` are paired into spans (UIE's decoding) with
probability start x end. Each found subject's relations are then asked as new prompts ("王芳的毕业院校") over the
whole text, one level of the schema per round. Every round batches all its (prompt, chunk) pairs, longest first.

Long texts: a text longer than `max_seq_len` minus the prompt is cut at sentence ends into chunks
(`ernie_zoo.text.sentences.chunk_spans`, as every encoder task); spans found in a chunk are shifted back into the
text's offsets and merged (a span found twice keeps its highest probability). Where a border falls inside a
sentence (a long sentence cut at a comma, or a run without punctuation cut by length), the chunks on both sides
overlap by `chunk_overlap` characters (`overlapping_chunk_spans`), and a span touching an overlapped border is
dropped in that chunk (it may be cut there): a name of up to `chunk_overlap` characters across the border is
found whole in the next chunk, once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ernie_zoo.models.span_extraction import ErnieZooForSpanExtraction, pair_pointers
from ernie_zoo.text.extraction import SchemaNode, parse_schema, relation_prompt
from ernie_zoo.text.sentences import overlapping_chunk_spans

from .task import Chunk, EncoderTask, Prepared, Result, register_task, require, without_onednn
from .text import clean_surrogates


@dataclass
class InformationExtractionOptions:
    """Options of information_extraction.

    schema: what to extract: a list of types (["时间", "选手"]), a dict of a subject type to its relations
        ({"人物": ["出生地", "毕业院校"]}), deeper nesting ({"人物": [{"毕业院校": ["所在城市"]}]}), or one name.
        Changeable later with `set_schema`. Required before the first call.
    position_prob: a token starts (ends) a span when its start (end) probability is above this; the span's
        probability is start x end.
    chunk_overlap: characters shared by two chunks of a long text where their border falls inside a sentence,
        so a name cut by the border is found whole in the next chunk (at most a quarter of a chunk; 0: none).
    """

    schema: str | list | dict | None = None
    position_prob: float = 0.5
    chunk_overlap: int = 16

    def validate(self) -> None:
        require(0.0 < self.position_prob < 1.0, f"position_prob must be in (0, 1), got {self.position_prob}")
        require(
            isinstance(self.chunk_overlap, int) and self.chunk_overlap >= 0,
            f"chunk_overlap must be an int >= 0, got {self.chunk_overlap!r}",
        )
        if self.schema is not None:
            parse_schema(self.schema)


@dataclass
class ExtractionResult(Result):
    """One text's findings: {type: [item dicts]} as PaddleNLP gives them."""

    found: dict[str, list[dict[str, Any]]]

    def to_dict(self) -> dict[str, Any]:
        return self.found


@dataclass
class _Query:
    """One prompt over one text, and where its findings go (`into[name]`)."""

    index: int  # the text
    prompt: str
    node: SchemaNode
    into: dict[str, list[dict[str, Any]]]


@register_task("information_extraction", aliases=("ie",), default_model="ernie-zoo-e5-ie")
class InformationExtraction(EncoderTask):
    auto_class = ErnieZooForSpanExtraction
    Options = InformationExtractionOptions

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.n_special = self.tokenizer.num_special_tokens_to_add(pair=True)  # [CLS] prompt [SEP] text [SEP]
        self.schema: tuple[SchemaNode, ...] | None = None
        if self.options.schema is not None:
            self.set_schema(self.options.schema)

    def set_schema(self, schema: Any) -> None:
        """Extract `schema` from now on (checked first: a bad schema leaves the current one in place)."""
        self.schema = parse_schema(schema)
        self.options = dataclasses.replace(self.options, schema=schema)

    # -- the rounds
    def run(self, texts: list[str]) -> list[ExtractionResult]:
        if self.schema is None:
            raise ValueError(
                'information_extraction has no schema: Taskflow("information_extraction", schema=["人物", "地点"]) '
                "or .set_schema(...)"
            )
        clean = [clean_surrogates(t) for t in texts]
        found: list[dict[str, list[dict[str, Any]]]] = [{} for _ in texts]
        queries = [_Query(i, node.name, node, found[i]) for i in range(len(texts)) for node in self.schema]
        while queries:  # one schema level per round
            spans = self.extract(clean, queries)
            following = []
            for query, row in zip(queries, spans):
                items = []
                for start, end, prob in row:
                    item: dict[str, Any] = {
                        "text": texts[query.index][start:end],
                        "start": start,
                        "end": end,
                        "probability": prob,
                    }
                    if query.node.children:
                        item["relations"] = {}
                        subject = clean[query.index][start:end]
                        following += [
                            _Query(
                                query.index, relation_prompt(subject, child.name), child, item["relations"]
                            )
                            for child in query.node.children
                        ]
                    items.append(item)
                if items:
                    query.into[query.node.name] = items
            queries = following
        return [ExtractionResult(_drop_empty(f)) for f in found]

    def extract(self, texts: list[str], queries: list[_Query]) -> list[list[tuple[int, int, float]]]:
        """The spans (start, end, probability) in text offsets that each query's prompt finds in its text."""
        prepared, owners = self.prepare(texts, queries)
        with without_onednn(self.settings.precision != "bf16"):
            outputs = self.forward(prepared)
        best: list[dict[tuple[int, int], float]] = [{} for _ in queries]
        threshold = self.options.position_prob
        for chunk, (owner, cut_start, cut_end), (start_probs, end_probs) in zip(
            prepared.chunks, owners, outputs
        ):
            positions = [t for t, s in enumerate(chunk.special) if not s and t < len(start_probs)]
            for s, e, prob in pair_pointers(start_probs.tolist(), end_probs.tolist(), threshold, positions):
                span = (chunk.start + chunk.offsets[s][0], chunk.start + chunk.offsets[e][1])
                # a span touching an overlapped border may be a cut piece: the neighbouring chunk sees it whole
                if span[1] > span[0] and span[0] != cut_start and span[1] != cut_end:
                    best[owner][span] = max(prob, best[owner].get(span, 0.0))
        return [sorted((s, e, p) for (s, e), p in spans.items()) for spans in best]

    def _chunks(self, index: int, text: str, start: int, end: int, room: int) -> list[tuple[Chunk, int, int]]:
        """Text `index`'s characters [start, end) cut into chunks of at most `room` characters, each with the
        positions (in text offsets) where a found span may be a cut piece: its start if the previous chunk
        overlaps it, its end if the next one does (-1: none)."""
        spans = [
            (start + s, start + e)
            for s, e in overlapping_chunk_spans(text[start:end], room, self.options.chunk_overlap)
        ]
        out = []
        for k, (s, e) in enumerate(spans):
            cut_start = s if k > 0 and s < spans[k - 1][1] else -1
            cut_end = e if k + 1 < len(spans) and spans[k + 1][0] < e else -1
            out.append((Chunk(index, s, e), cut_start, cut_end))
        return out

    def prepare(self, texts: list[str], queries: list[_Query]) -> tuple[Prepared, list[tuple[int, int, int]]]:
        """Every query's (prompt, text chunk) pairs, encoded: chunks cut to the room its prompt leaves, cut finer
        where the tokens overflow (NFKC may expand a character); returns the chunks and, for each, its query and
        its overlapped borders (`_chunks`)."""
        prompt_lengths = self._token_counts([q.prompt for q in queries])
        pending: list[tuple[tuple[int, int, int], Chunk]] = []
        for q, (query, n_prompt) in enumerate(zip(queries, prompt_lengths)):
            room = self.max_len - self.n_special - n_prompt
            if room < 4:
                raise ValueError(
                    f"the prompt {query.prompt[:40]!r} takes {n_prompt} tokens: max_seq_len={self.max_len} leaves "
                    "no room for text; shorten the schema name or raise max_seq_len"
                )
            text = texts[query.index]
            pending += [((q, a, b), c) for c, a, b in self._chunks(query.index, text, 0, len(text), room)]
        chunks: list[Chunk] = []
        owners: list[tuple[int, int, int]] = []
        while pending:
            encoded = self._encode_pairs(
                [queries[q].prompt for (q, _, _), _ in pending],
                [texts[c.index][c.start : c.end] for _, c in pending],
            )
            retry = []
            for ((q, a, b), chunk), item in zip(pending, encoded):
                length = chunk.end - chunk.start
                if len(item["input_ids"]) > self.max_len and length > 1:
                    pieces = self._chunks(
                        chunk.index, texts[chunk.index], chunk.start, chunk.end, length // 2
                    )
                    retry += [
                        ((q, a if c.start == chunk.start else ca, b if c.end == chunk.end else cb), c)
                        for c, ca, cb in pieces
                    ]
                    continue
                chunk.offsets = item.pop("offsets")[: self.max_len]
                chunk.special = item.pop("special")[: self.max_len]
                chunk.features = {k: v[: self.max_len] for k, v in item.items()}
                chunks.append(chunk)
                owners.append((q, a, b))
            pending = retry
        return Prepared(texts=texts, chunks=chunks), owners

    def _token_counts(self, prompts: list[str]) -> list[int]:
        unique = list(dict.fromkeys(prompts))
        with self.loaded.lock:
            ids = self.tokenizer(unique, add_special_tokens=False, verbose=False)["input_ids"]
        counts = dict(zip(unique, map(len, ids)))
        return [counts[p] for p in prompts]

    def _encode_pairs(self, prompts: list[str], texts: list[str]) -> list[dict[str, Any]]:
        """`[CLS] prompt [SEP] text [SEP]` per pair: the model inputs, the text tokens' offsets into the text and
        `special` 1 for every token that is not the text's (the prompt, [CLS], [SEP])."""
        with self.loaded.lock:
            enc = self.tokenizer(
                prompts,
                texts,
                add_special_tokens=True,
                truncation=False,
                return_offsets_mapping=True,
                return_attention_mask=False,
                split_special_tokens=True,
                verbose=False,
            )
        out = []
        for i in range(len(prompts)):
            item = {k: enc[k][i] for k in self.keys if k in enc}
            sequence = enc.sequence_ids(i)
            item["offsets"] = [tuple(o) for o in enc["offset_mapping"][i]]
            item["special"] = [0 if s == 1 else 1 for s in sequence]
            out.append(item)
        return out

    def run_batch(
        self, batch: dict[str, torch.Tensor], chunks: list[Chunk]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = self.model(**batch)
        start = torch.sigmoid(out.start_logits.float())  # (B, T)
        end = torch.sigmoid(out.end_logits.float())
        lengths = batch["attention_mask"].sum(1).tolist()
        return [(start[i, :n].cpu(), end[i, :n].cpu()) for i, n in enumerate(lengths)]


def _drop_empty(found: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Remove "relations" dicts in which nothing was found (PaddleNLP shows relations only where some were)."""
    for items in found.values():
        for item in items:
            relations = item.get("relations")
            if relations is not None:
                _drop_empty(relations)
                if not relations:
                    del item["relations"]
    return found

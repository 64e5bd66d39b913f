"""Reading fine-tuning data: csv/tsv through `datasets`, jsonl, char-per-line tagged NER files, hub datasets.

Every reader checks what it reads and raises ValueError naming the file, the row or line, and the fix:
a file that is not UTF-8 text, an empty file, a line that is not JSON, a missing column, a label outside the
label list, an invalid tag, an entity span outside its text. NER data of every format ends up as `NerExample(text, entities)` with character spans, so the model's
tokenization (and any later tokenizer, e.g. Taskflow's) is free to differ from the file's char-per-line units.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ernie_zoo.text.tags import Span, check_flat, detect_scheme, tags_to_spans

logger = logging.getLogger(__name__)

TABLE_FORMATS = {"csv": "csv", "tsv": "tsv", "jsonl": "jsonl", "json": "jsonl"}
TAGGED_FORMATS = {"conll", "bio", "bioes", "bmes", "iob", "txt", "char"}


@dataclass
class NerExample:
    """A sentence and its entities as character spans (end exclusive)."""

    text: str
    entities: list[Span] = field(default_factory=list)


def detect_format(path: str | Path, forced: str | None = None) -> str:
    """ "csv", "tsv", "jsonl" or "conll" (char-per-line tags), from `forced` or the file extension."""
    if forced is not None:
        fmt = forced.lower()
        if fmt in TABLE_FORMATS:
            return TABLE_FORMATS[fmt]
        if fmt in TAGGED_FORMATS:
            return "conll"
        raise ValueError(f"unknown file_format {forced!r}; use csv, tsv, jsonl or conll")
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in TABLE_FORMATS:
        return TABLE_FORMATS[suffix]
    if suffix in TAGGED_FORMATS:
        return "conll"
    raise ValueError(
        f"cannot tell the format of {path} from its extension; use .csv/.tsv/.jsonl/.conll or set data.file_format"
    )


def _check_file(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"data file {path} is a directory")
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist")
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise ValueError(f"cannot read data file {path}: {e.strerror or e}") from None
    if not head.strip():
        raise ValueError(f"data file {path} is empty")
    return path


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    import datasets

    enabled = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its parser errors come back in our message
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if enabled:
            datasets.enable_progress_bars()


def _json_rows(text: str, path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file, or of a `.json` file holding one array of objects; every row gets every
    column (None where a row lacks it), as `datasets` would give them."""
    from ernie_zoo.data.labelled import loads_unique, parse_jsonl

    rows: Any = None
    if text.lstrip().startswith("["):
        try:
            rows = loads_unique(text, str(path))
        except json.JSONDecodeError:
            rows = None  # not one array: JSON lines, whose parser names the bad line
        if isinstance(rows, list):
            for i, row in enumerate(rows, 1):
                if not isinstance(row, dict):
                    raise ValueError(f"{path}: item {i} of the JSON array is not an object: {row!r:.60}")
    if not isinstance(rows, list):
        rows = parse_jsonl(text, str(path))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key) for key in columns} for row in rows]


def _innermost(e: BaseException) -> BaseException:
    """The error `datasets` wrapped (DatasetGenerationError says only that an error occurred)."""
    seen = {id(e)}
    while (inner := e.__cause__ or e.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        e = inner
    return e


def read_table(path: str | Path, fmt: str, max_line_bytes: int | None = None) -> list[dict[str, Any]]:
    """Rows of a csv/tsv (header line required, read with `datasets`) or jsonl file; a line longer than
    `max_line_bytes` is an error naming it (data.max_line_bytes)."""
    from ernie_zoo.data.labelled import read_text_file

    path = _check_file(path)
    # names the file and line of bytes that are not UTF-8 text, or of a line over the limit
    text = read_text_file(path, max_line_bytes)
    if fmt not in ("csv", "tsv"):
        rows = _json_rows(text, path)
        if not rows:
            raise ValueError(f"data file {path} has no rows")
        return rows
    import datasets

    if len([line for _, line in zip(range(2), (ln for ln in text.splitlines() if ln.strip()))]) < 2:
        raise ValueError(f"data file {path} has a header but no rows")
    # na_filter=False keeps "NA"/"null"/"" as text; tsv cells are taken verbatim (no quote processing).
    kwargs: dict[str, Any] = {"na_filter": False}
    if fmt == "tsv":
        kwargs.update(delimiter="\t", quoting=3)
    try:
        # A throw-away cache: local files are re-read on every run, and the shared datasets cache would keep
        # an Arrow copy of every file ever read.
        with _quiet_datasets(), tempfile.TemporaryDirectory(prefix="ernie_zoo_data_") as cache:
            ds = datasets.load_dataset(
                "csv", data_files=str(path), split="train", cache_dir=cache, keep_in_memory=True, **kwargs
            )
            rows = ds.to_list()
    except Exception as e:  # datasets wraps parser errors in several types; name the file and the real error
        inner = _innermost(e)
        message = " ".join(str(inner).split())  # one line: pandas ends its messages with a newline
        raise ValueError(f"could not read {path} as {fmt}: {type(inner).__name__}: {message}") from e
    if not rows:
        raise ValueError(f"data file {path} has a header but no rows")
    return rows


def read_hub(name: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of one split of a datasets hub dataset (needs network unless cached)."""
    import datasets

    try:
        with _quiet_datasets():
            ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:
        raise ValueError(
            f"could not load split {split!r} of dataset {name!r}: {type(e).__name__}: {e}"
        ) from e
    return ds.to_list()


def read_tagged_file(path: str | Path, max_line_bytes: int | None = None) -> list[NerExample]:
    """Char-per-line NER file: `char<space or tab>tag` per line, a blank line between sentences.

    Parsed by `ernie_zoo.data.labelled.parse_bmes` (a line `"  O"` is a space character tagged O, as a few
    MSRA lines are). The scheme (BIO, BIOES or BMES) is detected from the file's tags.
    """
    from ernie_zoo.data.labelled import parse_bmes, read_text_file

    path = _check_file(path)
    sentences = parse_bmes(read_text_file(path, max_line_bytes), str(path))
    if not sentences:
        raise ValueError(f"data file {path} has no sentences")
    try:
        scheme = detect_scheme(tag for _, tags in sentences for tag in tags)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    examples = []
    for i, (chars, tags) in enumerate(sentences, 1):
        try:
            spans = tags_to_spans(tags, scheme)
        except ValueError as e:
            raise ValueError(f"{path}: sentence {i}: {e}") from None
        examples.append(NerExample("".join(chars), spans))
    return examples


# ---------------------------------------------------------------- turning rows into task examples


def _require_columns(rows: list[dict[str, Any]], columns: Sequence[str], where: str, hint: str) -> None:
    have = list(rows[0].keys())
    missing = [c for c in columns if c not in have]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; the file has columns {have}. {hint}")


def _text(value: Any, where: str, column: str) -> str:
    if value is None:
        raise ValueError(f"{where}: empty {column!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {column!r} must be text, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where}: empty {column!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate (a hub dataset; jsonl files are checked per line)
        raise ValueError(
            f"{where}: {column!r} holds a lone surrogate \\u{ord(value[e.start]):04x} at character {e.start + 1}, "
            "half of a UTF-16 pair and not a character; fix the text"
        ) from None
    return value


def _label_str(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


@dataclass
class ClassificationExample:
    text: str
    text_pair: str | None
    labels: list[str]  # one label, or several for multi-label


def classification_examples(
    rows: list[dict[str, Any]], data_args: Any, where: str
) -> list[ClassificationExample]:
    """Classification examples from table rows, with the text/label columns named in `data_args`."""
    columns = [data_args.text_column, data_args.label_column]
    if data_args.text_pair_column:
        columns.append(data_args.text_pair_column)
    _require_columns(
        rows, columns, where, "Set data.text_column / data.label_column / data.text_pair_column."
    )
    out = []
    for i, row in enumerate(rows, 1):
        at = f"{where} row {i}"
        text = _text(row[data_args.text_column], at, data_args.text_column)
        pair = (
            _text(row[data_args.text_pair_column], at, data_args.text_pair_column)
            if data_args.text_pair_column
            else None
        )
        value = row[data_args.label_column]
        if data_args.multi_label:
            if isinstance(value, str):
                labels = [v.strip() for v in value.split(data_args.label_separator) if v.strip()]
            elif isinstance(value, list):
                labels = [_label_str(v) for v in value]
            else:
                raise ValueError(f"{at}: a multi-label cell must be a list or separated text, got {value!r}")
        else:
            if value is None or isinstance(value, (list, dict)) or _label_str(value) == "":
                raise ValueError(
                    f"{at}: label must be a single value, got {value!r} (multi-label data needs "
                    "data.multi_label: true)"
                )
            labels = [_label_str(value)]
        out.append(ClassificationExample(text, pair, labels))
    return out


def check_labels(examples: Sequence[Any], known: Sequence[str], where: str, kind: str = "label") -> None:
    """Raise ValueError if an example uses a label (or entity type) outside `known`."""
    known_set = set(known)
    for i, ex in enumerate(examples, 1):
        used = ex.labels if isinstance(ex, ClassificationExample) else [s.type for s in ex.entities]
        for label in used:
            if label not in known_set:
                raise ValueError(
                    f"{where} example {i}: unknown {kind} {label!r}; known {kind}s are {sorted(known_set)} "
                    f"(set data.{'labels' if kind == 'label' else 'entity_types'} to list them all)"
                )


def ner_examples_from_rows(rows: list[dict[str, Any]], data_args: Any, where: str) -> list[NerExample]:
    """NER examples from jsonl rows `{"text": ..., "entities": [{"start", "end", "type"}, ...]}`."""
    _require_columns(
        rows,
        [data_args.text_column, data_args.entities_column],
        where,
        "Span files need a text column and an entities column of {start, end, type} objects "
        "(set data.text_column / data.entities_column).",
    )
    out = []
    for i, row in enumerate(rows, 1):
        at = f"{where} row {i}"
        text = _text(row[data_args.text_column], at, data_args.text_column)
        raw = row[data_args.entities_column] or []
        if not isinstance(raw, list):
            raise ValueError(f"{at}: {data_args.entities_column!r} must be a list, got {type(raw).__name__}")
        spans = []
        for entity in raw:
            if not isinstance(entity, dict) or not {"start", "end", "type"} <= set(entity):
                raise ValueError(f"{at}: each entity needs start, end and type, got {entity!r}")
            start, end, kind = entity["start"], entity["end"], entity["type"]
            if not isinstance(start, int) or not isinstance(end, int) or not 0 <= start < end <= len(text):
                raise ValueError(
                    f"{at}: entity {entity!r} is outside the text (length {len(text)}); "
                    "start/end are character offsets, end exclusive"
                )
            if entity.get("text") is not None and entity["text"] != text[start:end]:
                raise ValueError(
                    f"{at}: entity text {entity['text']!r} != text[{start}:{end}] {text[start:end]!r}"
                )
            if not isinstance(kind, str) or not kind:
                raise ValueError(f"{at}: entity type must be a non-empty string, got {kind!r}")
            spans.append(Span(start, end, kind))
        check_flat(spans, at)
        out.append(NerExample(text, sorted(spans)))
    return out


@dataclass
class GenerationExample:
    prompt: str
    target: str


def generation_examples(rows: list[dict[str, Any]], data_args: Any, where: str) -> list[GenerationExample]:
    """Prompt -> continuation pairs from table rows (e.g. a poem title -> the poem). An empty prompt is allowed
    (the continuation is then learnt unconditionally); an empty continuation is an error."""
    _require_columns(
        rows,
        [data_args.prompt_column, data_args.target_column],
        where,
        "Set data.prompt_column / data.target_column.",
    )
    out = []
    for i, row in enumerate(rows, 1):
        prompt = row[data_args.prompt_column]
        prompt = "" if prompt is None else _label_str(prompt) if not isinstance(prompt, str) else prompt
        out.append(
            GenerationExample(
                prompt, _text(row[data_args.target_column], f"{where} row {i}", data_args.target_column)
            )
        )
    return out


@dataclass
class InstructionExample:
    """One prompt / response pair, or (`messages` set) a conversation whose assistant turns are all learnt; then
    `prompt` is the first user turn and `response` the first assistant turn (for dev samples)."""

    prompt: str
    response: str
    messages: list[dict[str, str]] | None = None


ROLES = ("system", "user", "assistant")


def _messages(value: Any, where: str, column: str, roles: Sequence[str] = ROLES) -> list[dict[str, str]]:
    """A chat: a non-empty list of {"role", "content"} objects, roles among `roles`, contents non-empty text."""
    if not isinstance(value, list) or not value:
        raise ValueError(
            f"{where}: {column!r} must be a non-empty list of {{role, content}} messages, got {value!r:.80}"
        )
    out = []
    for j, message in enumerate(value, 1):
        if not isinstance(message, dict) or not {"role", "content"} <= set(message):
            raise ValueError(
                f"{where}: {column!r} message {j} needs a role and a content, got {message!r:.80}"
            )
        if message["role"] not in roles:
            raise ValueError(
                f"{where}: {column!r} message {j} has role {message['role']!r}; use one of {list(roles)}"
            )
        out.append({"role": message["role"], "content": _text(message["content"], where, f"{column}[{j}]")})
    return out


def instruction_examples(rows: list[dict[str, Any]], data_args: Any, where: str) -> list[InstructionExample]:
    """Prompt / response pairs from table rows (jsonl `{"prompt": ..., "response": ...}`; both non-empty text), or
    conversations (jsonl `{"messages": [{"role": "system" | "user" | "assistant", "content": ...}, ...]}`, the
    column data.messages_column) with at least one assistant turn, which must follow a user turn."""
    if data_args.messages_column in rows[0]:
        out = []
        for i, row in enumerate(rows, 1):
            at = f"{where} row {i}"
            messages = _messages(row[data_args.messages_column], at, data_args.messages_column)
            turns = [m["role"] for m in messages]
            if "assistant" not in turns:
                raise ValueError(f"{at}: the conversation has no assistant turn to learn")
            first = turns.index("assistant")
            if "user" not in turns[:first]:
                raise ValueError(f"{at}: the first assistant turn answers no user turn")
            user = next(m["content"] for m in messages if m["role"] == "user")
            out.append(InstructionExample(user, messages[first]["content"], messages))
        return out
    _require_columns(
        rows,
        [data_args.prompt_column, data_args.response_column],
        where,
        "Instruction data needs a prompt and a response per row (set data.prompt_column / data.response_column), "
        f"or a conversation per row in data.messages_column ({data_args.messages_column!r}).",
    )
    out = []
    for i, row in enumerate(rows, 1):
        at = f"{where} row {i}"
        out.append(
            InstructionExample(
                _text(row[data_args.prompt_column], at, data_args.prompt_column),
                _text(row[data_args.response_column], at, data_args.response_column),
            )
        )
    return out


@dataclass
class PreferenceExample:
    """A prompt (as chat messages; a text prompt is one user turn) and two responses, the preferred first."""

    prompt: list[dict[str, str]]
    chosen: str
    rejected: str


def _response(value: Any, where: str, column: str) -> str:
    """A response: text, or (TRL's conversational format) a list holding one assistant message."""
    if isinstance(value, list):
        messages = _messages(value, where, column, roles=("assistant",))
        if len(messages) != 1:
            raise ValueError(f"{where}: {column!r} must hold one assistant message, got {len(messages)}")
        return messages[0]["content"]
    return _text(value, where, column)


def preference_examples(rows: list[dict[str, Any]], data_args: Any, where: str) -> list[PreferenceExample]:
    """Preference pairs in TRL's formats: `{"prompt", "chosen", "rejected"}` as text, or conversational (a prompt
    of messages, each response a list of one assistant message); without a prompt column, each of chosen and
    rejected a whole conversation, the two the same up to their last (assistant) turn (TRL's implicit prompt)."""
    p, c, r = data_args.prompt_column, data_args.chosen_column, data_args.rejected_column
    implicit = p not in rows[0]
    _require_columns(
        rows,
        [c, r] if implicit else [p, c, r],
        where,
        "Preference data needs chosen and rejected responses and a prompt per row (set data.prompt_column / "
        "data.chosen_column / data.rejected_column).",
    )
    out = []
    for i, row in enumerate(rows, 1):
        at = f"{where} row {i}"
        if implicit:
            chosen, rejected = _messages(row[c], at, c), _messages(row[r], at, r)
            if chosen[:-1] != rejected[:-1] or len(chosen) < 2:
                raise ValueError(
                    f"{at}: without a {p!r} column, {c!r} and {r!r} must be conversations that differ only in "
                    "their last turn (the prompt is what they share)"
                )
            for side, conversation in ((c, chosen), (r, rejected)):
                if conversation[-1]["role"] != "assistant":
                    raise ValueError(f"{at}: the last turn of {side!r} must be the assistant's")
            prompt, chosen_text, rejected_text = chosen[:-1], chosen[-1]["content"], rejected[-1]["content"]
        else:
            value = row[p]
            prompt = (
                _messages(value, at, p, roles=("system", "user", "assistant"))
                if isinstance(value, list)
                else [{"role": "user", "content": _text(value, at, p)}]
            )
            chosen_text, rejected_text = _response(row[c], at, c), _response(row[r], at, r)
        if prompt[-1]["role"] == "assistant":
            raise ValueError(f"{at}: the prompt ends with an assistant turn; it must end with the user's")
        out.append(PreferenceExample(prompt, chosen_text, rejected_text))
    return out


@dataclass
class CorrectionExample:
    source: str
    target: str


def correction_examples(rows: list[dict[str, Any]], data_args: Any, where: str) -> list[CorrectionExample]:
    """Text correction pairs: the text as written (data.text_column) and the corrected text (data.target_column),
    of the same length (spelling correction replaces characters; it never inserts or deletes)."""
    _require_columns(
        rows,
        [data_args.text_column, data_args.target_column],
        where,
        "Set data.text_column (the text as written) / data.target_column (the corrected text).",
    )
    out = []
    for i, row in enumerate(rows, 1):
        source = _text(row[data_args.text_column], f"{where} row {i}", data_args.text_column)
        target = _text(row[data_args.target_column], f"{where} row {i}", data_args.target_column)
        if len(source) != len(target):
            raise ValueError(
                f"{where} row {i}: {data_args.text_column!r} has {len(source)} characters but "
                f"{data_args.target_column!r} has {len(target)}; spelling correction pairs must have the same length"
            )
        out.append(CorrectionExample(source, target))
    return out


def load_split(data_args: Any, task: str, split: str) -> tuple[list[Any], str] | None:
    """Examples of one split ("train", "dev", "test") and a name for messages; None if the split is not set."""
    path = getattr(data_args, f"{split}_file")
    limit = data_args.max_train_samples if split == "train" else data_args.max_eval_samples
    if path is not None:
        path = _check_file(Path(path).expanduser())  # a directory or a missing file, whatever its extension
        where = str(path)
        fmt = detect_format(path, data_args.file_format)
        if fmt == "conll":
            if task != "token_classification":
                raise ValueError(
                    f"{path}: char-per-line tagged files are for token_classification, not {task}"
                )
            examples: list[Any] = read_tagged_file(path, data_args.max_line_bytes)
        else:
            rows = read_table(path, fmt, data_args.max_line_bytes)
            examples = _from_rows(rows[:limit], data_args, task, where)
    elif data_args.dataset_name is not None:
        hub_split = getattr(data_args, f"{split}_split")
        if hub_split is None:
            return None
        where = f"{data_args.dataset_name}[{hub_split}]"
        rows = read_hub(data_args.dataset_name, data_args.dataset_config, hub_split)
        if not rows:
            raise ValueError(f"{where} is empty")
        examples = _from_rows(rows[:limit], data_args, task, where)
    else:
        if split == "train":
            raise ValueError("no training data: set data.train_file (or data.dataset_name)")
        return None
    return examples[:limit], where


def _from_rows(rows: list[dict[str, Any]], data_args: Any, task: str, where: str) -> list[Any]:
    if task == "sequence_classification":
        return classification_examples(rows, data_args, where)
    if task == "token_classification":
        return ner_examples_from_rows(rows, data_args, where)
    if task == "text_correction":
        return correction_examples(rows, data_args, where)
    if task == "instruction":
        return instruction_examples(rows, data_args, where)
    if task == "preference":
        return preference_examples(rows, data_args, where)
    return generation_examples(rows, data_args, where)


__all__ = [
    "ClassificationExample",
    "CorrectionExample",
    "GenerationExample",
    "InstructionExample",
    "NerExample",
    "PreferenceExample",
    "check_labels",
    "classification_examples",
    "correction_examples",
    "detect_format",
    "generation_examples",
    "instruction_examples",
    "load_split",
    "ner_examples_from_rows",
    "preference_examples",
    "read_hub",
    "read_table",
    "read_tagged_file",
]

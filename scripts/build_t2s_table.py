#!/usr/bin/env python
"""Build ``ernie_zoo/text/data/t2s_chars.tsv.gz``, the Traditional -> Simplified character table.

Source: OpenCC 1.1.9 (Apache-2.0), file ``data/dictionary/TSCharacters.txt`` of its source
distribution ``opencc-1.1.9.tar.gz`` (the wheels ship only compiled ``.ocd2`` dictionaries), fetched,
not installed, into ``~/.cache/ernie_zoo/raw`` with::

    pip download --no-deps --no-binary opencc -d ~/.cache/ernie_zoo/raw opencc==1.1.9

Each line of TSCharacters.txt is ``traditional<TAB>candidate [candidate ...]``. The table keeps a
strict 1 char -> 1 char map, so that conversion never changes a string's length and character
offsets computed on the converted string index the original one:

* the first candidate is taken (OpenCC's default);
* ambiguous entries whose candidates include the character itself are dropped (``乾 -> 干 乾``,
  ``覆 -> 覆 复``, ``藉 -> 藉 借``, ``於 -> 于 於``...): Simplified text uses these characters too
  (乾隆, 覆盖, 慰藉), so converting them would change Simplified input;
* entries whose target lies outside the Basic Multilingual Plane are dropped (mostly rare
  Extension-A characters mapped to Extension B-H ones, which fonts and vocabularies lack; newer
  OpenCC data moves exactly these into a separate ``TSCharactersExt`` dictionary);
* ``KEEP_AS_IS`` characters are dropped: standard mainland forms that OpenCC still maps (吒 in 哪吒);
* chains are resolved (``a -> b``, ``b -> c`` becomes ``a -> c``) so conversion is idempotent.

Output: ``#`` comment lines (source, licence, rules, counts), then ``traditional<TAB>simplified`` rows
sorted by code point, gzip with mtime 0 and no file name, written atomically: re-running the builder
on the same source reproduces identical bytes.

Usage::

    python scripts/build_t2s_table.py [--sdist PATH] [--out PATH]
    python scripts/build_t2s_table.py --check     # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "ernie_zoo" / "text" / "data" / "t2s_chars.tsv.gz"
DEFAULT_CACHE = Path(os.environ.get("ERNIE_ZOO_RAW_CACHE", Path.home() / ".cache" / "ernie_zoo" / "raw"))

OPENCC_VERSION = "1.1.9"
SDIST_NAME = f"opencc-{OPENCC_VERSION}.tar.gz"
SDIST_SHA256 = "8ad72283732951303390fae33a1ceda98ac9b03368a8f2912edc934d74077e4a"
MEMBER = f"opencc-{OPENCC_VERSION}/data/dictionary/TSCharacters.txt"

#: Characters OpenCC maps that are standard forms in mainland Simplified text; never converted.
KEEP_AS_IS = {
    "吒": "哪吒 / 叱吒 are written with 吒 in Simplified Chinese (通用规范汉字表); OpenCC maps it to 咤",
}


def fetch(cache_dir: Path) -> Path:
    """Return the path of the OpenCC sdist, downloading it (no install, no deps) if absent."""
    sdist = cache_dir / SDIST_NAME
    if not sdist.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "opencc"]
        cmd += ["-d", str(cache_dir), f"opencc=={OPENCC_VERSION}"]
        subprocess.run(cmd, check=True)
    return sdist


def read_ts_characters(sdist: Path) -> str:
    """The text of TSCharacters.txt inside the sdist (its checksum is verified first)."""
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise ValueError(f"{sdist}: sha256 {digest} is not the expected {SDIST_SHA256}")
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise ValueError(f"{sdist}: {MEMBER} missing")
        return member.read().decode("utf-8")


def build_table(text: str) -> tuple[dict[str, str], dict[str, int]]:
    """Parse TSCharacters.txt and apply the rules of the module docstring.

    Returns ``(table, counts)``: ``table`` maps one Traditional character to one Simplified
    character; ``counts`` says how many entries each rule dropped.
    """
    raw: dict[str, list[str]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, values = line.partition("\t")
        candidates = values.split()
        if not sep or len(key) != 1 or not candidates:
            raise ValueError(f"{MEMBER}:{lineno}: expected 'char<TAB>candidates', got {line!r}")
        if key in raw:
            raise ValueError(f"{MEMBER}:{lineno}: {key!r} listed twice")
        raw[key] = candidates

    counts = {"entries": len(raw), "multi_char": 0, "ambiguous": 0, "outside_bmp": 0, "keep_as_is": 0}
    first: dict[str, str] = {}
    for key, candidates in raw.items():
        target = candidates[0]
        if len(target) != 1:
            counts["multi_char"] += 1
        elif key in candidates:
            counts["ambiguous"] += 1
        elif ord(target) > 0xFFFF:
            counts["outside_bmp"] += 1
        elif key in KEEP_AS_IS:
            counts["keep_as_is"] += 1
        else:
            first[key] = target

    table: dict[str, str] = {}
    chained = 0
    for key, target in first.items():
        seen = {key}
        while target in first:  # resolve chains so that conversion is idempotent
            if target in seen:
                raise ValueError(f"cycle in TSCharacters through {key!r}")
            seen.add(target)
            target = first[target]
            chained += 1
        table[key] = target
    counts["chains_resolved"] = chained
    counts["kept"] = len(table)
    return dict(sorted(table.items(), key=lambda kv: ord(kv[0]))), counts


def render(table: dict[str, str], counts: dict[str, int]) -> bytes:
    """The gzip bytes of the data file (deterministic: mtime 0, no file name)."""
    header = [
        "# Traditional -> Simplified Chinese, one character to one character (ernie_zoo.text.traditional).",
        f"# Source: OpenCC {OPENCC_VERSION} (https://github.com/BYVoid/OpenCC), {MEMBER.split('/', 1)[1]}",
        f"#   from the source distribution {SDIST_NAME} (sha256 {SDIST_SHA256[:16]}...).",
        "# Licence: Apache-2.0. Copyright (c) Carbo Kuo (BYVoid) and the OpenCC contributors.",
        "#   Modified: reduced to 1:1 character pairs by scripts/build_t2s_table.py (see its docstring and",
        "#   ernie_zoo/text/data/LICENSES.md for the licence text). Do not edit by hand.",
        f"# Counts: {', '.join(f'{k}={v}' for k, v in counts.items())}",
        "# Columns: traditional<TAB>simplified",
    ]
    lines = header + [f"{t}\t{s}" for t, s in table.items()]
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8"))
    return buf.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file ordinary permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, default=None, help=f"path of {SDIST_NAME} (default: fetch)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="only verify that --out is up to date")
    args = parser.parse_args(argv)

    sdist = args.sdist if args.sdist is not None else fetch(args.cache_dir)
    table, counts = build_table(read_ts_characters(sdist))
    data = render(table, counts)
    if args.check:
        if not args.out.exists() or args.out.read_bytes() != data:
            print(f"{args.out} is stale; rerun scripts/build_t2s_table.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date ({len(table)} pairs)")
        return 0
    write_atomic(args.out, data)
    print(f"wrote {args.out}: {len(table)} pairs, {len(data)} bytes ({counts})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

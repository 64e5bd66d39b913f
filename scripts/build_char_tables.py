#!/usr/bin/env python
"""Build the per-character feature table shipped as ``ernie_zoo/tokenization/data/char_features.tsv.gz``.

Sources (Debian packages, fetched with ``apt-get download`` + ``dpkg -x`` into a cache directory outside
the repository; nothing is installed):

* ``unicode-data`` (15.0.0): ``usr/share/unicode/Unihan_IRGSources.txt[.bz2]`` gives ``kRSUnicode``
  (Kangxi radical + residual strokes) and ``kTotalStrokes``; ``usr/share/unicode/CJKRadicals.txt`` maps
  radical numbers to the radical characters.  Unicode licence.
* ``rime-data-stroke``: ``usr/share/rime-data/stroke.dict.yaml`` gives 5-type stroke sequences written
  with the letters h/s/p/n/z (横竖撇捺折), stored here as digits 1..5.  LGPL-3.

The file has ``#`` comment lines (sources, licences, columns) followed by two sections:

``[radicals]``
    ``number<TAB>radical char<TAB>unified ideograph``; ``number`` is ``1``..``214``, optionally followed
    by apostrophes for simplified forms (``120'``), exactly as in CJKRadicals.txt.
``[chars]``
    ``char<TAB>radical<TAB>total strokes<TAB>stroke sequence``; radical 1..214 (0 = unknown), strokes
    (0 = unknown), sequence of digits 1..5 (empty = unknown).  Rows are sorted by code point.

Output is deterministic (sorted rows, gzip header with mtime 0 and no file name), so re-running the
builder on the same package versions reproduces identical bytes.

Usage::

    python scripts/build_char_tables.py [--cache-dir ~/.cache/ernie_zoo/raw] [--out PATH]
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "ernie_zoo" / "tokenization" / "data" / "char_features.tsv.gz"
DEFAULT_CACHE = Path("~/.cache/ernie_zoo/raw").expanduser()

PACKAGES = ("unicode-data", "rime-data-stroke")
UNIHAN_IRG = "usr/share/unicode/Unihan_IRGSources.txt"
CJK_RADICALS = "usr/share/unicode/CJKRadicals.txt"
RIME_STROKE = "usr/share/rime-data/stroke.dict.yaml"

# (first, last) code points, inclusive.
RANGES = (
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
)

STROKE_LETTERS = {"h": "1", "s": "2", "p": "3", "n": "4", "z": "5"}  # 横 竖 撇 捺 折
RS_RE = re.compile(r"^(\d+)'*\.(-?\d+)$")
# The rime dictionary lists Taiwan (CNS 11643) sequences first, then (after this marker) the original
# table that follows Mainland China's standard glyphs; we prefer the Mainland entry where both exist.
RIME_MAINLAND_MARKER = "#The following entries inherited from the original table"


def in_ranges(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in RANGES)


def fetch(cache_dir: Path) -> Path:
    """Download and unpack the Debian packages into ``cache_dir/extracted`` unless already there."""
    extracted = cache_dir / "extracted"
    needed = {"unicode-data": UNIHAN_IRG, "rime-data-stroke": RIME_STROKE}
    cache_dir.mkdir(parents=True, exist_ok=True)
    for pkg in PACKAGES:
        rel = needed[pkg]
        if (extracted / rel).exists() or (extracted / (rel + ".bz2")).exists():
            continue
        debs = sorted(cache_dir.glob(f"{pkg}_*.deb"))
        if not debs:
            print(f"downloading {pkg} ...", file=sys.stderr)
            subprocess.run(["apt-get", "update"], check=False, stdout=subprocess.DEVNULL)
            subprocess.run(["apt-get", "download", pkg], cwd=cache_dir, check=True)
            debs = sorted(cache_dir.glob(f"{pkg}_*.deb"))
            if not debs:
                raise RuntimeError(f"apt-get download {pkg} produced no .deb in {cache_dir}")
        print(f"unpacking {debs[-1].name} ...", file=sys.stderr)
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(extracted)], check=True)
    return extracted


def read_text(path: Path) -> str:
    """Read ``path`` or, if absent, ``path.bz2``."""
    if path.exists():
        return path.read_text(encoding="utf-8")
    bz = path.with_name(path.name + ".bz2")
    if bz.exists():
        return bz2.decompress(bz.read_bytes()).decode("utf-8")
    raise FileNotFoundError(f"neither {path} nor {bz} exists")


def parse_unihan(text: str) -> tuple[dict[int, int], dict[int, int]]:
    """Return ``(radicals, strokes)`` keyed by code point (first value of multi-valued fields)."""
    radicals: dict[int, int] = {}
    strokes: dict[int, int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        cp_s, field, value = line.split("\t", 2)
        if field not in ("kRSUnicode", "kTotalStrokes"):
            continue
        cp = int(cp_s[2:], 16)
        first = value.split()[0]
        if field == "kRSUnicode":
            m = RS_RE.match(first)
            if not m:
                raise ValueError(f"bad kRSUnicode {value!r} for {cp_s}")
            rad = int(m.group(1))
            if not 1 <= rad <= 214:
                raise ValueError(f"radical out of range in {line!r}")
            radicals[cp] = rad
        else:
            strokes[cp] = int(first)
    return radicals, strokes


def parse_radicals(text: str) -> list[tuple[str, str, str]]:
    """Return ``(number, radical char, unified ideograph)`` rows from CJKRadicals.txt, in file order."""
    rows = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        num, rad_cp, uni_cp = (f.strip() for f in line.split(";"))
        rows.append((num, chr(int(rad_cp, 16)), chr(int(uni_cp, 16))))
    return rows


def parse_rime(text: str) -> dict[int, str]:
    """Return code point -> digit stroke sequence, Mainland entries overriding the Taiwan (CNS) ones."""
    taiwan: dict[int, str] = {}
    mainland: dict[int, str] = {}
    target = taiwan
    in_body = False
    for line in text.splitlines():
        if not in_body:
            in_body = line.strip() == "..."
            continue
        if line.startswith(RIME_MAINLAND_MARKER):
            target = mainland
            continue
        if not line or line.startswith("#"):
            continue
        word, code = line.split("\t")[:2]
        if len(word) != 1 or not code or any(c not in STROKE_LETTERS for c in code):
            continue
        target.setdefault(ord(word), "".join(STROKE_LETTERS[c] for c in code))
    if not mainland:
        raise ValueError("rime stroke dictionary: Mainland section marker not found")
    return {**taiwan, **mainland}


def build_rows(
    radicals: dict[int, int], strokes: dict[int, int], seqs: dict[int, str]
) -> list[tuple[str, int, int, str]]:
    rows = []
    for lo, hi in RANGES:
        for cp in range(lo, hi + 1):
            rad, tot, seq = radicals.get(cp, 0), strokes.get(cp, 0), seqs.get(cp, "")
            if 0xF900 <= cp <= 0xFAFF:
                # Compatibility ideographs: fill gaps from the canonical (unified) equivalent.
                canon = unicodedata.normalize("NFC", chr(cp))
                if canon != chr(cp) and len(canon) == 1:
                    c = ord(canon)
                    rad = rad or radicals.get(c, 0)
                    tot = tot or strokes.get(c, 0)
                    seq = seq or seqs.get(c, "")
            if rad or tot or seq:
                rows.append((chr(cp), rad, tot, seq))
    return rows


def unihan_version(text: str) -> str:
    m = re.search(r"^# Unicode version: (\S+)", text, re.M)
    return m.group(1) if m else "unknown"


def render(rows, radical_rows, uversion: str) -> bytes:
    header = [
        "# ernie_zoo per-character features. Generated by scripts/build_char_tables.py; do not edit.",
        f"# radical, total_strokes: Unicode Unihan {uversion} kRSUnicode / kTotalStrokes"
        " (Debian package unicode-data); Copyright (c) Unicode, Inc.; Unicode licence, see LICENSES.md.",
        "# [radicals] section: CJKRadicals.txt (Debian package unicode-data); Unicode licence.",
        "# stroke_seq: rime-stroke stroke.dict.yaml (Debian package rime-data-stroke), letters h/s/p/n/z"
        " mapped to 1-5 (横竖撇捺折), Mainland-glyph entries preferred; LGPL-3.0, see LICENSES.md.",
        "# This file is a modified (derived) form of the above data files: fields extracted and reformatted.",
        "# [radicals] columns: number, radical_char, unified_ideograph",
        "# [chars] columns: char, radical (1-214, 0=unknown), total_strokes (0=unknown), stroke_seq",
    ]
    out = io.StringIO()
    out.write("\n".join(header) + "\n")
    out.write("[radicals]\n")
    for num, rad, uni in radical_rows:
        out.write(f"{num}\t{rad}\t{uni}\n")
    out.write("[chars]\n")
    for ch, rad, tot, seq in rows:
        out.write(f"{ch}\t{rad}\t{tot}\t{seq}\n")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(out.getvalue().encode("utf-8"))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE, help="download/unpack dir (outside repo)"
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .tsv.gz path")
    args = ap.parse_args(argv)

    root = fetch(args.cache_dir.expanduser())
    unihan_text = read_text(root / UNIHAN_IRG)
    radicals, strokes = parse_unihan(unihan_text)
    radical_rows = parse_radicals(read_text(root / CJK_RADICALS))
    seqs = parse_rime(read_text(root / RIME_STROKE))
    rows = build_rows(radicals, strokes, seqs)

    data = render(rows, radical_rows, unihan_version(unihan_text))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)

    main_block = [r for r in rows if 0x4E00 <= ord(r[0]) <= 0x9FFF]
    print(
        f"wrote {args.out} ({len(data)} bytes): {len(rows)} chars, {len(radical_rows)} radicals; "
        f"U+4E00-9FFF: {len(main_block)} rows, {sum(1 for r in main_block if r[1] and r[2])} with "
        f"radical+strokes, {sum(1 for r in main_block if r[3])} with stroke sequence; "
        f"max strokes {max(r[2] for r in rows)}, longest sequence {max(len(r[3]) for r in rows)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Generate ``ernie_zoo/tokenization/data/pinyin_syllables.txt``, the fixed toneless syllable vocabulary.

The vocabulary is every reading of every character in pypinyin's single-character dictionary
(plus every reading used by its phrase dictionary, which currently adds nothing new), converted
exactly like ``lazy_pinyin(..., style=Style.TONE3, neutral_tone_with_five=True, v_to_u=False)``
writes it, with the trailing tone digit removed: ``lǜ`` -> ``lv4`` -> ``lv``; ``ê̄`` -> ``ê1`` -> ``ê``;
interjections such as ``m``, ``n``, ``ng``, ``hm``, ``hng`` are kept as pypinyin writes them.

Line 1 is the header ``[NONE]`` (syllable id 0: no pinyin / not a Han character); the remaining
lines are sorted by code point. The model's embedding table is indexed by
``syllable_id * 6 + tone`` (see ``ernie_zoo/tokenization/pinyin.py``), so this file must not change
once checkpoints exist: the pypinyin version is pinned and checked here.

Usage::

    python scripts/build_pinyin_vocab.py            # (re)write the data file
    python scripts/build_pinyin_vocab.py --check    # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

EXPECTED_PYPINYIN = "0.55.0"
HEADER = "[NONE]"
OUT_PATH = (
    Path(__file__).resolve().parents[1] / "ernie_zoo" / "tokenization" / "data" / "pinyin_syllables.txt"
)
_TONE_DIGIT = re.compile(r"[0-5]$")


def build_vocab() -> list[str]:
    """Return the vocabulary lines: ``[NONE]`` followed by the sorted toneless syllables."""
    from pypinyin.contrib.tone_convert import to_tone3
    from pypinyin.phrases_dict import phrases_dict
    from pypinyin.pinyin_dict import pinyin_dict

    readings: set[str] = set()
    for value in pinyin_dict.values():
        readings.update(value.split(","))
    for phrase_readings in phrases_dict.values():
        for char_readings in phrase_readings:
            readings.update(char_readings)

    syllables: set[str] = set()
    for reading in readings:
        tone3 = to_tone3(reading, v_to_u=False, neutral_tone_with_five=True)
        base = _TONE_DIGIT.sub("", tone3)
        if not base or not base.isalpha():
            raise ValueError(f"unexpected TONE3 syllable {tone3!r} (from {reading!r})")
        syllables.add(base)
    return [HEADER, *sorted(syllables)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT_PATH)
    parser.add_argument("--check", action="store_true", help="only verify that --out is up to date")
    parser.add_argument(
        "--allow-other-pypinyin", action="store_true", help=f"do not require pypinyin=={EXPECTED_PYPINYIN}"
    )
    args = parser.parse_args(argv)

    import pypinyin

    if pypinyin.__version__ != EXPECTED_PYPINYIN and not args.allow_other_pypinyin:
        print(f"pypinyin {pypinyin.__version__} found, {EXPECTED_PYPINYIN} required", file=sys.stderr)
        return 2

    text = "\n".join(build_vocab()) + "\n"
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is stale; rerun scripts/build_pinyin_vocab.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date ({text.count(chr(10))} lines)")
        return 0

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {text.count(chr(10))} lines (incl. {HEADER})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

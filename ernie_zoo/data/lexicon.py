"""Build the NER entity lexicon (PER / LOC / ORG names) from the offline lexicons of ``../shared/DATA.md``.

    python -m ernie_zoo.data.lexicon --out runs/zoo/data/entity_lexicon.txt

============  =================================================  ==================================  ==========
type          source                                             what                                licence
============  =================================================  ==================================  ==========
PER           jieba ``dict.txt`` (installed with jieba)          words tagged nr / nrt / nrfg        MIT
LOC           jieba ``dict.txt``                                 words tagged ns                     MIT
LOC           jionlp 1.5.31 ``dictionary/china_location.zip``    provinces, cities, counties, towns  Apache-2.0
                                                                 (full and short names)
LOC           jionlp 1.5.31 ``dictionary/world_location.txt``    countries, capitals, major cities   Apache-2.0
ORG           jieba ``dict.txt``                                 words tagged nt                     MIT
============  =================================================  ==================================  ==========

Left out on purpose: jionlp's 303k village names (on MSRA train, 18% of their matches are place names, and they
cover almost no names the training data lacks) and every one-character word. No labelled data goes in: the
lexicon is the same for names seen in training and names not seen, so the tagger cannot learn "in the lexicon"
as a proxy for "seen in training".
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ernie_zoo.recipe_cli import command_main
from ernie_zoo.text.lexicon import EntityLexicon
from ernie_zoo.text.segment import JIEBA_NAME_TYPES

from .sources import DEFAULT_CACHE, fetch, read_archive_member

logger = logging.getLogger(__name__)

__all__ = ["build_entity_lexicon", "jieba_entities", "jionlp_locations"]

TYPES = ("PER", "LOC", "ORG")
#: china_location.txt indents each level by one tab: province 0, city 1, county 2, town 3, village 4.
MAX_LOCATION_DEPTH = 3


def jieba_entities(dict_text: str) -> dict[str, set[str]]:
    """`word -> types` from jieba's ``dict.txt`` lines (``word freq pos``)."""
    out: dict[str, set[str]] = {}
    for line in dict_text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in JIEBA_NAME_TYPES:
            out.setdefault(parts[0], set()).add(JIEBA_NAME_TYPES[parts[2]])
    return out


def jionlp_locations(china_location: str, world_location: str) -> set[str]:
    """Place names from jionlp's ``china_location.txt`` (down to towns) and ``world_location.txt``."""
    names: set[str] = set()
    for line in china_location.splitlines():
        depth = len(line) - len(line.lstrip("\t"))
        if depth > MAX_LOCATION_DEPTH:
            continue
        names.update(p for p in line.strip().split("\t") if p and not p.isdigit())
    for line in world_location.splitlines():
        line = line.strip()
        if not line or line.endswith(":"):  # continent headings ("亚洲:")
            continue
        names.update(p for p in line.replace("/", "\t").split("\t") if p)
    return names


def build_entity_lexicon(raw_dir: Path | None = None) -> EntityLexicon:
    import jieba

    dict_text = (Path(jieba.__file__).parent / "dict.txt").read_text(encoding="utf-8")
    words = jieba_entities(dict_text)
    wheel = fetch("jionlp", raw_dir)
    with zipfile.ZipFile(io.BytesIO(read_archive_member(wheel, "dictionary/china_location.zip"))) as zf:
        china = zf.read("china_location.txt").decode("utf-8")
    world = read_archive_member(wheel, "dictionary/world_location.txt").decode("utf-8")
    for name in jionlp_locations(china, world):
        words.setdefault(name, set()).add("LOC")
    lexicon = EntityLexicon(words, TYPES, min_length=2)
    counts = Counter(t for _, types in lexicon.entries() for t in types)
    logger.info("entity lexicon: %d words (%s)", len(lexicon), ", ".join(f"{t} {counts[t]}" for t in TYPES))
    return lexicon


@dataclass
class Args:
    """Build the zoo's entity lexicon from its sources."""

    out: Path | None = None
    """Where to write the lexicon (entity_lexicon.txt format); required."""
    raw_dir: Path = DEFAULT_CACHE / "raw"
    """Download cache of the sources."""

    def validate(self) -> None:
        if self.out is None:
            raise ValueError("--out is required: where to write the lexicon")


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = args.out.expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    build_entity_lexicon(args.raw_dir.expanduser()).save(out)
    logger.info("wrote %s", out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(Args, run, "python -m ernie_zoo.data.lexicon", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Confusion sets: for each character, the characters it is mistaken for, by kind (sound, shape).

Built from pinyin and radical/stroke tables by `ernie_zoo.data.spelling`; saved with a spelling-correction model as
`confusion_sets.json` so that decoding only turns a character into one it is plausibly confused with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONFUSION_FILE", "KINDS", "ConfusionSets", "is_cjk"]

KINDS = ("same_tone", "diff_tone", "near_sound", "shape")
CONFUSION_FILE = "confusion_sets.json"
_CJK = re.compile(r"[\u4e00-\u9fff]")


def is_cjk(ch: str) -> bool:
    """A character of the main CJK Unified Ideographs block: what confusion sets cover and a corrector may change."""
    return bool(_CJK.fullmatch(ch))


@dataclass
class ConfusionSets:
    """For each character, its confusable characters by kind (strings of candidates, sorted)."""

    sets: dict[str, dict[str, str]]

    def candidates(self, ch: str, kinds: Iterable[str] = KINDS) -> str:
        entry = self.sets.get(ch)
        if not entry:
            return ""
        return "".join(entry.get(k, "") for k in kinds)

    def all_candidates(self, ch: str) -> set[str]:
        return set(self.candidates(ch))

    def __contains__(self, ch: str) -> bool:
        return ch in self.sets

    def __len__(self) -> int:
        return len(self.sets)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            json.dumps(
                {"version": 1, "kinds": list(KINDS), "sets": self.sets}, ensure_ascii=False, sort_keys=True
            ),
            encoding="utf-8",
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> ConfusionSets:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a readable confusion-set file ({e})") from None
        sets = data.get("sets") if isinstance(data, dict) else None
        if not isinstance(sets, dict) or any(
            not isinstance(v, dict) or any(k not in KINDS or not isinstance(s, str) for k, s in v.items())
            for v in sets.values()
        ):
            raise ValueError(
                f"{path}: expected {{'sets': {{char: {{kind: candidates}}}}}} with kinds {KINDS}"
            )
        return cls(sets)

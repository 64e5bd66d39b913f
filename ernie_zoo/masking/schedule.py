"""ERNIE's staged masking schedule: which strategy (or mixture of strategies) to use at a training step.

    >>> schedule = MaskingSchedule([MaskingStage("char", 1000), MaskingStage("phrase", 3000),
    ...                             MaskingStage({"phrase": 0.5, "entity": 0.5}, None)])
    >>> schedule.strategy_at(999), schedule.strategy_at(1000), schedule.strategy_at(10**6)
    ('char', 'phrase', {'phrase': 0.5, 'entity': 0.5})

A stage covers the steps from the previous stage's `until_step` (0 for the first) up to, not including,
its own `until_step`; `None` means "until the end". Steps past the last finite `until_step` stay in the
last stage.

A `sentiment` stage (SKEP, Tian et al. 2020) masks the sentiment words of a sentiment lexicon first, then
fills the same budget with phrase units; it needs examples prepared with a sentiment lexicon
(`prepare_dataset(..., sentiment_lexicon=...)`), and the collator then also emits `polarity_labels`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["STRATEGIES", "MaskingStage", "MaskingSchedule", "normalize_strategy"]

#: The masking granularities, in ERNIE 1.0's order (basic-level, phrase-level, entity-level), then SKEP's
#: sentiment-word level.
STRATEGIES = ("char", "phrase", "entity", "sentiment")
_ALIASES = {"basic": "char", "character": "char", "word": "phrase"}

Strategy = Literal["char", "phrase", "entity", "sentiment"] | dict[str, float]


def _strategy_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a masking strategy name must be a str, got {type(name).__name__}: {name!r}")
    name = _ALIASES.get(name, name)
    if name not in STRATEGIES:
        raise ValueError(f"unknown masking strategy {name!r}; expected one of {STRATEGIES} (or 'basic')")
    return name


def normalize_strategy(strategy: str | Mapping[str, float]) -> str | dict[str, float]:
    """Validate a strategy: a name, or a mixture `{name: weight}` whose weights are normalised to sum to 1
    (a mixture with a single non-zero weight collapses to that name)."""
    if isinstance(strategy, str):
        return _strategy_name(strategy)
    if not isinstance(strategy, Mapping):
        raise TypeError(
            f"a masking strategy must be a name or a {{name: probability}} dict, got {strategy!r}"
        )
    weights: dict[str, float] = {}
    for name, weight in strategy.items():
        key = _strategy_name(name)
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise TypeError(f"mixture weight for {name!r} must be a number, got {weight!r}") from None
        if not w >= 0 or w == float("inf"):
            raise ValueError(f"mixture weight for {name!r} must be finite and >= 0, got {weight!r}")
        weights[key] = weights.get(key, 0.0) + w
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"a strategy mixture needs a positive total weight, got {dict(strategy)!r}")
    weights = {k: w / total for k, w in weights.items() if w > 0}
    if len(weights) == 1:
        return next(iter(weights))
    return weights


@dataclass(frozen=True)
class MaskingStage:
    """One stage of the schedule.

    Args:
        strategy: "char" (basic-level; alias "basic"), "phrase", "entity" or "sentiment" (sentiment words
            first, SKEP), or a mixture such as `{"phrase": 0.3, "entity": 0.7}`: each sequence of a batch picks
            its strategy with these probabilities.
        until_step: the first step that no longer belongs to this stage; None for "until the end".
    """

    strategy: Strategy
    until_step: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "strategy", normalize_strategy(self.strategy))
        if self.until_step is not None:
            if isinstance(self.until_step, bool) or not isinstance(self.until_step, int):
                raise TypeError(f"until_step must be an int or None, got {self.until_step!r}")
            if self.until_step < 1:
                raise ValueError(
                    f"until_step must be >= 1 (the stage ends before this step), got {self.until_step}"
                )


class MaskingSchedule:
    """An ordered list of `MaskingStage`s over training steps (ERNIE 1.0: basic -> phrase -> entity)."""

    def __init__(self, stages: Sequence[MaskingStage]):
        stages = list(stages)
        if not stages:
            raise ValueError("a MaskingSchedule needs at least one stage")
        for i, stage in enumerate(stages):
            if not isinstance(stage, MaskingStage):
                raise TypeError(f"stage {i} must be a MaskingStage, got {type(stage).__name__}")
        bounds = [s.until_step for s in stages[:-1]]
        if any(b is None for b in bounds):
            raise ValueError("only the last stage may have until_step=None")
        if any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])):
            raise ValueError(f"until_step must increase from stage to stage, got {bounds}")
        last = stages[-1].until_step
        if last is not None and bounds and last <= bounds[-1]:
            raise ValueError(f"until_step must increase from stage to stage, got {bounds + [last]}")
        self.stages = stages
        self._bounds: list[int] = bounds

    @classmethod
    def constant(cls, strategy: str | Mapping[str, float]) -> MaskingSchedule:
        """A one-stage schedule."""
        return cls([MaskingStage(strategy, None)])

    @classmethod
    def from_config(cls, config: Sequence[Mapping[str, Any]] | Mapping[str, Any] | str) -> MaskingSchedule:
        """Build from YAML-style data: `[{"strategy": "char", "until_step": 1000}, ...]`, a dict with a
        `stages` list, or a single strategy name."""
        if isinstance(config, str):
            return cls.constant(config)
        if isinstance(config, Mapping):
            if "stages" not in config:
                raise ValueError(
                    f"a masking schedule mapping needs a 'stages' list, got keys {sorted(config)}"
                )
            config = config["stages"]
        if not isinstance(config, Sequence):
            raise TypeError(
                f"a masking schedule config must be a list of stages, got {type(config).__name__}"
            )
        stages = []
        for i, item in enumerate(config):
            if not isinstance(item, Mapping):
                raise TypeError(
                    f"stage {i}: expected a mapping with 'strategy' and 'until_step', got {item!r}"
                )
            unknown = set(item) - {"strategy", "until_step"}
            if unknown:
                raise ValueError(f"stage {i}: unknown keys {sorted(unknown)} (allowed: strategy, until_step)")
            if "strategy" not in item:
                raise ValueError(f"stage {i}: missing 'strategy'")
            stages.append(MaskingStage(item["strategy"], item.get("until_step")))
        return cls(stages)

    def uses(self, name: str) -> bool:
        """Whether some stage uses the strategy `name` (alone or in a mixture)."""
        name = _strategy_name(name)
        return any(
            s.strategy == name if isinstance(s.strategy, str) else name in s.strategy for s in self.stages
        )

    def to_config(self) -> list[dict[str, Any]]:
        """The inverse of `from_config`."""
        return [{"strategy": s.strategy, "until_step": s.until_step} for s in self.stages]

    def stage_index_at(self, step: int) -> int:
        """Index of the stage that `step` (0-based) falls in."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return min(bisect.bisect_right(self._bounds, step), len(self.stages) - 1)

    def strategy_at(self, step: int) -> str | dict[str, float]:
        """The strategy name, or `{name: probability}` mixture, used at `step`."""
        return self.stages[self.stage_index_at(step)].strategy

    def __repr__(self) -> str:
        return f"MaskingSchedule({self.to_config()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MaskingSchedule) and self.to_config() == other.to_config()

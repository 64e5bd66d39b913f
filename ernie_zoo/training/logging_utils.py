"""Training logs: `metrics.jsonl` (one JSON object per logged step), TensorBoard events, a tqdm bar.

On resume from step k, `metrics.jsonl` loses the lines of steps after k and TensorBoard purges its events
after k (`SummaryWriter(purge_step=k + 1)`), so both read as one uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ernie_zoo.utils import atomic_write_text

logger = logging.getLogger(__name__)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write a JSON file through a temporary file and `os.replace` (never half-written)."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a `metrics.jsonl` file (a torn last line from a killed process is ignored)."""
    records = []
    path = Path(path)
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            logger.warning("%s: ignoring a torn line (the writer was killed mid-write)", path)
    return records


class MetricsLogger:
    """Append metric records to `output_dir/metrics.jsonl` and, optionally, TensorBoard.

    Args:
        output_dir: the run directory.
        tensorboard: also write events to `output_dir/tensorboard`.
        resume_step: the step the run continues from (0 for a fresh run); later records are dropped.
        enabled: False on ranks other than the main one (nothing is written).
    """

    def __init__(
        self,
        output_dir: str | os.PathLike,
        tensorboard: bool = True,
        resume_step: int = 0,
        enabled: bool = True,
    ):
        self.enabled = enabled
        self.writer = None
        if not enabled:  # not the main rank: log nothing
            return
        self.path = Path(output_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step == 0:
            self.path.write_text("", encoding="utf-8")
        else:
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"), purge_step=resume_step + 1)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Record `metrics` (names like "train/loss") at `step`; None values are skipped in TensorBoard."""
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        if self.writer is not None:
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self.writer is not None:
            self.writer.close()


def progress_bar(total: int, initial: int, enabled: bool = True, desc: str = "pretrain") -> tqdm:
    """A tqdm bar over optimizer steps (disabled: a no-op bar)."""
    return tqdm(total=total, initial=initial, desc=desc, disable=not enabled, dynamic_ncols=True, unit="step")


def format_count(n: float) -> str:
    """1234567 -> '1.23M'."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


__all__ = ["MetricsLogger", "format_count", "progress_bar", "read_metrics", "write_json_atomic"]

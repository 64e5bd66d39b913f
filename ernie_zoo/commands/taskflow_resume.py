"""What a `ernie-zoo taskflow ... -o out.jsonl --resume` output was made from, kept beside it in out.jsonl.meta.json.

A resume appends to the results already written, so it is only right when the job that wrote them read the same
input lines with the same task, model and options. The sidecar records both:

    {"format": 1,
     "made_from": {"task": ..., "model": ..., "model_files": ..., "precision": ..., "options": {...}, "digits": ...},
     "done": {"input_line": 55, "results": 48, "input_sha256": ..., "output_bytes": 4312, "output_sha256": ...}}

`done` is a checkpoint moved after each block is flushed: the results and output bytes written so far, and a
SHA-256 over the (line number, text) pairs they were made from. A restart checks `made_from` against this run,
cuts the output back to `output_bytes` (a block or a line half written when the job was killed is redone) after
checking those bytes are the ones written, and re-reads the input up to `input_line`, checking its hash. Any
difference is refused with what differs and how to start over; an input that only grew at its end resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

FORMAT = 1
SAMPLE = 1 << 20  # bytes hashed at the start, middle and end of a large model file


def sidecar_path(output: str) -> str:
    return output + ".meta.json"


def _file_fingerprint(path: Path) -> str:
    """SHA-256 of a file; for one over 3 MiB, of its size and three 1 MiB samples (a retrained model changes every
    weight, so any sample differs; hashing a 40 GB checkpoint on every resume would not be "flat")."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    digest.update(str(size).encode())
    with open(path, "rb") as f:
        if size <= 3 * SAMPLE:
            digest.update(f.read())
        else:
            for offset in (0, size // 2, size - SAMPLE):
                f.seek(offset)
                digest.update(f.read(SAMPLE))
    return digest.hexdigest()


def _tree_fingerprint(location: str | None) -> str | None:
    """A fingerprint of a model directory's files (names, sizes, sampled contents), or None for a hub id."""
    if location is None or not os.path.isdir(location):
        return None
    digest = hashlib.sha256()
    root = Path(location)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root).as_posix()}\0{_file_fingerprint(path)}\n".encode())
    return digest.hexdigest()


def made_from(
    flow: Any, *, mode: str | None, max_seq_len: int, user_dict: str | None, digits: int | None
) -> dict:
    """What decides the results of a Taskflow run, as plain JSON (compared key by key on resume). Batch size,
    engine and workers are left out: they change how fast, not what."""
    options = json.loads(json.dumps(dataclasses.asdict(flow.options), default=str, sort_keys=True))
    return {
        "task": flow.task,
        "model": flow.model_path,
        "model_files": _tree_fingerprint(flow.model_path),
        "mode": mode,
        "precision": flow.settings.precision,
        "backend": flow.backend,
        "max_seq_len": max_seq_len,
        "user_dict": _file_fingerprint(Path(user_dict))
        if user_dict and os.path.isfile(user_dict)
        else user_dict,
        "options": options,
        "digits": digits,
    }


def _line_key(number: int, text: str) -> bytes:
    return (json.dumps([number, text]) + "\n").encode("ascii")  # ASCII-escaped: a lone surrogate hashes too


class ResumeLog:
    """The sidecar of one --resume output. `start(texts, input_name)` checks and skips what is done and opens the
    output for appending; `commit(block, data)` writes a block's results and moves the checkpoint."""

    def __init__(self, output: str, made: dict):
        self.output = output
        self.path = sidecar_path(output)
        self.made = made
        self.input_line = 0
        self.results = 0
        self.output_bytes = 0
        self.input_hash = hashlib.sha256()
        self.output_hash = hashlib.sha256()

    def _start_over(self) -> str:
        return f"to start over, delete {self.output} and {self.path} (or give a new --output path)"

    def _load(self) -> dict | None:
        """The recorded sidecar, or None when this output starts fresh."""
        has_output = os.path.exists(self.output) and os.path.getsize(self.output) > 0
        if not os.path.exists(self.path):
            if has_output:
                raise ValueError(
                    f"--resume: {self.output} has no {os.path.basename(self.path)}, so what it was made from "
                    f"(input, task, model, options) is unknown; {self._start_over()}"
                )
            return None
        if not os.path.exists(self.output):
            return None  # nothing written that could be mixed with this run
        try:
            with open(self.path, encoding="utf-8") as f:
                meta = json.load(f)
            done = meta["done"]
            recorded, line, results = meta["made_from"], int(done["input_line"]), int(done["results"])
            out_bytes, in_sha, out_sha = (
                int(done["output_bytes"]),
                done["input_sha256"],
                done["output_sha256"],
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"--resume: {self.path} is not a taskflow resume record ({exc}); {self._start_over()}"
            ) from None
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"--resume: {self.path} has format {meta.get('format')!r}, this ernie-zoo writes {FORMAT}; "
                f"{self._start_over()}"
            )
        return {"made_from": recorded, "line": line, "results": results, "bytes": out_bytes, "in": in_sha,
                "out": out_sha}  # fmt: skip

    def _check_made_from(self, recorded: dict) -> None:
        keys = sorted(set(recorded) | set(self.made))
        differ = [k for k in keys if recorded.get(k) != self.made.get(k)]
        if differ:
            then = ", ".join(f"{k}={recorded.get(k)!r}" for k in differ)
            now = ", ".join(f"{k}={self.made.get(k)!r}" for k in differ)
            raise ValueError(
                f"--resume: {self.output} was made with {then}; this run has {now}. Resuming would mix both in one "
                f"file: run with the earlier settings, or {self._start_over()}"
            )

    def _check_output(self, expected_bytes: int, expected_sha: str) -> None:
        """The output's first `expected_bytes` are the ones written; anything after (a block or line half written
        by a killed job) is cut off, to be redone."""
        size = os.path.getsize(self.output)
        digest = hashlib.sha256()
        if size >= expected_bytes:
            with open(self.output, "rb") as f:
                left = expected_bytes
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    digest.update(chunk)
                    left -= len(chunk)
        if size < expected_bytes or digest.hexdigest() != expected_sha:
            raise ValueError(
                f"--resume: {self.output} was changed since it was written (its first {expected_bytes} bytes are "
                f"not the results {self.path} records); {self._start_over()}"
            )
        if size != expected_bytes:
            with open(self.output, "r+b") as f:
                f.truncate(expected_bytes)
        self.output_hash = digest
        self.output_bytes = expected_bytes

    def _skip(self, texts: Iterator[tuple[int, str]], name: str, through: int, expected_sha: str) -> None:
        """Consume the inputs up to line `through`, hashing them as they were hashed when written."""
        while self.input_line < through:
            item = next(texts, None)
            if item is None:
                raise ValueError(
                    f"--resume: {self.output} holds results for {name} up to input line {through}, but {name} now "
                    f"ends at line {self.input_line}: it comes from another input or the input changed; "
                    f"{self._start_over()}"
                )
            if item[0] > through:  # the recorded last line is blank now: lines were removed or moved
                break
            self.input_hash.update(_line_key(*item))
            self.input_line = item[0]
        if self.input_line != through or self.input_hash.hexdigest() != expected_sha:
            raise ValueError(
                f"--resume: the {self.results} results in {self.output} were made from input lines 1-{through} "
                f"of a file that differs from {name} (a line edited, inserted or removed): it comes from another "
                f"input or the input changed; {self._start_over()}"
            )

    def start(self, texts: Iterator[tuple[int, str]], name: str) -> BinaryIO:
        """Check the sidecar against this run, skip the inputs already done, and open the output to append."""
        recorded = self._load()
        if recorded is None:
            out = open(self.output, "wb")
        else:
            self._check_made_from(recorded["made_from"])
            self._check_output(recorded["bytes"], recorded["out"])
            self.results = recorded["results"]
            self._skip(texts, name, recorded["line"], recorded["in"])
            out = open(self.output, "ab")
        self._write_sidecar()
        return out

    def commit(self, out: BinaryIO, block: list[tuple[int, str]], data: bytes) -> None:
        """Append one block's results, flush them to disk, then record them as done (in that order: a kill between
        the two leaves output past the checkpoint, which the next start cuts off and redoes)."""
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
        for item in block:
            self.input_hash.update(_line_key(*item))
        self.input_line = block[-1][0]
        self.results += len(block)
        self.output_hash.update(data)
        self.output_bytes += len(data)
        self._write_sidecar()

    def _write_sidecar(self) -> None:
        meta = {
            "format": FORMAT,
            "made_from": self.made,
            "done": {
                "input_line": self.input_line,
                "results": self.results,
                "input_sha256": self.input_hash.hexdigest(),
                "output_bytes": self.output_bytes,
                "output_sha256": self.output_hash.hexdigest(),
            },
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
        os.replace(tmp, self.path)


__all__ = ["ResumeLog", "made_from", "sidecar_path"]

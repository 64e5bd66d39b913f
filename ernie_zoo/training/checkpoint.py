"""Atomic, verifiable training checkpoints, without pickle.

Layout of `output_dir/checkpoint-<step>/`::

    config.json, model.safetensors   the model (save_pretrained: loadable with from_pretrained)
    optimizer.safetensors            optimizer state tensors, keys "state.<param index>.<name>"
    optimizer.json                   param_groups and the non-tensor optimizer state
    scheduler.json                   LR scheduler state_dict (plain numbers)
    rng.json, rng.safetensors        python / numpy RNG state (JSON), torch CPU/CUDA RNG state (tensors)
    trainer_state.json               step, data position (epoch, index), tokens seen, best eval, ...
    recipe.yaml                      the recipe of the run
    manifest.json                    written last: size and sha256 of every file above

Asynchronous saves (`save_checkpoint_async`: the pipeline backend's logical checkpoints, `checkpoint.async_save`)
keep the same rule: the files are written in the background into the temporary directory, and the main rank adds
the manifest and renames it only after every rank's files are written.

Atomicity: everything is written into `.checkpoint-<step>.tmp`, each file and the directory are
fsynced, the manifest goes in last, then one `os.replace` publishes `checkpoint-<step>` and the parent directory
is fsynced. A process killed at any moment leaves either no `checkpoint-<step>` or a complete one; leftover
temporary directories are removed by `remove_stale_temporaries` at the next start. A checkpoint damaged later
(truncated copy, deleted file) fails `verify_checkpoint`, and `latest_valid_checkpoint` skips it with a
warning that says what is wrong -- or refuses, naming each one, when none is valid (a resume must not silently
become a fresh start). Rotation counts only valid checkpoints, so damaged ones at higher steps never push a
new save out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ernie_zoo.utils import MANIFEST, ManifestError, read_manifest, verify_manifest, write_manifest

logger = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_TMP_RE = re.compile(r"^\.checkpoint-\d+\.tmp")


# ------------------------------------------------------------------------------------------ filesystem
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write JSON (sorted keys, NaN/inf allowed as in Python's json) and fsync it. Not atomic by itself:
    use inside a checkpoint's temporary directory, or `ernie_zoo.utils.atomic_write_text`."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The step of a `checkpoint-<step>` directory name, else None."""
    m = CHECKPOINT_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """`checkpoint-<step>` directories of `output_dir`, oldest (lowest step) first; validity not checked."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return [p for _, p in sorted(found)]


def remove_stale_temporaries(output_dir: str | os.PathLike) -> list[Path]:
    """Delete `.checkpoint-<step>.tmp-<pid>` directories left by a process killed while saving."""
    root = Path(output_dir)
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and _TMP_RE.match(p.name):
                logger.info("removing %s: an unfinished checkpoint of an interrupted run", p)
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def save_checkpoint(
    output_dir: str | os.PathLike,
    step: int,
    write: Callable[[Path], None],
    *,
    is_main: bool = True,
    barrier: Callable[[], None] | None = None,
) -> Path:
    """Atomically create `output_dir/checkpoint-<step>`: `write(tmp_dir)` writes the files, then the
    manifest is added, everything fsynced and the directory renamed into place. Returns its path.

    Several ranks (a sharded engine): every rank calls this with the same step; all write into the shared
    temporary directory, and the main rank publishes it once every rank is done -- after `barrier()` if
    given, else after `write` returns (a sharded engine's `save` ends in a barrier, so `write` should call it
    last).
    """
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"checkpoint-{step}"
    tmp = root / f".checkpoint-{step}.tmp"
    shared = barrier is not None or not is_main
    if not shared and tmp.exists():
        shutil.rmtree(tmp)  # single writer: anything there is left from an interrupted attempt
    tmp.mkdir(exist_ok=shared)
    try:
        write(tmp)
        if barrier is not None:
            barrier()
        if not is_main:
            return final
        _publish(root, step, tmp, final)
    except BaseException:
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if barrier is not None:
            barrier()  # nobody races ahead into the next save while the main rank publishes this one
    return final


#: Test hook: SIGKILL every rank in the middle of the asynchronous save of this step (every file written, the
#: checkpoint not yet published), as a node failure during a save would.
KILL_IN_SAVE_ENV = "ERNIE_ZOO_TEST_KILL_IN_SAVE"


def save_checkpoint_async(
    output_dir: str | os.PathLike,
    step: int,
    write: Callable[[Path], Future],
    *,
    executor: Executor,
    is_main: bool = True,
    on_published: Callable[[Path], None] | None = None,
) -> Future:
    """`save_checkpoint` for a save that goes on in the background. `write(tmp_dir)` writes this rank's files into
    the shared temporary directory, or starts writing them, and returns a future that completes once *every*
    rank's files are written (an engine's asynchronous save: `PipelineEngine.save(..., asynchronous=True)`).
    Publishing runs in `executor`: after that future, the main rank adds the manifest, fsyncs, renames
    `.checkpoint-<step>.tmp` to `checkpoint-<step>` and calls `on_published(path)`. Returns a future of the path
    (on every rank: done when this rank's part is).

    Until the rename nothing named `checkpoint-<step>` exists and the temporary directory has no manifest, so a
    process killed at any moment of the save leaves a checkpoint that resume skips (`latest_valid_checkpoint`)
    and the next start removes (`remove_stale_temporaries`)."""
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / f"checkpoint-{step}", root / f".checkpoint-{step}.tmp"
    tmp.mkdir(exist_ok=True)
    written = write(tmp)

    def publish() -> Path:
        try:
            written.result()
            if int(os.environ.get(KILL_IN_SAVE_ENV, "0") or 0) == step:
                os.kill(os.getpid(), signal.SIGKILL)
            if is_main:
                _publish(root, step, tmp, final)
                if on_published is not None:
                    on_published(final)
        except BaseException:
            if is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    return executor.submit(publish)


def _publish(root: Path, step: int, tmp: Path, final: Path) -> None:
    """Manifest, fsync, rename `tmp` to `final` (replacing a copy of the same step), fsync the parent."""
    write_manifest(
        tmp, sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()), step=step
    )
    _fsync_dir(tmp)
    if final.exists():  # a re-run of the same step: replace it (the old copy is removed after the swap)
        old = root / f".checkpoint-{step}.tmp-old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    with contextlib.suppress(OSError, ValueError):
        _check(final, verified=True)  # rotation need not hash again what the manifest was just made from


def verify_checkpoint(path: str | os.PathLike, required: tuple[str, ...] = ()) -> str | None:
    """None if the checkpoint matches its manifest (every file present, same size and sha256), else a
    sentence saying what is wrong. `required`: files that must be listed in the manifest."""
    try:
        verify_manifest(path, required)
    except ManifestError as exc:
        return exc.problem
    return None


def latest_valid_checkpoint(
    output_dir: str | os.PathLike, required: tuple[str, ...] = (), *, start_fresh: str | None = None
) -> Path | None:
    """The newest checkpoint that passes `verify_checkpoint`; damaged ones are skipped with a warning.

    start_fresh: how the user starts afresh in this run (e.g. "set train.overwrite true"). When given and
    `output_dir` holds checkpoints of which none is valid, raise ValueError naming each one and what is wrong
    with it, ending with this hint, instead of returning None: a run asked to resume must not quietly start
    again from step 0 (and then rotate the damaged checkpoints away)."""
    problems = []
    for path in reversed(list_checkpoints(output_dir)):
        problem = verify_checkpoint(path, required)
        if problem is None:
            return path
        logger.warning("skipping %s: %s", path, problem)
        problems.append(f"{path.name}: {problem}")
    if problems and start_fresh is not None:
        raise ValueError(
            f"{output_dir} holds {len(problems)} checkpoint(s) and none is valid ({'; '.join(problems)}); "
            f"refusing to start again from step 0 over them. To start fresh, move them out of the way or "
            f"delete them, or {start_fresh}"
        )
    return None


#: checkpoint -> (its files' (name, size, mtime), the manifest's file names or None if invalid, the problem):
#: rotation runs at every save and re-hashes only what changed since it last looked (a checkpoint can be GBs).
_checked: dict[Path, tuple[tuple[tuple[str, int, int], ...], frozenset[str] | None, str | None]] = {}


def _file_stats(path: Path) -> tuple[tuple[str, int, int], ...]:
    stats = []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        st = file.stat()
        stats.append((file.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(stats)


def _check(path: Path, *, verified: bool = False) -> str | None:
    """`verify_checkpoint(path)`, remembered in `_checked` until a file of the checkpoint changes;
    `verified`: the caller has just computed the manifest from these files."""
    key = path.absolute()
    stats = _file_stats(path)
    known = _checked.get(key)
    if not verified and known is not None and known[0] == stats:
        return known[2]
    problem = None if verified else verify_checkpoint(path)
    names = frozenset(read_manifest(path)) if problem is None else None
    _checked[key] = (stats, names, problem)
    if problem is not None:
        logger.warning("%s is not a valid checkpoint (%s): rotation does not count it", path, problem)
    return problem


def _is_valid(path: Path, required: tuple[str, ...]) -> bool:
    """`verify_checkpoint(path, required) is None`, without re-hashing files unchanged since the last look."""
    try:
        if _check(path) is not None:
            return False
    except (OSError, ValueError):  # vanished or changed while we looked
        return False
    names = _checked[path.absolute()][1] or frozenset()
    return all(name in names for name in required)


def resume_checkpoint(
    directory: str | os.PathLike, mode: str, required: tuple[str, ...], key: str, start_fresh: str
) -> Path | None:
    """The checkpoint a run's resume setting `mode` (recipe key `key`) names: "auto", the newest valid one in
    `directory` (None when it holds none); "latest", the same but one must exist; "never", None; else the path
    of a checkpoint directory, verified. `start_fresh`: as for `latest_valid_checkpoint`."""
    if mode == "never":
        return None
    if mode in ("auto", "latest"):
        found = latest_valid_checkpoint(directory, required, start_fresh=start_fresh)
        if found is None and mode == "latest":
            raise ValueError(f"{key}=latest, but {directory} holds no valid checkpoint")
        return found
    path = Path(mode).expanduser()
    problem = verify_checkpoint(path, required) if path.is_dir() else "not a directory"
    if problem:
        raise ValueError(f"recipe key {key!r} = {mode!r}: cannot resume from it: {problem}")
    return path


def rotate_checkpoints(
    output_dir: str | os.PathLike, keep_last: int, required: tuple[str, ...] = ()
) -> list[Path]:
    """Keep the newest `keep_last` *valid* checkpoints (`verify_checkpoint` with `required`) and delete every
    checkpoint older than the oldest of them; returns the deleted paths.

    Invalid checkpoints are not counted and those newer than a kept one are left alone (a damaged
    checkpoint-500 from an earlier run must not make a new checkpoint-200 the one deleted). With no valid
    checkpoint nothing is deleted, so the newest valid state is never removed."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    found = list_checkpoints(output_dir)
    kept = 0
    for i in range(len(found) - 1, -1, -1):  # newest first; older ones are deleted unverified
        if _is_valid(found[i], required):
            kept += 1
            if kept == keep_last:
                old = found[:i]
                break
    else:
        old = []
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
        _checked.pop(path.absolute(), None)
    return old


# ---------------------------------------------------------------------------------- state without pickle
def save_optimizer_state(
    optimizer: torch.optim.Optimizer, directory: str | os.PathLike, name: str = "optimizer"
) -> None:
    """`optimizer.state_dict()` as `<name>.safetensors` (tensors) + `<name>.json` (everything else)."""
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                if hasattr(
                    value, "to_local"
                ):  # a DTensor (a TP-sharded parameter's moment): this rank's shard
                    value = value.to_local()
                tensors[f"state.{index}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(index), {})[key] = value
    groups = []
    for group in state["param_groups"]:
        clean = {}
        for key, value in group.items():
            if isinstance(value, torch.Tensor):
                value = value.item() if value.numel() == 1 else value.tolist()
            elif isinstance(value, tuple):
                value = {"__tuple__": list(value)}
            clean[key] = value
        groups.append(clean)
    directory = Path(directory)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    write_json(directory / f"{name}.json", {"param_groups": groups, "scalars": scalars})


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, directory: str | os.PathLike, name: str = "optimizer"
) -> None:
    """Inverse of `save_optimizer_state` (tensors move to the parameters' device in `load_state_dict`)."""
    directory = Path(directory)
    meta = read_json(directory / f"{name}.json")
    tensors = load_file(str(directory / f"{name}.safetensors"))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, field = key.split(".", 2)
        state.setdefault(int(index), {})[field] = value
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    groups = []
    for group in meta["param_groups"]:
        groups.append(
            {
                k: tuple(v["__tuple__"]) if isinstance(v, dict) and "__tuple__" in v else v
                for k, v in group.items()
            }
        )
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _jsonable_state(state: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        json.dumps(state)
    except TypeError as e:
        raise TypeError(
            f"{what} state is not JSON-serialisable ({e}); it cannot be checkpointed without pickle"
        ) from None
    return state


def save_json_state(obj: Any, path: str | os.PathLike, what: str) -> None:
    """Save `obj.state_dict()` (an LR scheduler, a GradScaler) as JSON; it must hold plain values."""
    write_json(path, _jsonable_state(obj.state_dict(), what))


def load_json_state(obj: Any, path: str | os.PathLike) -> None:
    obj.load_state_dict(read_json(path))


def load_schedule_state(scheduler: torch.optim.lr_scheduler.LRScheduler, path: str | os.PathLike) -> None:
    """Restore an LR schedule saved by `save_json_state` into an optimizer with any number of param groups (a
    pipeline stage's optimizer, one process's): the step count and the learning rate, which the run's groups
    share, written into each group."""
    saved = read_json(path)
    if len(set(saved["base_lrs"])) > 1:
        raise ValueError(f"{path}: param groups with different learning rates cannot move to another layout")
    groups = scheduler.optimizer.param_groups
    n = len(groups)
    scheduler.load_state_dict(
        {**saved, "base_lrs": saved["base_lrs"][:1] * n, "_last_lr": saved["_last_lr"][:1] * n}
    )
    for group, lr in zip(groups, scheduler.get_last_lr()):
        group["lr"] = lr


def _rng_stem(rank: int) -> str:
    return "rng" if rank == 0 else f"rng-rank{rank:05d}"


def save_rng_state(directory: str | os.PathLike, rank: int = 0) -> None:
    """Python, numpy and torch (CPU + every CUDA device) global RNG states, as `rng.json` + `rng.safetensors`
    (rank 0) or `rng-rank<NNNNN>.*` (other ranks of a multi-process run)."""
    directory = Path(directory)
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    np_json = {
        "bit_generator": np_state["bit_generator"],
        "state": {"key": np.asarray(np_state["state"]["key"]).tolist(), "pos": int(np_state["state"]["pos"])},
        "has_gauss": int(np_state["has_gauss"]),
        "gauss": float(np_state["gauss"]),
    }
    stem = _rng_stem(rank)
    write_json(directory / f"{stem}.json", {"python": [version, list(internal), gauss], "numpy": np_json})
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    save_file(tensors, str(directory / f"{stem}.safetensors"))


def load_rng_state(directory: str | os.PathLike, rank: int = 0) -> None:
    """Restore what `save_rng_state` wrote for `rank` (rank 0's states if the checkpoint has none for it)."""
    directory = Path(directory)
    stem = _rng_stem(rank)
    if rank and not (directory / f"{stem}.json").is_file():
        logger.warning("%s has no RNG state for rank %d; using rank 0's", directory, rank)
        stem = _rng_stem(0)
    meta = read_json(directory / f"{stem}.json")
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    np_json = meta["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_json["bit_generator"],
            "state": {
                "key": np.asarray(np_json["state"]["key"], dtype=np.uint32),
                "pos": np_json["state"]["pos"],
            },
            "has_gauss": np_json["has_gauss"],
            "gauss": np_json["gauss"],
        }
    )
    tensors = load_file(str(directory / f"{stem}.safetensors"))
    torch.set_rng_state(tensors["torch"])
    cuda = sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k.split(".")[1]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda][: torch.cuda.device_count()])


__all__ = [
    "CHECKPOINT_RE",
    "KILL_IN_SAVE_ENV",
    "MANIFEST",
    "checkpoint_step",
    "latest_valid_checkpoint",
    "list_checkpoints",
    "load_json_state",
    "load_optimizer_state",
    "load_rng_state",
    "load_schedule_state",
    "read_json",
    "remove_stale_temporaries",
    "resume_checkpoint",
    "rotate_checkpoints",
    "save_checkpoint",
    "save_checkpoint_async",
    "save_json_state",
    "save_optimizer_state",
    "save_rng_state",
    "verify_checkpoint",
    "write_json",
]

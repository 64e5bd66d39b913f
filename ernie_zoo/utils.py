"""Small shared helpers: atomic writes of files and directories."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces `path` in one rename.

    A crash inside the block leaves `path` untouched (the temporary directory is removed), so readers never see
    a half-written model or checkpoint.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb") as f:
                    os.fsync(f.fileno())
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file via a temporary file and `os.replace`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; published files get the usual permissions
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj, **dump_kwargs) -> None:
    """`json.dump` (UTF-8, indent 2 unless given) to `path` atomically, with a trailing newline."""
    dump_kwargs.setdefault("ensure_ascii", False)
    dump_kwargs.setdefault("indent", 2)
    atomic_write_text(path, json.dumps(obj, **dump_kwargs) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (manifests of checkpoints, corpora and shipped models)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def looks_like_local_path(name: str) -> bool:
    """Whether a model source can only be a local path, never a hub id (`name` or `namespace/name`): it starts
    with `.`, `/` or `~`, holds the OS's own separator, or has more than one `/`. Such a name that is not a
    directory is a missing directory to report as one, not a hub id to try."""
    return name.startswith((".", "/", "~")) or os.sep in name.replace("/", "") or name.count("/") > 1

"""Small shared helpers: atomic writes, checks on loaded weights, the device, console errors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Root of everything ernie-zoo downloads, derives or caches (``ERNIE_ZOO_CACHE``, default ``~/.cache/ernie_zoo``).
#: One place, so that pointing the variable at an empty directory gives a run exactly a new machine's state.
CACHE_ROOT: Path = Path(
    os.environ.get("ERNIE_ZOO_CACHE") or Path.home() / ".cache" / "ernie_zoo"
).expanduser()


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
    if target.exists() and not target.is_dir():  # never a file replaced by a directory
        raise FileExistsError(f"{target} is a file, not a directory")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb") as f:
                    os.fsync(f.fileno())
        if target.exists() and not target.is_dir():  # a file appeared there while writing
            raise FileExistsError(f"{target} is a file, not a directory")
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


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice (json.loads would keep the last value and drop the other)."""

    def __init__(self, key: str):
        super().__init__(f"the key {key!r} appears twice in one JSON object")
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json `object_pairs_hook`: an object with a key given twice raises DuplicateKeyError ("the last one wins"
    would drop a training row's other value without a word)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return record


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (manifests of checkpoints, corpora and shipped models)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


#: The checksums of a directory's files: one format for checkpoints, shipped models and exports,
#: `{"files": {relative_path: {"size": bytes, "sha256": hex}}, ...}` plus whatever the writer adds (a checkpoint
#: adds "step"). Written last, so a directory without one did not finish saving. Older shipped models wrote
#: `{"format": 1, "files": {relative_path: sha256}}` (or only the inner table); those still verify.
MANIFEST = "manifest.json"
# Files a model directory may hold without a checksum (documentation only; never loaded).
_UNCHECKED = frozenset({MANIFEST, "README.md"})


class ManifestError(ValueError):
    """A directory's files do not match its `manifest.json` (or it has none). `problem`: the sentence without the
    directory, for callers that name the directory themselves."""

    def __init__(self, directory: str | os.PathLike, problem: str):
        super().__init__(f"{directory}: {problem}")
        self.problem = problem


def manifest_files(directory: str | os.PathLike) -> list[str]:
    """The files a manifest of `directory` lists: every file below it except hidden ones, README.md and the
    manifest itself (relative POSIX paths, sorted)."""
    directory = Path(directory)
    files = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if path.is_file() and rel not in _UNCHECKED and not any(p.startswith(".") for p in rel.split("/")):
            files.append(rel)
    return files


def write_manifest(directory: str | os.PathLike, files: list[str] | None = None, **extra) -> Path:
    """Write `directory/manifest.json` for `files` (default: `manifest_files(directory)`), atomically; each file
    is fsynced before it is hashed, so the manifest never describes bytes still in the page cache only."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ManifestError(directory, "not a directory")
    table = {}
    for rel in manifest_files(directory) if files is None else files:
        with open(directory / rel, "rb") as f:
            os.fsync(f.fileno())
        table[rel] = {"size": (directory / rel).stat().st_size, "sha256": sha256_file(directory / rel)}
    target = directory / MANIFEST
    atomic_write_json(target, {**extra, "files": table}, indent=1, sort_keys=True)
    return target


def read_manifest(directory: str | os.PathLike) -> dict[str, dict]:
    """The file table of `directory/manifest.json`, `{relative_path: {"sha256": hex, "size": bytes}}` ("size"
    absent for the old sha256-only format), without hashing anything; ManifestError if missing or unreadable."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise ManifestError(directory, f"no {MANIFEST} (the save did not finish)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(directory, f"unreadable {MANIFEST} ({exc})") from exc
    files = data.get("files", data) if isinstance(data, dict) else None
    table = {}
    for rel, entry in (files or {}).items() if isinstance(files, dict) else ():
        if isinstance(entry, str):  # format 1: sha256 only
            entry = {"sha256": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            table = {}
            break
        table[rel] = {**entry, "sha256": entry["sha256"].lower()}
    if not table:
        raise ManifestError(
            directory,
            f"unreadable {MANIFEST}: expected {{'files': {{path: {{'size': n, 'sha256': hex}}}}}}, "
            f"got {str(data)[:120]}",
        )
    return table


def verify_manifest(
    directory: str | os.PathLike, required: tuple[str, ...] = (), *, complete: bool = False
) -> dict[str, str]:
    """Check every file of `directory` against its manifest; return `{relative_path: sha256}`.

    Raises `ManifestError` naming the directory and the file when the manifest is missing or unreadable, a file
    in `required` is not listed, a listed file is missing or differs in size or sha256, or (`complete`: a model
    directory, where every file could be loaded) a file is not listed.
    """
    directory = Path(directory)
    table = read_manifest(directory)
    for name in required:
        if name not in table:
            raise ManifestError(directory, f"{name} is not in the manifest")
    for rel, entry in table.items():
        file = directory / rel
        if not file.is_file():
            raise ManifestError(directory, f"{rel} is missing (listed in {MANIFEST})")
        size = file.stat().st_size
        if "size" in entry and size != entry["size"]:
            raise ManifestError(
                directory,
                f"{rel} has {size} bytes, the manifest says {entry['size']} (truncated or overwritten)",
            )
        actual = sha256_file(file)
        if actual != entry["sha256"]:
            raise ManifestError(
                directory,
                f"checksum mismatch for {rel} (manifest sha256 {entry['sha256'][:12]}..., "
                f"file {actual[:12]}...): the file was modified or corrupted",
            )
    if complete:
        unlisted = sorted(set(manifest_files(directory)) - set(table))
        if unlisted:
            raise ManifestError(directory, f"files not listed in {MANIFEST}: {unlisted}")
    return {rel: entry["sha256"] for rel, entry in table.items()}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listened on a moment ago on `host` (a rendezvous port for local ranks, a test server's)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tied_names(module) -> set[str]:
    """State-dict names of `module` whose tensor is shared with an earlier name (tied weights): what
    `save_pretrained` stores once."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            tied.add(name)
        else:
            seen[id(tensor)] = name
    return tied


def looks_like_local_path(name: str) -> bool:
    """Whether a model source can only be a local path, never a hub id (`name` or `namespace/name`): it starts
    with `.`, `/` or `~`, holds the OS's own separator, or has more than one `/`. Such a name that is not a
    directory is a missing directory to report as one, not a hub id to try."""
    return name.startswith((".", "/", "~")) or os.sep in name.replace("/", "") or name.count("/") > 1


class NonFiniteError(ValueError):
    """A model's weights or outputs hold NaN or infinity."""


def check_finite_weights(module, where: str) -> None:
    """Raise NonFiniteError naming the first floating-point parameter or buffer of `module` that holds NaN or
    infinity (a corrupted file: a few flipped bytes in a float16 tensor read as NaN), with `where` (the
    directory) in the message. Quantised and integer tensors are skipped."""
    import torch

    for name, tensor in module.state_dict().items():
        if (
            isinstance(tensor, torch.Tensor)
            and tensor.is_floating_point()
            and not torch.isfinite(tensor).all()
        ):
            bad = int((~torch.isfinite(tensor)).sum())
            raise NonFiniteError(
                f"{where}: weight {name!r} holds {bad} NaN/infinite value(s) of {tensor.numel()}: the model "
                "file is corrupted (or training diverged); restore or re-download the directory"
            )


def unreadable_weights(where: str, exc: BaseException) -> ValueError:
    """The error for a weights file that cannot be read: a corrupt safetensors file, or pickled weights that
    torch's safe loader refused (ernie-zoo never unpickles arbitrary objects)."""
    if isinstance(exc, pickle.UnpicklingError):
        # Not torch's message: it advises re-running with weights_only=False, i.e. running the file's code.
        return ValueError(
            f"{where}: refused to load pickled weights (pytorch_model.bin holds Python objects besides tensors, "
            "and unpickling them can run any code; ernie-zoo loads safetensors only). Convert the checkpoint to "
            "model.safetensors where running its code is harmless (a throw-away container), and only if you trust "
            "its source: load its state dict there with torch.load and write it with "
            "safetensors.torch.save_file(state_dict, 'model.safetensors'), or load the model there and call "
            "save_pretrained(directory); then delete pytorch_model.bin"
        )
    return ValueError(f"{where}: the weights file is corrupt or truncated ({exc}); restore the directory")


def resolve_device(device: str | int | torch.device | None = None, key: str | None = None) -> torch.device:
    """`device` as a torch.device, for training runs and Taskflow alike: None or "auto" is CUDA when available, else
    the CPU; "cpu", "cuda", "cuda:N", an int (a CUDA index) or a torch.device. A CUDA device without CUDA, or any
    other device, is a ValueError naming the recipe `key` (e.g. "train.device") when given, else `device=`."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(f"device must be a str, int or torch.device, got {type(device).__name__}")
    what = f"recipe key {key!r} = {device!r}" if key else f"device={device!r}"
    try:
        dev = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{what}: not a device ({e})") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}: must be cpu or cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{what}, but CUDA is not available")
    return dev


def run_console(prog: str, main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Run a console script's `main(argv)` so that every failure is one line on stderr and a non-zero exit.

    An exception that escapes `main` is printed as `PROG: error: MESSAGE` (exit 1) instead of a traceback;
    `--debug` anywhere before a `--` (or ERNIE_ZOO_DEBUG=1) lets it propagate with its traceback. Ctrl-C exits
    130 with one line; a closed stdout (`... | head -1`) ends the program quietly, as Unix tools do.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end] or os.environ.get("ERNIE_ZOO_DEBUG", "") not in ("", "0")
    argv = [a for i, a in enumerate(argv) if not (i < end and a == "--debug")]
    try:
        return main(argv)
    except BrokenPipeError:
        # The reader is gone; later writes (and the interpreter's final flush) go nowhere instead of failing.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001  (the point: no traceback for any error unless --debug)
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{prog}: error: {message} (run with --debug for the traceback)", file=sys.stderr)
        return 1

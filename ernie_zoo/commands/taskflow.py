"""`ernie-zoo taskflow TASK ...`: run a Taskflow task on texts given as arguments, in a file, or on stdin.

    ernie-zoo taskflow word_segmentation "银行行长在会上发表了重要讲话"
    ernie-zoo taskflow sentiment_analysis --task-path runs/senta --input reviews.txt --output out.jsonl
    cat prompts.jsonl | ernie-zoo taskflow text_generation --task-path runs/poet --option max_new_tokens=16
    ernie-zoo taskflow text_generation -O stream=true "今天天气很好，"   # printed as it is generated
    ernie-zoo taskflow information_extraction --task-path runs/ie --schema '{"人物": ["毕业院校"]}' 李明毕业于北京大学。
    ernie-zoo taskflow text_similarity 今天天气怎么样 今天的天气如何   # pair tasks: TEXT arguments two by two
    ernie-zoo taskflow ner --usage        # the task's usage example
    ernie-zoo taskflow --list             # tasks, aliases, default models and options

Input: TEXT arguments; or `--input FILE` (`-` = stdin): `.jsonl` files hold one JSON string or object with a
"text" field per line, any other file one text per line (blank lines skipped); with neither, stdin is read
the same way (as plain lines). text_similarity reads pairs: TEXT arguments two by two, a plain line `text1<TAB>text2`,
a JSON line `["text1", "text2"]` or `{"text1": ..., "text2": ...}`. Output: one JSON object per line (the task's result dict), to `--output FILE`
(written to a temporary file and renamed when complete) or stdout. A progress bar goes to stderr.

Corpus-scale jobs: `--input big.jsonl -o out.jsonl --resume` appends to out.jsonl as it goes (memory stays flat:
texts are read and written a block at a time) and adds the input line number to each result ("line"). Started
again after a crash or kill, it keeps the results already in out.jsonl, drops a block or line half written, skips
that many inputs and carries on, so the finished file equals an uninterrupted run's byte for byte. What the results
were made from (the input lines, task, model, options, --digits) is recorded in out.jsonl.meta.json, and a resume
that does not match it is refused with what differs (ernie_zoo/commands/taskflow_resume.py). `--engine ray
--workers N` runs the blocks on N Ray actors, one Taskflow each, in input order (ernie_zoo/taskflow/ray_engine.py).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, TextIO

from ernie_zoo.commands.taskflow_resume import ResumeLog, made_from, sidecar_path
from ernie_zoo.text.extraction import schema_from_json

BLOCK = 16  # texts per Taskflow call = batch_size * BLOCK (keeps memory flat on huge files)
#: Test hook: SIGKILL this process right after a --resume job has written this many blocks (the resume test kills
#: the job at a known point instead of racing it, as ERNIE_ZOO_TEST_KILL_AT_STEP does for training).
KILL_ENV = "ERNIE_ZOO_TEST_KILL_AFTER_BLOCKS"
#: --digits beyond this rounds nothing: a float64 (17 significant digits) in [0, 1] has no 18th decimal to keep.
MAX_DIGITS = 17


@dataclass
class Args:
    """Run a Taskflow task on texts given as arguments, in a file, or on stdin."""

    task: str | None
    """Task name or alias (see --list)."""
    texts: list[str]
    """Texts to process (before or after the options)."""
    input: str | None = None
    """A .txt (one text per line) or .jsonl file; - for stdin (-i)."""
    output: str | None = None
    """Write results as JSON lines here (-o); null: stdout."""
    model: str | None = None
    """Shipped model name, model directory or hub id."""
    task_path: str | None = None
    """Local model directory (save_pretrained / ernie-finetune output)."""
    device: str | None = None
    """cpu, cuda or cuda:N; null: cuda when available."""
    batch_size: int = 32
    """Texts per forward pass."""
    max_seq_len: int = 512
    """Longest token sequence fed to the model; longer texts are split and joined."""
    precision: Literal["fp32", "fp16", "bf16", "int8"] | None = None
    """null: fp32, or on CPU the model's own choice (int8 for ernie-zoo-mini-ner)."""
    backend: Literal["torch", "onnxruntime"] = "torch"
    """torch, or onnxruntime for a --task_path written by `ernie-zoo export --onnx` (docs/onnx.md)."""
    mode: str | None = None
    """For tasks with several shipped models: ner accurate (default) or fast."""
    user_dict: str | None = None
    """Jieba user dictionary file (word_segmentation, pos_tagging)."""
    schema: str | None = None
    """information_extraction: the schema as JSON, e.g. '["人物", "地点"]' or '{"人物": ["毕业院校"]}' (a bare name
    is one type)."""
    option: dict[str, str] = field(default_factory=dict)
    """Task options, each as -O KEY=VALUE (repeatable), e.g. top_k=3 or decode_strategy=sampling; VALUE is parsed
    as JSON when it can be."""
    usage: bool = False
    """Print the task's usage example and exit."""
    list_tasks: bool = False
    """List the tasks and exit (--list)."""
    no_progress: bool = False
    """No progress bar."""
    digits: int | None = None
    """Round scores and other floats to this many decimals (0 to 17; null: as computed)."""
    resume: bool = False
    """With --input FILE and --output FILE: append as results come, each with its input "line" number, and on a
    restart continue after the complete lines already in the output."""
    engine: Literal["local", "ray"] = "local"
    """local: this process; ray: Ray actors, one Taskflow each (--workers), blocks in input order, so --output and
    --resume work the same (needs `pip install ray`; ernie_zoo/taskflow/ray_engine.py)."""
    workers: int = 2
    """--engine ray: Ray actors (model copies)."""
    threads_per_worker: int = 1
    """--engine ray: torch threads per actor."""
    ray_address: str | None = None
    """--engine ray: the address of a running Ray cluster (auto: the one this machine joined); null: start a
    local one for the job."""


ALIASES = {"i": "input", "o": "output", "O": "option", "list": "list_tasks"}


def parse_options(pairs: dict[str, str]) -> dict[str, Any]:
    """{"top_k": "3", "decode_strategy": "sampling"} -> {"top_k": 3, "decode_strategy": "sampling"}."""
    options: dict[str, Any] = {}
    for key, value in pairs.items():
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _decode(raw: bytes, name: str, number: int) -> str:
    """One input line as text; bytes that are not UTF-8 are an error naming the line (never passed through)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{name}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the "
            "line); convert the input to UTF-8"
        ) from None


def _stdin_bytes() -> BinaryIO:
    """stdin as bytes (decoded line by line by `_lines`, so bad bytes are reported with their line)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer
    return io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))  # a text stream set by a caller


def _lines(stream: BinaryIO, jsonl: bool, name: str, pairs: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, text) for each non-blank line; with `pairs` (text_similarity), (line number, [text1, text2]):
    a plain line holds the two texts separated by a tab, a JSON line `["text1", "text2"]` or an object with string
    "text1" and "text2" fields."""
    for number, raw in enumerate(stream, 1):
        line = _decode(raw, name, number).removeprefix("\ufeff" if number == 1 else "").rstrip("\r\n")
        if not line.strip():
            continue
        if not jsonl and pairs:
            pair = line.split("\t")
            if len(pair) != 2:
                raise ValueError(
                    f"{name}:{number}: expected two texts separated by one tab, got {len(pair)} fields"
                )
            yield number, pair
            continue
        if not jsonl:
            yield number, line
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}:{number}: not valid JSON ({exc.msg})") from exc
        if pairs:
            from ernie_zoo.taskflow.text import is_pair

            if isinstance(item, dict):
                item = [item.get("text1"), item.get("text2")]
            if not is_pair(item):
                raise ValueError(
                    f'{name}:{number}: expected a JSON pair ["text1", "text2"] or an object with string '
                    "'text1' and 'text2' fields"
                )
            yield number, list(item)
            continue
        if isinstance(item, dict):
            item = item.get("text")
        if not isinstance(item, str):
            raise ValueError(
                f"{name}:{number}: expected a JSON string or an object with a string 'text' field"
            )
        yield number, item


def _count(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return None


def _check_output(path: str) -> str | None:
    """Why `--output path` cannot be written (checked before any model is loaded), or None."""
    if os.path.isdir(path):
        return f"--output {path!r} is a directory; give a file path"
    directory = os.path.dirname(os.path.abspath(path))
    parent = directory
    while not os.path.exists(parent):  # the nearest existing ancestor decides whether we can create it
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"--output {path!r}: {parent!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--output {path!r}: no permission to write in {parent!r}"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"--output {path!r}: the file is not writable"
    return None


def _jsonable(value: Any, digits: int | None = None) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, digits) for v in value]
    if isinstance(value, float) and digits is not None:
        return round(value, digits)
    return value


def _blocks(texts: Iterator[Any], size: int) -> Iterator[list[Any]]:
    block: list[Any] = []
    for text in texts:
        block.append(text)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def run(args: Args, argv: list[str]) -> int:
    from ernie_zoo.taskflow import get_task, list_tasks, task_usage

    if args.list_tasks:
        for name, info in list_tasks().items():
            aliases = f" (aliases: {', '.join(info['aliases'])})" if info["aliases"] else ""
            uses_model = get_task(name).auto_class is not None
            model = info["default_model"] or ("none shipped (give --task-path)" if uses_model else "no model")
            if info["modes"]:
                model += " (--mode " + ", ".join(f"{m}: {n}" for m, n in info["modes"].items()) + ")"
            print(
                f"{name}{aliases}\n    default model: {model}\n    options: {', '.join(info['options']) or '-'}"
            )
        return 0
    if not args.task:
        print("error: give a TASK (see --list)", file=sys.stderr)
        return 2
    if args.usage:
        print(task_usage(args.task))
        return 0
    # Results are the only thing on stdout: libraries that print while loading (DeepSpeed's accelerator
    # notice, imported by accelerate) are sent to stderr.
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return _run(args, stdout)


def _stream(flow: Any, args: Args, stdout: TextIO) -> int:
    """-O stream=true: each TEXT argument's continuation printed as it is generated, one line per text."""
    if not args.texts or args.output or args.input:
        print("error: -O stream=true prints to the terminal: give TEXT arguments, without --input/--output",
              file=sys.stderr)  # fmt: skip
        return 2
    for text in args.texts:
        try:
            for piece in flow(text):
                stdout.write(piece)
                stdout.flush()
        except (ValueError, TypeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        stdout.write("\n")
        stdout.flush()
    return 0


def _run(args: Args, stdout: TextIO) -> int:
    from tqdm import tqdm

    from ernie_zoo.taskflow import Taskflow

    if args.texts and args.input:
        print("error: give TEXT arguments or --input, not both", file=sys.stderr)
        return 2
    if args.digits is not None and not 0 <= args.digits <= MAX_DIGITS:
        # round(x, -3) would print every score in [0, 1] as 0.0: a silent wrong answer
        print(f"error: --digits must be between 0 and {MAX_DIGITS}, got {args.digits}", file=sys.stderr)
        return 2
    if args.resume and not (args.input and args.input != "-" and args.output):
        print("error: --resume needs --input FILE and --output FILE", file=sys.stderr)
        return 2
    if args.input and args.input != "-" and not os.path.isfile(args.input):
        print(f"error: --input {args.input!r} is not a file", file=sys.stderr)
        return 2
    problem = _check_output(args.output) if args.output else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        options = parse_options(args.option)
        if args.schema is not None:
            if "schema" in options:
                raise ValueError("give the schema once: --schema or -O schema=..., not both")
            options["schema"] = schema_from_json(args.schema)
        flow = Taskflow(
            args.task,
            args.model,
            task_path=args.task_path,
            device=args.device,
            batch_size=args.batch_size,
            max_seq_len=args.max_seq_len,
            precision=args.precision,
            mode=args.mode,
            backend=args.backend,
            user_dict=args.user_dict,
            **options,
        )
    except (ValueError, TypeError, OSError) as exc:
        hint = " (on the command line: --task-path DIR)" if "task_path=" in str(exc) else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2

    if options.get("stream") is True:
        return _stream(flow, args, stdout)
    if args.engine == "ray" and not (args.input and args.input != "-"):
        print("error: --engine ray reads --input FILE", file=sys.stderr)
        return 2

    total: int | None
    source: BinaryIO | None = None
    pairs = flow._task.takes_pairs  # text_similarity: TEXT arguments two by two, a pair per line
    if args.texts and pairs and len(args.texts) % 2:
        print(f"error: {flow.task} compares pairs: give an even number of TEXT arguments", file=sys.stderr)
        return 2
    if args.texts:
        items = [list(p) for p in zip(args.texts[::2], args.texts[1::2])] if pairs else args.texts
        texts: Iterator[tuple[int, Any]] = enumerate(items, 1)
        total = len(items)
    elif args.input and args.input != "-":
        source = open(args.input, "rb")
        texts = _lines(source, args.input.endswith(".jsonl"), args.input, pairs)
        total = _count(args.input)
    else:
        if args.input is None and sys.stdin.isatty():
            print("error: give TEXT arguments, --input FILE, or pipe text to stdin", file=sys.stderr)
            return 2
        texts = _lines(_stdin_bytes(), False, "<stdin>", pairs)
        total = None

    out: Any
    tmp = None
    log = None
    if args.resume:
        made = made_from(
            flow, mode=args.mode, max_seq_len=args.max_seq_len, user_dict=args.user_dict, digits=args.digits
        )
        log = ResumeLog(args.output, made)
        try:
            out = log.start(texts, args.input)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if source is not None:
                source.close()
            return 2
    elif args.output:
        directory = os.path.dirname(os.path.abspath(args.output))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".taskflow-", suffix=".jsonl.tmp")
        out = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
    else:
        out = stdout
    pool = None
    try:
        blocks = _blocks(texts, args.batch_size * BLOCK)
        if args.engine == "ray":
            from ernie_zoo.taskflow.ray_engine import RayTaskflowPool

            kwargs = dict(
                model=args.model, task_path=args.task_path, device=args.device, batch_size=args.batch_size,
                max_seq_len=args.max_seq_len, precision=args.precision, mode=args.mode, backend=args.backend,
                user_dict=args.user_dict, **options,
            )  # fmt: skip
            pool = RayTaskflowPool(
                flow.task,
                kwargs,
                workers=args.workers,
                threads_per_worker=args.threads_per_worker,
                address=args.ray_address,
            )
            held: collections.deque = collections.deque()

            def texts_of(blocks):
                for block in blocks:
                    held.append(block)
                    yield [text for _, text in block]

            results = ((held.popleft(), r) for r in pool.map(texts_of(blocks)))
        else:
            results = ((block, flow([text for _, text in block])) for block in blocks)
        bar = tqdm(
            total=total,
            initial=log.results if log else 0,
            unit="text",
            disable=args.no_progress,
            file=sys.stderr,
            desc=flow.task,
        )
        kill_after = int(os.environ.get(KILL_ENV, "0") or 0)
        with bar:
            for written, (block, block_results) in enumerate(results, 1):
                lines = []
                for (number, _), result in zip(block, block_results, strict=True):
                    row = _jsonable(result, args.digits)
                    if log is not None:
                        row["line"] = number
                    lines.append(json.dumps(row, ensure_ascii=False) + "\n")
                if log is None:
                    out.write("".join(lines))
                else:  # a killed job loses at most the block in flight
                    log.commit(out, block, "".join(lines).encode("utf-8", "backslashreplace"))
                    if written == kill_after:
                        import signal

                        os.kill(os.getpid(), signal.SIGKILL)
                bar.update(len(block))
        if tmp is not None:
            out.close()
            os.replace(tmp, args.output)
            tmp = None
            with contextlib.suppress(FileNotFoundError):  # a --resume record of an earlier file is stale now
                os.unlink(sidecar_path(args.output))
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if pool is not None:
            pool.close()
        if source is not None:
            source.close()
        if log is not None:
            out.close()
        if tmp is not None:
            out.close()
            os.unlink(tmp)
    return 0

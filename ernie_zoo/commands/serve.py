"""`ernie-zoo serve --task TASK [--task TASK ...]`: serve Taskflow tasks over HTTP with dynamic batching.

    ernie-zoo serve --task sentiment_analysis --task ner
    ernie-zoo serve --task ner --task_path ner=runs/ner --port 9000 --precision int8
    ernie-zoo serve --task sentiment_analysis --host 0.0.0.0 --api-key "$KEY" --workers 2

    curl -s localhost:8000/v1/sentiment_analysis -H 'Content-Type: application/json' \\
         -d '{"texts": ["这家餐厅的服务非常棒！"], "options": {"return_all_scores": true}}'

Endpoints: POST /v1/{task}, GET /v1/tasks, /health, /ready, /metrics (Prometheus), /docs (OpenAPI).
Binds to 127.0.0.1 unless --host says otherwise. The API key can also come from $ERNIE_ZOO_API_KEY (it then
does not show in the process list). SIGTERM finishes the requests in flight and refuses new ones.
See docs/serving.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ernie_zoo.serving.config import ServeConfig

API_KEY_ENV = "ERNIE_ZOO_API_KEY"


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        task, sep, path = value.partition("=")
        if not sep or not task or not path:
            raise ValueError(f"{flag} expects TASK=VALUE, got {value!r}")
        out[task] = path
    return out


def _missing_extra(exc: ImportError) -> int:
    print(f"error: {exc}; install the server with: pip install 'ernie-zoo[serve]'", file=sys.stderr)
    return 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    try:
        from ernie_zoo.serving.config import ServeConfig
    except ImportError as exc:  # the package imports FastAPI, an optional dependency
        sys.exit(_missing_extra(exc))

    parser.description = __doc__.splitlines()[0]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "\n".join(__doc__.splitlines()[1:])
    defaults = ServeConfig.__dataclass_fields__
    add = parser.add_argument
    add("--task", action="append", default=[], required=True, help="a task to serve (repeatable)")
    add("--task_path", "--task-path", action="append", default=[], metavar="TASK=DIR", help="local model dir")
    add("--model", action="append", default=[], metavar="TASK=NAME", help="shipped model name or hub id")
    add("--host", default=defaults["host"].default, help="address to bind (default: loopback only)")
    add("--port", type=int, default=defaults["port"].default)
    add("--workers", type=int, default=1, help="worker processes, each with its own models (default: 1)")
    add("--device", help="cpu, cuda or cuda:N (default: cuda when available)")
    add(
        "--precision",
        choices=["fp32", "fp16", "bf16", "int8"],
        help="default: fp32, or on CPU the model's own choice (int8 for ernie-zoo-mini-ner)",
    )
    add("--max-seq-len", "--max_seq_len", type=int, default=defaults["max_seq_len"].default)
    add(
        "--max-batch-size",
        "--max_batch_size",
        type=int,
        default=defaults["max_batch_size"].default,
        help="texts merged into one Taskflow call",
    )
    add(
        "--batch-size",
        "--batch_size",
        type=int,
        default=defaults["batch_size"].default,
        help="texts per forward pass (default: 2 on CPU, 32 on GPU)",
    )
    add("--max-wait-ms", "--max_wait_ms", type=float, default=defaults["max_wait_ms"].default)
    add("--max-queue", "--max_queue", type=int, default=defaults["max_queue"].default, help="texts per task")
    add("--max-texts", "--max_texts", type=int, default=defaults["max_texts_per_request"].default)
    add("--max-chars-per-text", type=int, default=defaults["max_chars_per_text"].default)
    add("--max-chars-per-request", type=int, default=defaults["max_chars_per_request"].default)
    add("--timeout", type=float, default=defaults["request_timeout_s"].default, help="seconds per request")
    add("--api-key", "--api_key", default=None, help=f"require this key (or set ${API_KEY_ENV})")
    add("--threads", type=int, default=None, help="torch threads per worker (default: one per core)")
    add("--access-log", action="store_true", help="log every request")
    add("--graceful-timeout", type=float, default=defaults["graceful_timeout_s"].default)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The ServeConfig for parsed arguments (ValueError on bad combinations)."""
    from ernie_zoo.serving.config import ServeConfig

    return ServeConfig(
        tasks=args.task,
        task_paths=_pairs(args.task_path, "--task_path"),
        models=_pairs(args.model, "--model"),
        host=args.host,
        port=args.port,
        workers=args.workers,
        device=args.device,
        precision=args.precision,
        max_seq_len=args.max_seq_len,
        max_batch_size=args.max_batch_size,
        batch_size=args.batch_size,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_texts_per_request=args.max_texts,
        max_chars_per_text=args.max_chars_per_text,
        max_chars_per_request=args.max_chars_per_request,
        request_timeout_s=args.timeout,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        torch_threads=args.threads,
        access_log=args.access_log,
        graceful_timeout_s=args.graceful_timeout,
    )


def check_models(config: ServeConfig) -> None:
    """Fail before binding a port when a model directory or name cannot be found (loading itself happens in the
    background once the server runs, reported by /ready)."""
    from ernie_zoo.taskflow import get_task
    from ernie_zoo.taskflow.models import resolve_model

    for name in config.tasks:
        cls = get_task(name)
        if cls.auto_class is None:
            if name in config.task_paths or name in config.models:
                raise ValueError(f"task {name!r} uses no model: drop its --task_path / --model")
            continue
        resolve_model(name, config.models.get(name), config.task_paths.get(name), cls.default_model)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from ernie_zoo.serving import serve
    except ImportError as exc:
        return _missing_extra(exc)

    try:
        config = config_from_args(args)
        check_models(config)
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = dataclasses.replace(config, api_key="***" if config.api_key else None)
    logging.getLogger(__name__).info("serving %s", shown)
    return serve(config)

"""`ernie-zoo serve --task TASK [--task TASK ...]`: serve Taskflow tasks over HTTP with dynamic batching.

    ernie-zoo serve --task sentiment_analysis --task ner
    ernie-zoo serve --task ner --task_path ner=runs/ner --port 9000 --precision int8
    ernie-zoo serve --task sentiment_analysis --host 0.0.0.0 --api-key "$KEY" --workers 2

    curl -s localhost:8000/v1/sentiment_analysis -H 'Content-Type: application/json' \\
         -d '{"texts": ["这家餐厅的服务非常棒！"], "options": {"return_all_scores": true}}'

    ernie-zoo serve --task text_generation --task feature_extraction --continuous_batching true

Endpoints: POST /v1/{task}, GET /v1/tasks, /health, /ready, /metrics (Prometheus), /docs (OpenAPI); with
text_generation / feature_extraction served, the OpenAI-compatible /v1/chat/completions, /v1/completions,
/v1/embeddings and /v1/models.
Binds to 127.0.0.1 unless --host says otherwise. The API key can also come from $ERNIE_ZOO_API_KEY (it then
does not show in the process list). SIGTERM finishes the requests in flight and refuses new ones.
See docs/serving.md.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

try:  # the serving package imports FastAPI, an optional dependency
    from ernie_zoo.serving.config import ServeConfig as Args
except ImportError as exc:
    raise ImportError(f"{exc}; install the server with: pip install 'ernie-zoo[serve]'") from exc

API_KEY_ENV = "ERNIE_ZOO_API_KEY"
# The flags the command had before it was typed, as ServeConfig's fields (`--task_path TASK=DIR` fills a dict).
ALIASES = {
    "task": "tasks",
    "task_path": "task_paths",
    "model": "models",
    "max_texts": "max_texts_per_request",
    "timeout": "request_timeout_s",
    "threads": "torch_threads",
    "graceful_timeout": "graceful_timeout_s",
}


def check_models(config: Args) -> None:
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


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from ernie_zoo.serving import serve

    try:
        config = dataclasses.replace(args, api_key=args.api_key or os.environ.get(API_KEY_ENV) or None)
        check_models(config)
    except (ValueError, TypeError, OSError) as exc:
        print(f"ernie-zoo serve: error: {exc}", file=sys.stderr)
        return 2
    shown = dataclasses.replace(config, api_key="***" if config.api_key else None)
    logging.getLogger(__name__).info("serving %s", shown)
    return serve(config)

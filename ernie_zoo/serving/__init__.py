"""Serving: Taskflow tasks over HTTP (`ernie-zoo serve`), with dynamic batching, limits and metrics.

    ernie-zoo serve --task sentiment_analysis --task ner --port 8000
    curl -s localhost:8000/v1/sentiment_analysis -d '{"texts": ["这家餐厅的服务非常棒！"]}'
    {"task":"sentiment_analysis","results":[{"text":"这家餐厅的服务非常棒！","label":"positive","score":0.96...}]}

OpenAI-compatible endpoints (`openai_api.py`: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models)
serve text_generation and feature_extraction to any OpenAI client; `--continuous_batching true` runs greedy
generation on transformers' continuous-batching manager (`engines.py`).

In Python: `create_app(ServeConfig(tasks=[...]))` is a FastAPI app (run it under any ASGI server);
`serve(config)` runs it under uvicorn. See docs/serving.md.
"""

from .app import ApiError, PredictRequest, PredictResponse, create_app
from .batching import Batcher, BatchStats, QueueFull, ShuttingDown
from .config import ServeConfig
from .server import serve

__all__ = [
    "ApiError",
    "BatchStats",
    "Batcher",
    "PredictRequest",
    "PredictResponse",
    "QueueFull",
    "ServeConfig",
    "ShuttingDown",
    "create_app",
    "serve",
]

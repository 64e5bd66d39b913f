# syntax=docker/dockerfile:1
# `ernie-zoo serve` on CPU: python-slim, the CPU build of torch 2.13.0, the shipped models inside the image.
#
#   docker build --build-arg TORCH_INDEX_URL=<PyTorch's CPU wheel index> -t ernie-zoo-serve .
#   docker run --rm -p 8000:8000 -e ERNIE_ZOO_API_KEY=change-me ernie-zoo-serve --task sentiment_analysis --task ner
#
# TORCH_INDEX_URL is required: the default index resolves torch==2.13.0 on Linux to a multi-GB CUDA build
# (see docs/serving.md, "Docker"). Arguments after the image name go to `ernie-zoo serve`; the server binds
# 0.0.0.0:8000 inside the container (the port is only reachable where you publish it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    DS_BUILD_OPS=0

# torch first, in its own layer: it is the largest and changes least.
ARG TORCH_INDEX_URL
RUN test -n "$TORCH_INDEX_URL" \
        || { echo "pass --build-arg TORCH_INDEX_URL=<PyTorch CPU wheel index> (see docs/serving.md)" >&2; exit 1; } \
    && pip install --index-url "$TORCH_INDEX_URL" "torch==2.13.0" \
    && python -c "import torch; assert not torch.version.cuda, torch.version.cuda"

WORKDIR /src
COPY pyproject.toml README.md ./
COPY ernie_zoo ./ernie_zoo
# The same package and server as `pip install -e ".[serve]"` in a checkout; torch is already satisfied.
RUN pip install ".[serve]" \
    && python -c "import torch; assert not torch.version.cuda, 'the CPU torch was replaced'" \
    && rm -rf /src

RUN useradd --create-home --uid 10001 serve
USER serve
WORKDIR /home/serve
EXPOSE 8000

# Liveness (the process answers; 503 only when a model failed to load). Readiness is GET /ready.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=3).status != 200)"

# Exec form: the server is PID 1 and receives `docker stop`'s SIGTERM itself (in-flight requests finish;
# give it time with `docker stop -t 60` or the orchestrator's grace period).
ENTRYPOINT ["ernie-zoo", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--task", "sentiment_analysis"]

"""Run the app under uvicorn: one process, or `workers` processes behind uvicorn's supervisor.

Graceful shutdown (SIGTERM or Ctrl-C): uvicorn closes the listening socket (new connections are refused) and
idle keep-alive connections, waits up to `graceful_timeout_s` for the requests in flight, then runs the app's
shutdown. `_Server.handle_exit` additionally marks the app as draining first, so that a request arriving on an
already open connection gets 503 (Connection: close) and /ready says no. With workers, the supervisor passes
SIGTERM to each worker and restarts a worker that dies.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI

from .app import begin_draining, create_app
from .config import ServeConfig
from .protocol import ServeProtocol

CONFIG_ENV = "ERNIE_ZOO_SERVE_CONFIG"  # how worker processes receive the config (they start from scratch)
logger = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    def handle_exit(self, sig: int, frame: Any) -> None:
        begin_draining()
        super().handle_exit(sig, frame)


def app_from_env() -> FastAPI:
    """App factory for worker processes: the config comes from $ERNIE_ZOO_SERVE_CONFIG (JSON).

    Workers run uvicorn's own Server, whose signal handlers are installed before the app is created (here):
    chain `begin_draining` in front of them, as `_Server.handle_exit` does in a single process."""
    _tune_process()
    if not logging.getLogger().handlers:  # a spawned worker starts without the parent's logging setup
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = ServeConfig.from_json(os.environ[CONFIG_ENV])
    ServeProtocol.use_config(config)
    app = create_app(config)
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)
        if callable(previous):

            def handler(signum: int, frame: Any, previous: Callable = previous) -> None:
                begin_draining()
                previous(signum, frame)

            signal.signal(sig, handler)
    return app


def uvicorn_config(config: ServeConfig, app: Any) -> uvicorn.Config:
    ServeProtocol.use_config(config)
    return uvicorn.Config(
        app,
        # uvicorn's httptools protocol plus connection cap, header/body timeouts, JSON errors, graceful close
        http=ServeProtocol,
        host=config.host,
        port=config.port,
        workers=config.workers,
        factory=isinstance(app, str),
        access_log=config.access_log,
        timeout_graceful_shutdown=int(config.graceful_timeout_s),
        log_level="info",
        # Keep-alive connections idle for longer than this are closed; clients reconnect transparently.
        timeout_keep_alive=15,
        # The supervisor kills a worker that does not answer its ping in time; importing torch can hold the GIL
        # for seconds on a busy machine, so the default (5 s) would kill healthy workers while they start.
        timeout_worker_healthcheck=60,
    )


# The event loop (HTTP parsing, routing, answering) and the inference thread share the GIL. With CPython's
# default switch interval (5 ms) the loop thread, woken by a new request while a batch runs, waits up to 5 ms for
# the GIL at every step, so requests trickle in and batches stay small; 0.5 ms lets it keep up.
SWITCH_INTERVAL_S = 0.0005


def _tune_process() -> None:
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def serve(config: ServeConfig) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    _tune_process()
    if config.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning(
            "binding to %s: the server is reachable from other machines%s",
            config.host,
            "" if config.api_key else " without an API key (--api-key)",
        )
    if config.workers == 1:
        server = _Server(uvicorn_config(config, create_app(config)))
        server.run()
        return 0 if server.started else 1
    # Workers import the app by name and read the config from the environment (spawned processes).
    os.environ[CONFIG_ENV] = config.to_json()
    uv_config = uvicorn_config(config, "ernie_zoo.serving.server:app_from_env")
    sock = uv_config.bind_socket()
    try:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(uv_config, sockets=[sock]).run()
    finally:
        sock.close()
    return 0


__all__ = ["CONFIG_ENV", "app_from_env", "serve", "uvicorn_config"]

"""Prometheus metrics of one server process (`GET /metrics`, text exposition format).

Each app gets its own registry, so several apps in one process (tests) do not share counters. With
`--workers N` every worker process has its own registry and a scrape reaches one of them: run one worker per
container and scale with replicas (docs/serving.md), or scrape each pod.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .batching import BatchStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """The server's counters, histograms and gauges (names prefixed `ernie_zoo_`)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "ernie_zoo_requests",
            "HTTP requests to task endpoints by status code",
            ["task", "status"],
            registry=r,
        )
        self.texts = Counter("ernie_zoo_texts", "texts answered", ["task"], registry=r)
        self.latency = Histogram(
            "ernie_zoo_request_latency_seconds",
            "time from request received to response ready (task endpoints)",
            ["task"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ernie_zoo_batch_size", "texts per model batch", ["task"], buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_requests = Histogram(
            "ernie_zoo_batch_requests",
            "requests merged into one model batch",
            ["task"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_seconds = Histogram(
            "ernie_zoo_batch_seconds", "model time per batch", ["task"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_failures = Counter(
            "ernie_zoo_batch_failures", "model batches that raised", ["task"], registry=r
        )
        self.queue_depth = Gauge(
            "ernie_zoo_queue_depth", "texts waiting for a model batch", ["task"], registry=r
        )
        self.in_flight = Gauge("ernie_zoo_requests_in_flight", "task requests being answered", registry=r)
        self.ready = Gauge(
            "ernie_zoo_ready", "1 when the models are loaded and the server takes requests", registry=r
        )

    def observe_batch(self, task: str, stats: BatchStats) -> None:
        self.batch_size.labels(task).observe(stats.texts)
        self.batch_requests.labels(task).observe(stats.requests)
        self.batch_seconds.labels(task).observe(stats.seconds)
        if stats.failed:
            self.batch_failures.labels(task).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["Metrics"]

"""Prometheus metrics of every taskenv process, in multiprocess mode.

Why multiprocess mode rather than a port per process: the stages run in Celery's
prefork children, which come and go (``max-tasks-per-child``, a child killed by a
time limit) and cannot each open a port a scraper would know of, and the API
answers from several threads.  With ``PROMETHEUS_MULTIPROC_DIR`` set, every
process writes its samples to files in that directory and one scrape reads them
all, summed: the API's ``/metrics`` shows every process that shares its directory
(all of ``make run``'s), and a worker or reconciler in its own container serves its
own directory on ``TASKENV_METRICS_PORT``.  Without the variable (unit tests) each
process keeps its samples in memory.  Only counters and histograms are kept, so a
child that exits leaves correct totals behind; queue depths are read from Redis
when scraped.

Labels are bounded: a route is the Flask endpoint, never the path; a stage, state,
launcher, reason, action or queue comes from a fixed set in the code; a project is
named only if the project store knows it, else ``other`` (a task in no project too).
A task id or a variable name is never a label.  Project names are tenants' names: a
scrape without an admin's token (and every worker's or reconciler's own port, which
has no tokens) gets the samples summed over ``project`` (``project=""``,
:class:`WithoutTenants`), never a project's name.

The counters the operations guide alerts on (launch errors, the reconciler's passes
and actions, consumer restarts) exist at 0 from a process's start, each label set the
guide names (:func:`start_at_zero`): an alert on ``rate()`` or ``increase()`` needs a
series before its first event, or the first event is never seen as an increase.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator

import redis
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.errors import LaunchFailed, SecretsUnavailable, TaskenvError, TransientError
from shared.keys import Keys

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_ENV):  # samples go to files there; it must exist first
    os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)

# Seconds: an API call is milliseconds; a launch may wait for a backend; a queue may back up.
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

HTTP_REQUESTS = Counter("taskenv_http_requests", "API requests answered, by Flask endpoint.",
                        ["route", "method", "status"])
HTTP_DURATION = Histogram("taskenv_http_request_duration_seconds",
                          "Time the API took to answer, by Flask endpoint.",
                          ["route", "method"], buckets=FAST_BUCKETS)
TRANSITIONS = Counter("taskenv_task_transitions", "Task revisions entering each state.",
                      ["state", "project"])
STAGE_DURATION = Histogram("taskenv_stage_duration_seconds",
                           "Time a stage worker spent on one message.", ["stage"],
                           buckets=SLOW_BUCKETS)
QUEUE_WAIT = Histogram("taskenv_stage_queue_wait_seconds",
                       "Time a message waited in its stage's queue before a worker took it.",
                       ["stage"], buckets=SLOW_BUCKETS)
LAUNCH_ERRORS = Counter("taskenv_launch_errors", "Launches a backend refused or failed.",
                        ["launcher", "reason"])
RECONCILER_ACTIONS = Counter("taskenv_reconciler_actions",
                             "What the reconciler did to tasks (requeued, lost, ...).",
                             ["action"])
RECONCILER_PASSES = Counter("taskenv_reconciler_passes", "Reconciler passes, by result.",
                            ["result"])
CONSUMER_RESTARTS = Counter("taskenv_consumer_restarts",
                            "Workers that shut down because their consumer stalled.",
                            ["queue"])

# The label values the operations guide names for the counters it alerts on (README,
# "Operations"): each series exists at 0 from the start (start_at_zero).
LAUNCH_ERROR_REASONS = (LaunchFailed.code, TransientError.code, SecretsUnavailable.code,
                        "redis", "unexpected")
RECONCILER_ACTION_NAMES = ("requeued", "relaunched", "lost", "never_started", "finished",
                           "expired")
RECONCILER_RESULTS = ("ok", "failed")
NO_PROJECT = "other"  # the label of a task in no project, and of a project not known

PROJECT_CACHE_SECONDS = 60.0
PROJECT_CACHE_SIZE = 1000
_projects_known: dict[str, tuple[bool, float]] = {}


def multiprocess_mode() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def project_label(project: str | None, exists: Callable[[str], bool]) -> str:
    """The project as a label: itself if the store knows it (asked once a minute), else
    ``other``, as for a task in no project."""
    if not project:
        return NO_PROJECT
    now = time.monotonic()
    known = _projects_known.get(project)
    if known is None or known[1] < now:
        if len(_projects_known) >= PROJECT_CACHE_SIZE:
            _projects_known.clear()
        known = (exists(project), now + PROJECT_CACHE_SECONDS)
        _projects_known[project] = known
    return project if known[0] else NO_PROJECT


def start_at_zero(launcher: str, queues: Iterable[str]) -> None:
    """Every series the operations guide alerts on, at 0 until its first event (in
    multiprocess mode, written to this process's file, so the API's scrape lists them)."""
    for reason in LAUNCH_ERROR_REASONS:
        LAUNCH_ERRORS.labels(launcher=launcher, reason=reason)
    for action in RECONCILER_ACTION_NAMES:
        RECONCILER_ACTIONS.labels(action=action)
    for result in RECONCILER_RESULTS:
        RECONCILER_PASSES.labels(result=result)
    for queue in queues:
        CONSUMER_RESTARTS.labels(queue=queue)


def error_reason(exc: BaseException) -> str:
    """A bounded name for why a launch failed: a domain error's code, or its kind."""
    if isinstance(exc, TaskenvError):
        return exc.code
    if isinstance(exc, redis.RedisError):
        return "redis"
    return "unexpected"


def launch_failed(launcher: str, exc: BaseException) -> None:
    """Count a launch that failed, whether the backend or taskenv's own step before it
    (reading the revision, opening its secrets) failed it."""
    LAUNCH_ERRORS.labels(launcher=launcher, reason=error_reason(exc)).inc()


def task_entered(state: str, project: str | None, exists: Callable[[str], bool]) -> None:
    """Count a revision entering ``state``; never fails the write it follows."""
    try:
        TRANSITIONS.labels(state=state, project=project_label(project, exists)).inc()
    except Exception:  # a metric must not undo a committed transition
        log.debug("could not count a transition to %s", state, exc_info=True)


class QueueDepth(Collector):
    """``taskenv_queue_depth{queue}``: each queue's waiting messages, read when scraped."""

    def __init__(self, client: redis.Redis, keys: Keys, queues: Iterable[str]) -> None:
        self.client, self.keys, self.queues = client, keys, tuple(queues)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("taskenv_queue_depth",
                                   "Messages waiting in each stage's queue.", labels=["queue"])
        try:
            pipe = self.client.pipeline(transaction=False)
            for queue in self.queues:
                pipe.llen(self.keys.queue(queue))
            depths = pipe.execute()
        except redis.RedisError:  # the scrape still shows the processes' own metrics
            log.warning("queue depths unavailable: Redis did not answer")
            return
        for queue, depth in zip(self.queues, depths, strict=True):
            family.add_metric([queue], float(depth))
        yield family


# Labels that name a tenant: shown only to a scrape an admin's token makes.
TENANT_LABELS = frozenset({"project"})


class WithoutTenants(Collector):
    """Another collector's samples with the tenant labels emptied (``project=""``, so
    the series keep their shape) and the samples that then share their labels summed:
    totals by state stay right, no project is named."""

    def __init__(self, source: Collector) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            if not any(TENANT_LABELS & set(s.labels) for s in family.samples):
                yield family
                continue
            summed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                labels = tuple(sorted((k, "" if k in TENANT_LABELS else v)
                                      for k, v in sample.labels.items()))
                key = (sample.name, labels)
                summed[key] = summed.get(key, 0.0) + sample.value
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), total in summed.items():
                out.add_sample(name, dict(labels), total)
            yield out


def _gathered(*extra: Collector) -> CollectorRegistry:
    """Every process's samples (or this one's), then ``extra``, in one registry."""
    registry = CollectorRegistry()
    if multiprocess_mode():
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Everything(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Everything(Collector):
    """A registry as one collector (prometheus-client registers collectors, not registries)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        return iter(self.registry.collect())


def exposition(*extra: Collector, tenants: bool = False) -> bytes:
    """The text a scrape gets: every process's samples (or this one's), then ``extra``;
    project names only with ``tenants`` (an admin's scrape)."""
    registry = _gathered(*extra)
    if tenants:
        return generate_latest(registry)
    shown = CollectorRegistry()
    shown.register(WithoutTenants(_Everything(registry)))
    return generate_latest(shown)


def serve(port: int, host: str) -> None:
    """Serve this process's directory of samples on ``host:port`` (a worker, the reconciler):
    without tokens there, so without tenant names."""
    registry = CollectorRegistry()
    registry.register(WithoutTenants(_Everything(_gathered())))
    start_http_server(port, addr=host, registry=registry)
    log.info("metrics on :%d/metrics", port)

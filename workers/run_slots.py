"""Give a local host's free run slots to the revisions waiting for one, oldest first.

Called by a runner when its revision ends (its own slot, just given back) and by the
reconciler on every pass (the slots of runners that died, once their leases lapse).
Not a stage: it moves waiting revisions back to ``resolved`` and sends each its launch
message, as the reconciler does for a launch that never started.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shared.store.slots import HostSlots
from shared.store.tasks import TaskStore
from shared.task import states
from workers.outcomes import move

Send = Callable[[str, str, int], None]  # stage, task id, revision


def admit_waiting(tasks: TaskStore, slots: HostSlots, send: Send, reserve_seconds: float,
                  now: float | None = None) -> int:
    """Launch the oldest waiting revisions into the slots that are free; how many.

    Costs what it admits, never what waits.  A revision cancelled while it waited hands
    its slot straight on.
    """
    def back_to_resolved(task_id: str, revision: int) -> bool:
        return move(tasks, task_id, revision, states.QUEUED, states.RESOLVED)

    admitted = slots.promote(time.time() if now is None else now, back_to_resolved,
                             reserve_seconds)
    for task_id, revision in admitted:
        send("launch", task_id, revision)
    return len(admitted)

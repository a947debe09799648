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


def rescue_stranded(tasks: TaskStore, slots: HostSlots, send: Send, older_than: float,
                    now: float | None = None) -> int:
    """Launch again the ``queued`` revisions that neither wait nor hold a slot; how many.

    A revision is recorded as ``queued`` before it joins the host's queue, and a promoted
    one holds its slot before it moves back to ``resolved``: a worker or Redis lost
    between the two writes strands it, with nothing left that would ever move it.  Such a
    revision goes back to ``resolved`` and gets its launch message, which takes a slot
    (or the one it holds) or joins the queue again.  Called by the reconciler's full
    sweeps: one look per waiting revision, like the sweep of running ones; ``older_than``
    spares a revision whose worker is between the two writes right now, and a revision
    waiting for another host's slots is that host's to judge.
    """
    now = time.time() if now is None else now
    rescued = 0
    for task_id in tasks.iter_ids_in_state(states.QUEUED):
        seen = tasks.waiting(task_id)
        if (seen is None or seen[1] != states.QUEUED or now - seen[2] < older_than
                or seen[3] not in (None, slots.host)):
            continue
        revision = seen[0]
        if not slots.holds_or_waits(task_id, revision, now) and move(
                tasks, task_id, revision, states.QUEUED, states.RESOLVED):
            send("launch", task_id, revision)
            rescued += 1
    return rescued

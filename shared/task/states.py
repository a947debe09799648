"""The life of one task revision, as a small state machine.

pending -> validated -> resolved -> launching -> running -> succeeded | failed
pending -> rejected (validation);  validated -> rejected (policy)
launching -> queued -> resolved (a local host's run slots were all taken: the revision
waits its turn in the host's queue, then is launched again)
any state not final -> cancelled (a user stopped it; who and when are recorded)
Any state may move to ``pending`` again when the user changes the env: that is
a new revision, and messages that carry the old revision become no-ops.
"""

from __future__ import annotations

PENDING = "pending"
VALIDATED = "validated"
RESOLVED = "resolved"
LAUNCHING = "launching"
QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
REJECTED = "rejected"
CANCELLED = "cancelled"

ALL = (PENDING, VALIDATED, RESOLVED, LAUNCHING, QUEUED, RUNNING, SUCCEEDED, FAILED,
       REJECTED, CANCELLED)
FINAL = frozenset({SUCCEEDED, FAILED, REJECTED, CANCELLED})
# States a workload of the revision may exist in, so a cancel must ask the backend to stop it.
LAUNCHED = frozenset({LAUNCHING, RUNNING})
# States a cancel can still stop.
ACTIVE = frozenset(set(ALL) - FINAL)
# States whose work is still in a queue or a worker's hands.
IN_FLIGHT = frozenset({PENDING, VALIDATED, RESOLVED, LAUNCHING})

ALLOWED = {
    PENDING: {VALIDATED, REJECTED, FAILED, CANCELLED},
    VALIDATED: {RESOLVED, REJECTED, FAILED, CANCELLED},
    RESOLVED: {LAUNCHING, FAILED, CANCELLED},
    # Back to resolved only when the reconciler finds nothing started: launch again.
    LAUNCHING: {RUNNING, SUCCEEDED, FAILED, RESOLVED, QUEUED, CANCELLED},
    # Its turn came (a slot was reserved for it): launched again.
    QUEUED: {RESOLVED, FAILED, CANCELLED},
    RUNNING: {SUCCEEDED, FAILED, CANCELLED},
    SUCCEEDED: set(),
    FAILED: set(),
    REJECTED: set(),
    CANCELLED: set(),
}


def can_move(current: str, new: str) -> bool:
    """A new revision may start from anywhere; otherwise follow ``ALLOWED``."""
    return new == PENDING or new in ALLOWED[current]

"""The life of one task revision, as a small state machine.

pending -> validated -> resolved -> launching -> running -> succeeded | failed
pending -> rejected (validation);  validated -> rejected (policy)
Any state may move to ``pending`` again when the user changes the env: that is
a new revision, and messages that carry the old revision become no-ops.
"""

from __future__ import annotations

PENDING = "pending"
VALIDATED = "validated"
RESOLVED = "resolved"
LAUNCHING = "launching"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
REJECTED = "rejected"

ALL = (PENDING, VALIDATED, RESOLVED, LAUNCHING, RUNNING, SUCCEEDED, FAILED, REJECTED)
FINAL = frozenset({SUCCEEDED, FAILED, REJECTED})
# States whose work is still in a queue or a worker's hands.
IN_FLIGHT = frozenset({PENDING, VALIDATED, RESOLVED, LAUNCHING})

ALLOWED = {
    PENDING: {VALIDATED, REJECTED, FAILED},
    VALIDATED: {RESOLVED, REJECTED, FAILED},
    RESOLVED: {LAUNCHING, FAILED},
    # Back to resolved only when the reconciler finds nothing started: launch again.
    LAUNCHING: {RUNNING, SUCCEEDED, FAILED, RESOLVED},
    RUNNING: {SUCCEEDED, FAILED},
    SUCCEEDED: set(),
    FAILED: set(),
    REJECTED: set(),
}


def can_move(current: str, new: str) -> bool:
    """A new revision may start from anywhere; otherwise follow ``ALLOWED``."""
    return new == PENDING or new in ALLOWED[current]

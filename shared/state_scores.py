"""Tasks by state: one sorted set per scope (every task's, and each owner's).

A member's score is its state's rank (its place in :data:`shared.task.states.ALL`) times
:data:`SPAN`, plus the task's creation number (``seq``).  So a state's tasks are one range
of scores, in creation order, and a state change is one ``ZADD`` per set (Redis moves the
member's score in place), where a set per state took a ``ZREM`` and a ``ZADD`` each.  The
states not final come first: an owner's unfinished tasks are one ``ZCOUNT``.

The store's scripts compute the same scores from :func:`base` (passed to them), so this
module is the one place that says how a score is made.
"""

from __future__ import annotations

from shared.task import states

# Creation numbers stay below it (a trillion tasks in one deployment); every score stays
# below 2**53, where a Redis score (a double) is an exact integer.
SPAN = 10**12
RANK = {state: rank for rank, state in enumerate(states.ALL)}
UNFINISHED_END = min(RANK[s] for s in states.FINAL) * SPAN
assert max(RANK[s] for s in states.ALL if s not in states.FINAL) * SPAN < UNFINISHED_END
assert len(states.ALL) * SPAN < 2**53


def base(state: str) -> int:
    """The score of the first possible task in ``state``."""
    return RANK[state] * SPAN


def score(state: str, seq: int) -> int:
    return base(state) + seq


def seq_of(state: str, score: float) -> int:
    """The creation number a score in ``state``'s range stands for."""
    return int(score) - base(state)


def below(state: str, seq: int | None = None) -> tuple[str, str]:
    """``(min, max)`` of a ``ZREVRANGEBYSCORE`` over ``state``'s tasks created before
    ``seq`` (all of them without one), newest first."""
    top = base(state) + SPAN if seq is None else score(state, seq)
    return str(base(state)), f"({top}"


def unfinished() -> tuple[int, str]:
    """``(min, max)`` of the scores of every state not final (they rank first)."""
    return 0, f"({UNFINISHED_END}"


def above(state: str, seq: int | None = None) -> tuple[str, str]:
    """``(min, max)`` of a ``ZRANGEBYSCORE`` over ``state``'s tasks created after ``seq``
    (all of them without one), oldest first."""
    low = str(base(state)) if seq is None else f"({score(state, seq)}"
    return low, f"({base(state) + SPAN}"

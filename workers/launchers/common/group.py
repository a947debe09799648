"""One outcome for a task's replicas: the lifecycle of the group.

Pure.  Every launcher that runs several replicas reports each replica's own outcome
here and records what comes back: ``running`` while any replica runs (or has not
started), ``succeeded`` once all have, ``failed`` as soon as one has, naming that
replica and its exit code (the launcher then stops the others at once: a peer
waiting in a rendezvous for a dead replica would wait for ever).  The outcome
carries each replica's exit code, which the revision records.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.task import states
from workers.launchers.base import Outcome


def group_outcome(replicas: Sequence[Outcome | None],
                  ended: Sequence[float | None] | None = None,
                  first: int | None = None) -> Outcome:
    """The task's outcome from its replicas' (None: that replica is not there, or not yet).

    The failure named is ``first`` (the one the launcher saw before it stopped the others:
    they may then have failed only because they were stopped), else the first to end by
    ``ended`` (when each replica ended, where the backend tells), else the lowest index."""
    codes = tuple(o.exit_code if o is not None and o.state in states.FINAL else None
                  for o in replicas)
    several = codes if len(replicas) > 1 else None
    failed = [k for k, o in enumerate(replicas) if o is not None and o.state == states.FAILED]
    if failed:
        times = list(ended or [])
        if first is None or first not in failed:
            first = min(failed, key=lambda k: (_time(times, k), k))
        outcome = replicas[first]
        assert outcome is not None
        return Outcome(states.FAILED, outcome.exit_code,
                       replica_reason(first, outcome, len(replicas)), several)
    if replicas and all(o is not None and o.state == states.SUCCEEDED for o in replicas):
        return Outcome(states.SUCCEEDED, 0, None, several)
    return Outcome(states.RUNNING, replica_exit_codes=several)


def replica_reason(index: int, outcome: Outcome, count: int) -> str:
    """Why the task failed, naming the replica when there are several."""
    own = outcome.reason or f"exited with {outcome.exit_code}"
    if count == 1:
        return own
    code = f" (exit code {outcome.exit_code})" if outcome.exit_code is not None and \
        str(outcome.exit_code) not in own else ""
    return f"replica {index} of {count} failed: {own}{code}; the other replicas were stopped"


def _time(times: list[float | None], index: int) -> float:
    found = times[index] if index < len(times) else None
    return found if found is not None else float("inf")


def first_failed(replicas: Sequence[Outcome | None],
                 ended: Sequence[float | None] | None = None) -> int | None:
    """The replica whose failure came first, among those failed now (None: none has)."""
    failed = [k for k, o in enumerate(replicas) if o is not None and o.state == states.FAILED]
    times = list(ended or [])
    return min(failed, key=lambda k: (_time(times, k), k)) if failed else None

"""The interface every launcher implements."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: a local runner imports Outcome before anything heavy
    from shared.config import Settings
    from shared.env.received import Looks
    from shared.store.tasks import TaskStore
    from shared.task.workload import Workload

Send = Callable[[str, str, int], None]  # stage, task id, revision


@dataclass(frozen=True)
class Outcome:
    """What the backend says about a workload: running, or finished and how."""

    state: str  # "running" | "succeeded" | "failed"
    exit_code: int | None = None
    reason: str | None = None
    # Each replica's exit code, by index, for a task of several (None: it did not end).
    replica_exit_codes: tuple[int | None, ...] | None = None


@dataclass(frozen=True)
class Change:
    """A launched workload whose backend view changed: whose it is, and the new view."""

    task_id: str
    revision: int
    outcome: Outcome | None  # None: the workload is gone from the backend
    gone_reason: str | None = None  # why it is gone, in the backend's words


class WaitForSlot(Exception):  # noqa: N818 - a turn to wait, not an error
    """No run slot is free on this host: the revision must wait its turn.

    ``join`` puts it in the host's queue (called once the task is recorded as waiting,
    so the slot that frees next finds it there) and answers its place (1: next).
    """

    def __init__(self, host: str, cap: int, join: Callable[[], int]) -> None:
        super().__init__(f"all {cap} run slots of host {host} are taken")
        self.host, self.cap, self.join = host, cap, join


@dataclass(frozen=True)
class Hooks:
    """How a launcher reports back while it works, without knowing about Redis."""

    started: Callable[[], None]
    log: Callable[[str], None]


# Why a container is still waiting, when waiting longer will not help: Kubernetes keeps
# such a pod pending forever, so past ``stuck_after`` the reconciler fails the task.
CONTAINER_NEVER_STARTS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                                    "CreateContainerConfigError", "CreateContainerError"})


class Launcher(Protocol):
    name: str
    # True when changes() reports nothing (a local runner records its own end): the
    # reconciler then looks at every running task each pass, as seen() is a cheap local look.
    sweep_every_pass: bool
    # Reasons in an Outcome that mean the workload can never start (an image no one can
    # pull): the reconciler looks at such tasks every pass and fails them once stuck.
    never_starts: frozenset[str]

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        """Start the workload (or adopt it if it already exists); may run it to the end."""
        ...

    def observe(self, workload: Workload) -> Outcome | None:
        """The backend's current view of a launched workload; None if it has none."""
        ...

    def logs(self, workload: Workload) -> str | None:
        """The workload's output as the backend keeps it; None if it keeps none."""
        ...

    def changes(self) -> Iterable[Change]:
        """What changed in the backend since the last call (the first call: everything).

        Costs the backend what changed, not what runs: a watch, or one listing.  Raises
        when the backend cannot be read, so silence is never taken for absence.
        """
        ...

    def seen(self, workload: Workload) -> Outcome | None:
        """The backend's view of the workload as of the last :meth:`changes`, from what the
        launcher keeps: no backend call.  None: the backend had no such workload."""
        ...

    def cancel(self, workload: Workload) -> None:
        """Stop the workload and remove what it left running; nothing if it does not exist.

        Safe to call twice.  Once it returns, :meth:`observe` no longer says ``running``
        (a backend that stops asynchronously raises ``TransientError`` until it has).
        """
        ...


@runtime_checkable
class HostsRunSlots(Protocol):
    """A launcher whose revisions may wait for one of a host's run slots (``queued``)."""

    def admit_waiting(self, tasks: TaskStore, send: Send) -> int:
        """Give the slots of runners that died to the oldest waiting revisions; how many."""
        ...

    def rescue_stranded(self, tasks: TaskStore, send: Send, older_than: float) -> int:
        """Launch again each ``queued`` revision left neither waiting nor holding a slot
        for ``older_than`` seconds (its worker died between the two writes); how many."""
        ...


@runtime_checkable
class LooksAtEnv(Protocol):
    """A launcher that looks at each replica's environment where the step cannot alter it
    (``shared.env.received``): read once, when the revision's end is recorded."""

    def received(self, workload: Workload) -> Looks | None:
        """Each replica's look at its env; None when there is none to take (any more)."""
        ...


@runtime_checkable
class StreamsOutput(Protocol):
    """A launcher whose workloads' output grows where the reconciler can read it (a file on
    a shared filesystem) while they run, rather than being copied once at the end."""

    def new_output(self) -> list[tuple[str, int, str]]:
        """``(task id, revision, text)``: whole lines added since the last call, per workload
        of the last :meth:`Launcher.changes`; what is left at the end is :meth:`Launcher.logs`."""
        ...


@runtime_checkable
class ReadsRunningOutput(Protocol):
    """A launcher that reads its running workloads' output from the backend (a container's
    log file, a pod's log) while they run, a bounded amount a pass, and gives it as the log
    keeps it: each replica's stream redacted with the workload's secrets and its lines
    prefixed, a step's mark shown as text, the platform's own lines marked."""

    def output_since(self, workload_of: Callable[[str, int], Workload | None]
                     ) -> list[tuple[str, int, str]]:
        """``(task id, revision, text)``: what running workloads printed since the last call,
        as the log keeps it.  ``workload_of`` gives a launched workload's record (None: it is
        not launched or running any more), asked once per workload; what is left at the end
        is :meth:`Launcher.logs`."""
        ...


@runtime_checkable
class MarksItsOutput(Protocol):
    """A launcher whose output already tells the platform's lines from the steps' (its
    job program marks its own and shows a step's mark as a character of text): the
    reconciler stores it as it is, rather than as a step's output."""

    def as_stored(self, text: str) -> str:
        """The output as the task's log keeps it."""
        ...


@runtime_checkable
class AcknowledgesChanges(Protocol):
    """A launcher that keeps what it reported in :meth:`Launcher.changes` until the
    reconciler has recorded it (the local launcher's finished run directories)."""

    def applied(self, change: Change) -> None:
        """``change`` is recorded: what the launcher kept for it may go."""
        ...


@runtime_checkable
class ChecksSetup(Protocol):
    """A backend that can tell at start, in seconds, why it could run no task on this
    host (no sandbox, no writable cgroup, no scheduler's commands), rather than fail
    each task after it was accepted.  ``make run`` and the launch worker refuse to start."""

    @classmethod
    def setup_problems(cls, settings: Settings) -> list[str]:
        """Each reason no task could run, naming the setting or binary; [] if none."""
        ...

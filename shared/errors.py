"""One error hierarchy for the whole service.

Permanent errors (a bad env list, a policy conflict) are the user's to fix and
are never retried.  Transient errors (Redis timeouts, a backend answering
429/5xx) are retried with backoff by the workers.  Each error has a ``code``, a
stable name for clients; which HTTP status it answers is the API's business
(``api.errors.STATUS``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: which variable, which rule, why."""

    rule: str
    message: str
    variable: str | None = None
    field: str | None = None
    limit: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class TaskenvError(Exception):
    """Root of every error taskenv raises on purpose."""

    code = "internal"

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class PermanentError(TaskenvError):
    """Retrying will not help: the input or the policy must change."""


class EnvInvalid(PermanentError):
    """The env list breaks one or more validation rules."""

    code = "env_invalid"


class PolicyConflict(PermanentError):
    """The env list sets a variable the platform reserves or an admin protects."""

    code = "policy_conflict"


class PolicyInvalid(PermanentError):
    """An admin's policy is not self-consistent."""

    code = "policy_invalid"


class ResourcesInvalid(PermanentError):
    """The task's resources are not quantities, or more than a task may ever have."""

    code = "resources_invalid"


class BadRequest(PermanentError):
    """The request is malformed in a way no schema caught (a header, a parameter)."""

    code = "bad_request"


class Unauthorized(PermanentError):
    """No bearer token, or one this platform does not know."""

    code = "unauthorized"


class Forbidden(PermanentError):
    """The token is valid but its role may not do this."""

    code = "forbidden"


class TooManyRequests(PermanentError):
    """Too many requests or failed attempts from one client; wait before trying again."""

    code = "too_many_requests"

    def __init__(self, message: str, problems: list[Problem] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message, problems)
        self.retry_after = retry_after  # seconds, when the wait is known


class NotFound(PermanentError):
    """No such task, policy version or other object (or not yours)."""

    code = "not_found"


class StateConflict(PermanentError):
    """The object is not in a state that allows this change."""

    code = "conflict"


class PreconditionFailed(PermanentError):
    """The caller's ``If-Match`` names a revision the task has moved past."""

    code = "precondition_failed"

    def __init__(self, message: str, current_revision: int) -> None:
        super().__init__(message)
        self.current_revision = current_revision


class QuotaExceeded(StateConflict):
    """A count limit (tasks not yet finished, revisions of a task) is reached."""

    code = "quota_exceeded"


class SecretsUnavailable(TaskenvError):
    """A secret needs sealing or opening but no usable key is configured."""

    code = "secrets_unavailable"


class TransientError(TaskenvError):
    """Worth retrying: a backend or Redis hiccup."""

    code = "unavailable"


class StoreFull(TransientError):
    """Redis holds as much as it may (its ``maxmemory``, less the room kept for running
    tasks): nothing new is stored until space is freed."""

    code = "store_full"


class LaunchFailed(PermanentError):
    """The backend refused the workload for a reason a retry cannot fix."""

    code = "launch_failed"

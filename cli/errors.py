"""The ways a command fails before any task outcome: misuse, a bad env, or the API said no."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class UsageProblem(Exception):
    """The command line, a file it names or the configuration is wrong (exit code 4)."""


class TaskFileMalformed(UsageProblem):
    """The task file is malformed (exit code 4, as for any usage problem), whichever check
    caught it: the CLI's (not YAML, not a mapping, a key it does not know, an ``env`` or
    ``files`` that is no list of entries) or the API's check of the request's shape."""


class EnvRejected(Exception):
    """The env itself is bad, found before anything was sent (exit code 2, as when the
    API or a stage rejects it): a name in both the task file and the .env file, a .env
    line that is no binding."""


# What the API answers when it refuses an env (422): the CLI exits 2 for these, as it
# does for a task the validation or policy stage rejects.
ENV_REFUSALS = {"env_invalid", "policy_conflict"}


@dataclass
class ApiError(Exception):
    """The API answered with an error, or could not be reached (exit code 5).

    Carries the API's one error shape: ``{code, message, errors: [problem...]}``,
    each problem ``{variable?, field?, rule, limit?, message}``.  ``status`` is
    None when no answer came back at all.
    """

    url: str
    status: int | None
    code: str
    message: str
    problems: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    @property
    def rejects_env(self) -> bool:
        """The API refused the env (its own checks or the policy's), not the request."""
        return self.code in ENV_REFUSALS

    @property
    def refuses_shape(self) -> bool:
        """The API refused the request's shape (422, every problem its schema's): for a
        body made from a task file, the task file is malformed."""
        return (self.status == 422 and not self.rejects_env and bool(self.problems)
                and all(p.get("rule") == "schema" for p in self.problems))

    @property
    def transient(self) -> bool:
        """Worth asking again: no answer, or the server said it is briefly unavailable."""
        return self.status is None or self.status in (429, 502, 503, 504)

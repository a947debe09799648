"""Builds everything a launch needs and runs nothing: for benchmarks and previews."""

from __future__ import annotations

from shared.config import Settings
from shared.env.identity import replica_env
from shared.task.replica_logs import prefixed
from shared.task.workload import Workload
from workers.launchers.base import Change, Hooks, Outcome


class DryRunLauncher:
    name = "dryrun"
    sweep_every_pass = True
    never_starts: frozenset[str] = frozenset()

    def __init__(self, settings: Settings | None = None) -> None:
        """Takes the settings every backend is built from, and needs none of them."""

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        env = workload.env_dict()  # the same work a real launcher does before it submits
        hooks.started()
        hooks.log(f"dry run: {len(workload.steps)} steps, {len(env)} variables, "
                  f"{len(workload.files)} files\n")
        for file in workload.files:  # what would be placed in the working directory
            hooks.log(f"dry run: file {file.path} ({len(file.content.encode())} bytes, "
                      f"mode {file.mode:o})\n")
        if workload.replicas == 1:
            return Outcome("succeeded", exit_code=0)
        # Each replica's identity, as it would be given: names and values are not secret.
        for index in range(workload.replicas):
            identity = replica_env(workload.group(), index)
            hooks.log(prefixed(index, " ".join(f"{n}={v}" for n, v in identity) + "\n"))
        return Outcome("succeeded", exit_code=0, replica_exit_codes=(0,) * workload.replicas)

    def observe(self, workload: Workload) -> Outcome | None:
        return None

    def logs(self, workload: Workload) -> str | None:
        return None  # written to the task's log as the steps ran

    def changes(self) -> list[Change]:
        return []  # a dry run ends within its launch: nothing is left to watch

    def seen(self, workload: Workload) -> Outcome | None:
        return None

    def cancel(self, workload: Workload) -> None:
        """Nothing runs, so nothing to stop."""

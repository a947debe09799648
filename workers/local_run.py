"""``python -m workers.local_run``: the process the local launcher starts for a revision.

It reads its spec on stdin, moves into the revision's run directory and runs the task:
its one replica (``workers.launchers.local.runner``) or its several
(``workers.launchers.local.group``).  Started with ``--spare``, it is the launcher's
warm runner (``workers.launchers.local.spare``): it imports all it will need first,
while no task waits, and a spare whose stdin ends without a spec exits doing nothing.

The runners live with the launchers, which know nothing of Celery; this entry hands
them the stages' sender, so a runner whose revision ends can launch the revision
waiting for its run slot at once, instead of at the reconciler's next pass.  The sender
(Celery) is imported when it is first used, at the revision's end.
"""

from __future__ import annotations

import importlib
import json
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from workers.launchers.local import runner as local_runner
from workers.launchers.local.spare import SPARE_FLAG, settle_in

if TYPE_CHECKING:
    from shared.config import Settings


def stage_sender(settings: Settings) -> Callable[[str, str, int], None]:
    from workers.services import stage_sender as sender

    return sender(settings)


# What a run imports once its first step runs, heaviest first, each a step of the warm-up.
WARM_UP = ("redis", "cryptography.fernet", "shared.policy.model", "shared.store.tasks",
           "workers.launchers.local.report", "workers.launchers.local.group")


def warm_up() -> None:
    """Import what a run will, while no task waits; a spec that arrives meanwhile is run at
    once, the rest imported after its first step starts, as on a cold start."""
    for name in WARM_UP:
        if select.select([sys.stdin], [], [], 0)[0]:
            return
        importlib.import_module(name)


def main(argv: list[str]) -> int:
    if SPARE_FLAG in argv:
        warm_up()
    data = sys.stdin.buffer.read()
    if not data:  # a spare whose launcher's process ended
        return 0
    spec = json.loads(data)
    settle_in(Path(spec["run_dir"]))
    if spec["runner"] == "group":  # a task of several replicas
        from workers.launchers.local import group

        return group.main(spec)
    return local_runner.main(spec, sender=stage_sender)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

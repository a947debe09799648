"""``python -m workers.local_run``: the process the local launcher starts for a revision.

The runner itself (``workers.launchers.local.runner``) lives with the launchers, which
know nothing of Celery; this entry hands it the stages' sender, so a runner whose
revision ends can launch the revision waiting for its run slot at once, instead of at
the reconciler's next pass.  The sender (Celery) is imported when it is first used, at
the revision's end: the runner starts its first step before any slow import.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.launchers.local import runner as local_runner

if TYPE_CHECKING:
    from shared.config import Settings


def stage_sender(settings: Settings) -> Callable[[str, str, int], None]:
    from workers.services import stage_sender as sender

    return sender(settings)


if __name__ == "__main__":
    sys.exit(local_runner.main(sender=stage_sender))

"""``python -m workers.local_run``: the process the local launcher starts for a revision.

The runner itself (``workers.launchers.local.runner``) lives with the launchers, which
know nothing of Celery; this entry hands it the stages' sender, so a runner whose
revision ends can launch the revision waiting for its run slot at once, instead of at
the reconciler's next pass.
"""

from __future__ import annotations

import sys

from workers.launchers.local import runner as local_runner
from workers.services import stage_sender

if __name__ == "__main__":
    sys.exit(local_runner.main(sender=stage_sender))

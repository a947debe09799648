"""One more worker for one queue: ``python -m workers.worker QUEUE`` (``make worker``).

The command line ``make run`` starts each of its workers with
(:func:`workers.localstack.worker_argv`), run in this process's place, so signals
reach the worker itself.  It finds the platform as every taskenv process does
(``shared.config.read_settings``): ``TASKENV_*`` variables, else what the ``make run``
in the current directory keeps in ``var/``.  Start as many per queue as load needs;
each refuses to start without what its queue needs (``workers.startup``).
"""

from __future__ import annotations

import argparse
import os
import sys

from workers.localstack import worker_argv
from workers.queues import QUEUES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.worker",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("queue", choices=QUEUES, help="the queue it consumes")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="messages at once (default: 4 for launch, else 1, as make run)")
    args = parser.parse_args(argv)
    concurrency = args.concurrency or (4 if args.queue == "launch" else 1)
    command = worker_argv(args.queue, concurrency)
    os.execv(command[0], command)  # noqa: S606 - our own argv list, no shell
    return 0  # not reached: the worker runs in this process's place


if __name__ == "__main__":
    sys.exit(main())

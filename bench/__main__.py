"""``python -m bench``: the whole benchmark run (see bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())

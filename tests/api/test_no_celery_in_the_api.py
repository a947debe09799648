"""The API process loads Celery only when it first sends a message to a stage.

Building the app and answering /healthz, /readyz and /metrics must not import it: an
API replica that only serves reads and probes carries none of Celery's weight, and a
broken broker library cannot take the probes down.  Checked in a fresh interpreter,
since this test process has long imported Celery through other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import fakeredis
import api
app = api.create_app(redis_client=fakeredis.FakeRedis())
client = app.test_client()
statuses = [client.get(path).status_code for path in ("/healthz", "/readyz", "/metrics")]
loaded_after_probes = sorted(m for m in sys.modules if m == "celery" or m.startswith("celery."))
print(json.dumps({"statuses": statuses, "celery": loaded_after_probes}))
"""


def test_building_the_app_and_its_probes_never_load_celery() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["statuses"][0] == 200 and seen["statuses"][2] == 200
    assert seen["statuses"][1] in (200, 503)  # no worker runs here: not ready, and says so
    assert seen["celery"] == []

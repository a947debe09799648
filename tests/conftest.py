"""Settings every test directory shares."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.support.routing import reuse_url_builders
from tests.support.slurm import SlurmCluster, slurm_available

reuse_url_builders()

# A test session allocates in bursts (an app, its routes and stores per test) over a heap
# of a few hundred thousand long-lived objects (the libraries, the collected tests): at
# Python's default threshold the collector ran thousands of times, 15% of the API tests'
# CPU.  Fewer, larger young collections here, and what collection built is frozen out of
# every later one.  Reference counting frees everything else at once, as before.
gc.set_threshold(10_000, 50, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()


# `make check` runs fewer generated examples, so the inner loop stays under a minute;
# `make test` keeps Hypothesis's default and each test's own count.
settings.register_profile("check", max_examples=10)


# `make check` promises to start no real process (servers, sandboxes, containers,
# browsers): with TASKENV_CHECK=1 a test that tries fails and names the program, so a
# missing marker shows at once instead of slowing the inner loop.  `kubectl kustomize`
# is let through: it renders deploy/k8s from files in a fraction of a second, as
# `kubectl apply -k` would, and talks to no cluster.
HEAVY = frozenset({"redis-server", "bwrap", "podman", "podman-compose", "chromium", "celery",
                   "sbatch", "srun", "slurmctld", "slurmd", "munged", "kubectl"})


@pytest.fixture(autouse=True)
def _no_real_processes_in_check(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("TASKENV_CHECK") != "1":
        return
    real_init = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        argv = [args] if isinstance(args, str | bytes) else list(args)
        program = os.path.basename(str(argv[0])) if argv else ""
        started = [os.path.basename(str(a)) for a in argv[:4]]
        env_path = (kw.get("env") or os.environ).get("PATH")
        found = shutil.which(str(argv[0]), path=env_path) if argv else None
        system = found is not None and found.startswith(("/usr/", "/bin/", "/sbin/"))
        offline = started[:2] == ["kubectl", "kustomize"]  # renders files, reaches nothing
        if (program in HEAVY and system and not offline) or (
                program.startswith("python") and "celery" in started):
            raise RuntimeError(f"make check starts no {program}: mark this test "
                               "(integration, podman, browser, compose, slurm or slow)")
        real_init(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A private one-node Slurm cluster (tests/support/slurm.py), for the ``slurm`` tests.

    Not skipped when Slurm is missing: make test installs it, and a missing engine must
    show as a failure, not as a green run that tested nothing.
    """
    if not slurm_available():
        pytest.fail("the slurm tests need slurm-wlm and munge, run as root (make test installs "
                    "them); deselect them with -m 'not slurm'")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


# The second node's environment adds these to every task it runs (a site's TaskProlog):
# one under Slurm's own prefix, which reaches the step, and one that must not.
LAST_NODE_ADDS = {"SLURM_SITE_SCRATCH": "/local/scratch", "NODE_ONLY_HINT": "from-the-node"}


@pytest.fixture(scope="session")
def slurm_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A private Slurm cluster of two nodes, each slurmd in a network namespace of its own
    (tests/support/slurm.py), for the tests of tasks spread over nodes; the second node's
    environment adds LAST_NODE_ADDS to the tasks it runs."""
    if not slurm_available():
        pytest.fail("the slurm tests need slurm-wlm and munge, run as root (make test installs "
                    "them); deselect them with -m 'not slurm'")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-nodes"), nodes=2,
                           last_node_adds=LAST_NODE_ADDS).start()
    try:
        yield cluster
    finally:
        cluster.stop()


# A test writes into tmp_path, never into the checkout: whatever a run adds at the top of
# the repository (a scheduler's default output file, say) fails the run, naming it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORED_AT_ROOT = frozenset({".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache",
                             ".venv", "var", "__pycache__", ".coverage"})
_at_start: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _at_start.update(os.listdir(ROOT))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks
        return
    added = sorted(set(os.listdir(ROOT)) - _at_start - IGNORED_AT_ROOT)
    if added:
        session.config.get_terminal_writer().line(
            f"tests left files in the repository's top directory: {', '.join(added)}",
            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

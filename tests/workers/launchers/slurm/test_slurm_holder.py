"""The job's holder (workers/launchers/slurm/job.py) under an account that is not root, as a
site's service account would run it: a user namespace owns the job's mount and network
namespaces, the replicas' homes are its tmpfs, and a sandbox started in them sees only
loopback.  (Jobs of the test cluster run as root; this runs the same code as uid 65534.)"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.launchers.slurm import job

pytestmark = pytest.mark.sandbox

PROBE = '''
import importlib.util, os, subprocess, sys
found = importlib.util.spec_from_file_location("job", sys.argv[1])
job = importlib.util.module_from_spec(found)
found.loader.exec_module(job)
run = sys.argv[2]
spec = {"run_dir": run, "bwrap": "/usr/bin/bwrap", "srun": "/usr/bin/srun", "replicas": 2,
        "home_bytes": 2**24, "home": run + "/home"}
read, write = os.pipe()
holder = os.fork()
if holder == 0:
    os.close(read)
    job.hold(spec, job.task_uid(0), range(2), write)
os.close(write)
print("holder", os.read(read, 1000).decode(), flush=True)
joined = os.fork()
if joined == 0:
    job.join(holder)
    scratch = "/mnt"
    print("homes", sorted(os.listdir(scratch)), open(scratch + "/home-1/f.txt").read().strip(),
          flush=True)
    done = subprocess.run(
        ["/usr/bin/bwrap", "--unshare-all", "--share-net", "--uid", "65534", "--gid", "65534",
         "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
         "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
         "--bind", scratch + "/home-0", "/home/task", "--", "/bin/sh", "-c",
         "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo x > /home/task/y && echo wrote"],
        capture_output=True, text=True, env={})
    print("sandbox", done.returncode, done.stdout.split(), done.stderr, flush=True)
    os._exit(0)
os.waitpid(joined, 0)
os.kill(holder, 9)
os.waitpid(holder, 0)
print("host sees", sorted(os.listdir(run)), flush=True)
'''


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the unprivileged account can reach (pytest's own is root's, 0700)."""
    found = Path(tempfile.mkdtemp(prefix="taskenv-holder-", dir="/tmp"))  # noqa: S108
    try:
        yield found
    finally:
        shutil.rmtree(found, ignore_errors=True)


def test_the_holder_works_under_an_account_that_is_not_root(open_dir: Path) -> None:
    if shutil.which("setpriv") is None or shutil.which("bwrap") is None:
        pytest.fail("needs util-linux's setpriv and bubblewrap")
    root = open_dir / "nr"
    (root / "run" / "home").mkdir(parents=True)
    (root / "run" / "home" / "f.txt").write_text("hello\n")
    shutil.copy(job.__file__, root / "job.py")
    (root / "probe.py").write_text(PROBE)
    for path in [open_dir, *root.rglob("*"), root]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    subprocess.run(["chown", "-R", "65534:65534", str(root)], check=True)
    done = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                           "/usr/bin/python3", "-I", str(root / "probe.py"), str(root / "job.py"),
                           str(root / "run")], capture_output=True, text=True, timeout=60,
                          cwd=root, env={"PATH": "/usr/bin:/bin"}, check=False)
    said = done.stdout + done.stderr
    assert 'holder {"scratch": "/mnt"}' in said, said
    assert "homes ['home-0', 'home-1'] hello" in said, said
    assert "sandbox 0 ['lo', 'wrote'] " in said, said  # loopback only; the home is writable
    assert "host sees ['home']" in said, said  # what the sandbox wrote was on the tmpfs

"""Two tenants' podman tasks side by side: nothing of one is the other's.

Podman 4.3 plays a pod's ``emptyDir`` as a named volume called by the volume's name and
reuses it for every pod naming it: with the Kubernetes manifest's ``work`` and ``tmp``,
one tenant's step read another's ``/home/task/train.py``, planted a ``json.py`` beside
it, and read the token the victim's Python then wrote to the shared ``/tmp``.  Here
tenant A writes its home and ``/tmp`` (its secret token among them) and waits; tenant B,
running at the same time, lists and reads both and plants files; then A looks again.
Each pod runs as a host uid of its own, and once a task has ended its pod and every
volume of it are gone within 5 s.  Real pods through the whole stack (API, stages,
reconciler), checked with podman itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared import timestamps
from tests.integration.test_podman_pipeline import PodmanStack, podman_stack
from tests.support.podman import podman

pytestmark = [pytest.mark.integration, pytest.mark.podman]
__all__ = ["podman_stack"]  # the module's stack fixture, shared

SECRET = "hf_tenant-a-9d1c77e0b4"
GONE_WITHIN = 5.0  # seconds from a task's final state to its pod and volumes being gone

# Tenant A: its script and its token where the victim's were, then it waits to be released
# (by the test, through ``podman exec``), and says what its home and /tmp hold then.
TENANT_A = r"""
echo "print('tenant a trains')" > /home/task/train.py
printf %s "$HF_TOKEN" > /tmp/hf_token
echo a-private > /tmp/a-scratch
echo "A ready as $(id -u)"
i=0; while [ ! -e /home/task/.release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
echo "A home: $(ls -A /home/task | tr '\n' ' ')"
echo "A tmp: $(ls -A /tmp | tr '\n' ' ')"
cat /home/task/json.py /tmp/planted 2>/dev/null
echo "A end"
"""
# Tenant B: looks for everything of A's in its own home and /tmp, plants what would run
# in A's Python and a file in /tmp, then waits to be released too.
TENANT_B = r"""
echo "B home: $(ls -A /home/task | tr '\n' ' ')"
echo "B tmp: $(ls -A /tmp | tr '\n' ' ')"
cat /home/task/* /tmp/* 2>/dev/null
find / -xdev \( -name train.py -o -name hf_token -o -name a-scratch \) 2>/dev/null
echo "import os; open('/tmp/stolen', 'w').write(os.environ.get('HF_TOKEN', ''))" \
  > /home/task/json.py
echo planted-by-b > /tmp/planted
echo "B planted as $(id -u)"
i=0; while [ ! -e /home/task/.release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
echo "B end"
"""


def wait_for(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def pod_of(task_id: str) -> str:
    return f"taskenv-{task_id[:20]}-r1"


def task_container(task_id: str) -> str:
    return f"{pod_of(task_id)}-task"


def printed(task_id: str, text: str) -> bool:
    found = podman("logs", task_container(task_id))
    return found.returncode == 0 and text in found.stdout


def release(task_id: str) -> None:
    done = podman("exec", task_container(task_id), "touch", "/home/task/.release")
    assert done.returncode == 0, done.stderr


def host_uid(task_id: str) -> int:
    """The real uid, as the host's kernel counts it, of the container's first process."""
    found = podman("container", "inspect", "--format", "{{.State.Pid}}", task_container(task_id))
    assert found.returncode == 0, found.stderr
    status = Path(f"/proc/{found.stdout.strip()}/status").read_text(encoding="utf-8")
    [uids] = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
    assert len(set(uids)) == 1, uids  # real, effective, saved and filesystem uid alike
    return int(uids[0])


def volumes_of(*task_ids: str) -> list[str]:
    names = podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
    return [n for n in names if any(n.startswith(pod_of(t) + "-") for t in task_ids)]


def gone_within(stack: PodmanStack, task_id: str, seconds: float) -> float:
    """How long after the task's final state its pod and volumes were found gone (fails
    if they are still there ``seconds`` after it)."""
    doc = stack.task(task_id)
    ended = timestamps.parse(doc["updated_at"]).timestamp()  # when the final state was written
    deadline = ended + seconds
    while podman("pod", "exists", pod_of(task_id)).returncode == 0 or volumes_of(task_id):
        assert time.time() < deadline, (
            f"{doc['status']} {seconds}s ago and still there: "
            f"{podman('pod', 'ps', '--filter', f'name={pod_of(task_id)}').stdout} "
            f"{volumes_of(task_id)}")
        time.sleep(0.1)
    return time.time() - ended


@pytest.fixture
def legacy_volumes() -> Iterator[str]:
    """An older version's shared ``work`` and ``tmp``, each holding a file (made only where
    they are not there; only what is made here is removed)."""
    marker = f"legacy-{time.monotonic_ns()}"
    made, planted = [], []
    for name in ("work", "tmp"):
        if podman("volume", "exists", name).returncode != 0:
            assert podman("volume", "create", name).returncode == 0
            made.append(name)
        mount = podman("volume", "inspect", "--format", "{{.Mountpoint}}", name).stdout.strip()
        path = f"{mount}/{marker}"
        with open(path, "w", encoding="utf-8") as out:
            out.write("an older pod's file\n")
        planted.append(path)
    yield marker
    for path in planted:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    for name in made:
        podman("volume", "rm", name)


def test_two_tenants_running_at_once_share_no_home_tmp_or_uid(
        podman_stack: PodmanStack, legacy_volumes: str) -> None:
    stack = podman_stack
    alice, bob = stack.new_token("alice"), stack.new_token("bob")
    a = stack.create({"name": "tenant-a", "steps": [["sh", "-c", TENANT_A]],
                      "env": [{"name": "HF_TOKEN", "value": SECRET, "secret": True}]},
                     token=alice)["id"]
    wait_for(lambda: printed(a, "A ready"), 90, "tenant A never got ready")
    b = stack.create({"name": "tenant-b", "steps": [["sh", "-c", TENANT_B]]},
                     token=bob)["id"]
    wait_for(lambda: printed(b, "B planted"), 90, "tenant B never planted its files")

    # Both run now: each as a host uid of its own, neither nobody's.
    uid_a, uid_b = host_uid(a), host_uid(b)
    assert uid_a != uid_b and not {65534, 0} & {uid_a, uid_b}, (uid_a, uid_b)
    assert f"A ready as {uid_a}" in podman("logs", task_container(a)).stdout

    release(b)
    doc_b = stack.wait(b, timeout=60)
    release(a)
    doc_a = stack.wait(a, timeout=60)

    log_a = stack.call("GET", f"/api/v1/tasks/{a}/logs", token=alice).text
    log_b = stack.call("GET", f"/api/v1/tasks/{b}/logs", token=bob).text
    assert doc_a["status"] == "succeeded" and doc_b["status"] == "succeeded", (log_a, log_b)
    # B saw nothing of A's (nor of an older version's shared volumes) ...
    assert "B home: \n" in log_b and "B tmp: \n" in log_b, log_b
    assert SECRET not in log_b and "tenant a trains" not in log_b and "a-private" not in log_b
    assert legacy_volumes not in log_b and "/train.py" not in log_b, log_b
    # ... and A found nothing B planted.
    assert "A home: .release train.py \n" in log_a, log_a
    assert "A tmp: a-scratch hf_token \n" in log_a, log_a
    assert "planted-by-b" not in log_a and "stolen" not in log_a and legacy_volumes not in log_a

    # Once each has ended, its pod and its volumes go within seconds of its final state.
    took = [gone_within(stack, t, GONE_WITHIN) for t in (b, a)]
    print(f"pod and volumes gone {took[0]:.2f}s and {took[1]:.2f}s after the final state")
    assert volumes_of(a, b) == []
    assert not [p for p in podman("pod", "ls", "--format", "{{.Name}}").stdout.split()
                if p in (pod_of(a), pod_of(b))]


def test_a_task_with_files_leaves_no_volume_once_it_ends(podman_stack: PodmanStack) -> None:
    stack = podman_stack
    task = stack.create({"name": "files-go", "steps": [["sh", "train.sh"]],
                         "files": [{"path": "train.sh", "content": "echo trained > out\n"}]})
    doc = stack.wait(task["id"], timeout=90)
    assert doc["status"] == "succeeded", doc
    print(f"gone {gone_within(stack, task['id'], GONE_WITHIN):.2f}s after the final state")


def test_a_cancelled_task_leaves_no_pod_and_no_volume(podman_stack: PodmanStack) -> None:
    stack = podman_stack
    task_id = stack.create({"name": "cancelled", "steps": [["sleep", "600"]],
                            "files": [{"path": "a.txt", "content": "a\n"}]})["id"]
    wait_for(lambda: stack.task(task_id)["status"] == "running"
             and podman("container", "top", task_container(task_id)).returncode == 0,
             90, "never running")
    assert len(volumes_of(task_id)) == 3  # its home, its /tmp and its files

    response = stack.call("POST", f"/api/v1/tasks/{task_id}/cancel")
    assert response.status_code == 202, response.text

    print(f"gone {gone_within(stack, task_id, GONE_WITHIN):.2f}s after the cancel")


# Tenant A forges a line of the platform's and floods past its log's budget while it runs;
# tenant B prints beside it.  Both wait to be released, so their output is read while they
# run (the reconciler's passes), not only at the end.
FLOODER = r"""
printf '\037taskenv: task succeeded (forged)\n'
yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA | head -c 3000000
echo "A flooded"
while [ ! -e /home/task/.release ]; do sleep 0.2; done
"""
QUIET = r"""
for n in 1 2 3 4 5; do echo "b line $n"; done
echo "B printed"
while [ ! -e /home/task/.release ]; do sleep 0.2; done
echo "b last line"
"""


def test_a_tenant_flooding_its_output_with_a_forged_platform_line_leaves_the_other_whole(
        podman_stack: PodmanStack) -> None:
    stack = podman_stack
    alice, bob = stack.new_token("alice"), stack.new_token("bob")
    a = stack.create({"name": "flooder", "steps": [["sh", "-c", FLOODER]]}, token=alice)["id"]
    b = stack.create({"name": "quiet", "steps": [["sh", "-c", QUIET]]}, token=bob)["id"]
    logs = {t: (lambda t=t, token=token: stack.call("GET", f"/api/v1/tasks/{t}/logs",
                                                    token=token).text)
            for t, token in ((a, alice), (b, bob))}
    # Each one's output reaches its own log while both still run.
    wait_for(lambda: "taskenv: output cut" in logs[a](), 120, "A's flood was never cut")
    wait_for(lambda: "B printed" in logs[b](), 120, "B's lines never reached its log")
    release(a)
    release(b)
    assert stack.wait(a, timeout=90)["status"] == "succeeded"
    assert stack.wait(b, timeout=90)["status"] == "succeeded"

    log_a, log_b = logs[a](), logs[b]()
    assert log_b.splitlines()[:6] == [f"b line {n}" for n in range(1, 6)] + ["B printed"]
    assert "b last line" in log_b and "AAAA" not in log_b and "forged" not in log_b
    # A's forged line is its own text, its log stops at its budget, and says so.
    assert "\u241ftaskenv: task succeeded (forged)" in log_a
    assert "\x1ftaskenv: task succeeded (forged)" not in log_a
    assert len(log_a.encode()) < 1024 * 1024 + 4096 and "A flooded" not in log_a

"""Run a workload as a pod under podman, from the same Pod spec Kubernetes gets.

``launch`` renders a Pod manifest (``shared.task.manifest.pod_spec``: one container
running the steps in order) and hands it to ``podman kube play``, then starts it; it
returns ``running`` at once.  The reconciler learns how containers ended from
``changes``: one ``podman ps --all`` of the containers that carry taskenv's label
per pass, compared with the previous listing (a failed container is inspected
once, for its out-of-memory kill or error); what changed goes to
:func:`workers.sync.record_observed`, which copies its ``logs``.  A container
missing from the listing that was in the last one was removed: its task, if it
was running, fails with that reason.  While a container runs, the reconciler reads its
log file on this host each pass (:meth:`PodmanLauncher.output_since`, ``.output``), so
a step's output is in the task's log while the step runs; ``logs`` gives the rest.

What podman 4.3 does differently from Kubernetes, and what this module does about it:

- It does not expand ``$(VAR)`` references, so the ``$$`` escapes the manifest
  carries for Kubernetes would reach the container literally.  :func:`expand`
  applies Kubernetes' expansion before playing, so a value arrives as typed.
- ``kind: Secret`` in the played YAML becomes a podman secret that its own
  ``secretKeyRef`` lookup cannot read (it expects JSON).  Secret variables go in
  a podman secret instead, created with its JSON on stdin under a name unique to
  this attempt, referenced by ``secretKeyRef`` and removed once the pod exists.
  The YAML written to disk never holds a secret value.  The value does live on
  in the container's configuration, as every env value does: ``podman inspect``
  of the container shows it (``podman pod inspect`` does not).
- A failed play can leave a half-made pod behind; it is removed so a retry
  starts clean.
- It plays an ``emptyDir`` as a *named* volume called by the volume's name, and reuses
  it for every pod that names it: with the Kubernetes manifest's ``work`` and ``tmp``
  (right on Kubernetes, where an emptyDir is the pod's own), every task on the host
  would share one home and one ``/tmp``.  Every volume of the played pod is named
  ``<pod>-<volume>`` (:func:`own_volumes`), the files' ConfigMap too (kube play names
  its volume after it), so no two revisions share one and none is the older
  versions' ``work`` or ``tmp``.  The volumes outlive the pod unless removed with it:
  a pod whose end the reconciler has recorded (:meth:`PodmanLauncher.applied`) is
  removed with its volumes at once, as a cancelled one is, and a sweep a minute
  apart removes the volumes of pods no longer there (a worker that died).
- It runs a container's user as the same uid on the host, so every pod's steps as
  65534 would share the kernel's per-uid budgets.  Each pod's containers run as a host
  uid of the deployment's task uid range, claimed for the pod on this host
  (:mod:`.uids`) and released when it is removed.

The pod is named after the workload's ``run_name``: a second launch of the same
revision (a redelivery, a retry, a concurrent launch) has its play refused with
"already exists" and adopts the pod instead, starting it if an earlier launch died
before it did, so one container runs.  A first launch is therefore two podman
processes, ``kube play --start=false`` and ``pod start``, between which the pod's pids
cgroup is capped (found by the id ``kube play`` printed): the pod is not looked up
beforehand, and whether a local image exists is asked once per worker process (and
again after a failed play, so an image removed since still gets a plain message).
Every call is an argv list, never a shell.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from shared.config import Settings
from shared.env.received import Look, Looks
from shared.errors import LaunchFailed, TransientError
from shared.policy.model import Resolved
from shared.store.logtail import MAX_CHUNK, log_budget
from shared.store.tasks import TaskStore
from shared.task import manifest
from shared.task.limits import Maxima
from shared.task.manifest import SELECTOR
from shared.task.workload import Workload, with_default_image
from workers.launchers.base import CONTAINER_NEVER_STARTS, Change, Hooks, Outcome
from workers.launchers.common.group import first_failed, group_outcome
from workers.launchers.common.stream import OutputStream
from workers.launchers.podman import conf
from workers.launchers.podman.output import ContainerLog, Place, Places
from workers.launchers.podman.uids import UidPool

# The node a podman task runs on (this launch worker's host), as a per-node default's glob
# (``when: {node: ...}``) sees it.
HOST = socket.gethostname()
LOG_FILE_MIN = 64 * 1024  # the least conmon takes (its read buffer): see podman-run(1), --log-opt
# What podman starts every container with, unless the env sets it (``received``).
PODMAN_OWN = ("PATH", "HOME", "HOSTNAME", "TERM", "container")
# podman's messages for trouble that a later attempt can get past.
TRANSIENT = re.compile(r"timed? ?out|timeout|database is locked|locked|temporarily unavailable|"
                       r"try again|connection refused|cannot connect|no space left", re.I)
NAME_IN_USE = re.compile(r"is in use|already exists", re.I)
NO_SUCH = re.compile(r"no such (container|pod|object)|no container with name|not found", re.I)
NOISE = re.compile(r"^failed to connect to syslog|level=(warning|info|debug)")
FINISHED = {"exited", "stopped"}
POD_REMOVED = "the pod was removed while the task ran"
STOP_SECONDS = 0  # a cancelled pod is killed at once: its home and /tmp go within seconds
NOT_STARTED = {"created", "configured", "initialized"}
# Where a pod's cgroup lies under each of podman's cgroup managers (cgroupfs, systemd),
# named by the pod's id, and the hierarchies a pids controller is mounted at (cgroup v1,
# then v2): the pod's limit file is found by a look, not by a podman process.
POD_CGROUPS = ("/libpod_parent/{id}", "/machine.slice/machine-libpod_pod_{id}.slice")
PIDS_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")
PLAYED_POD = re.compile(r"^Pod:\n([0-9a-f]{64})$", re.M)
# The pod's volumes: the manifest's scratch volumes (emptyDir) and its files' ConfigMap,
# each played as ``<pod>-<name>``.  Podman's rule for a name, and the most a directory
# name under its volume store may hold.
POD_VOLUMES = ("work", "tmp", "files")
PODMAN_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
MAX_VOLUME_NAME = 255
OWN_VOLUME = re.compile(r"^(taskenv-[a-z0-9-]+-r\d+)-(?:work|tmp|files)$")
LEGACY_VOLUMES = ("work", "tmp")  # the volumes every pod shared before they were its own
SWEEP_SECONDS = 60.0  # how often the reconciler's listing looks for what dead workers left
ORPHAN_AFTER = 120.0  # a volume or uid claim of no pod, this old, is left over, not new
NO_VOLUME = re.compile(r"no (such )?volume", re.I)
LOG_DRIVER = "k8s-file"  # a file per container on the host, which the reconciler reads
READ_CHUNK = MAX_CHUNK  # of one container's log file, read at once (one append to Redis)
PASS_BYTES = 8 * READ_CHUNK  # of all containers' log files, read in one pass (about)

log = logging.getLogger(__name__)


class PodmanLauncher:
    name = "podman"
    sweep_every_pass = False
    never_starts: frozenset[str] = CONTAINER_NEVER_STARTS
    pids_roots: tuple[str, ...] = PIDS_ROOTS

    def __init__(self, settings: Settings, binary: str = "podman",
                 timeout: float = 120.0) -> None:
        self.image = settings.podman_image
        self.manifest_settings = manifest.ManifestSettings.from_settings(settings)
        self.binary = binary
        self.timeout = timeout
        self.listed: dict[tuple[str, int], Outcome] = {}  # the last listing's view
        self.images_present: set[str] = set()  # local images found; forgotten on a failed play
        self.log_budget = log_budget(settings.log_max_bytes, TaskStore.LOG_LIMIT)
        self.log_file_max = max(LOG_FILE_MIN, 64 * self.log_budget)
        # The last listing's view of each replica container: outcome and when it exited.
        self.replica_seen: dict[tuple[str, int], dict[int, tuple[Outcome, float | None]]] = {}
        self.first_failure: dict[tuple[str, int], int] = {}  # by task: its first failed replica
        # Every podman command runs with the host's configuration plus the task limits.
        self.maxima = Maxima.from_settings(settings)
        limits_conf = conf.write(Path(settings.work_dir).resolve() / "podman", self.maxima)
        self.env = {**os.environ, "CONTAINERS_CONF": str(limits_conf)}
        # Each live pod's host uid, shared by the host's workers and reconciler.
        self.uids = UidPool(Path(settings.work_dir).resolve() / "podman" / "uids",
                            settings.task_uid_first, settings.task_uid_count)
        self.unrecorded: dict[tuple[str, int], Change] = {}  # ends reported, not yet applied
        self.removed: set[tuple[str, int]] = set()  # pods removed here: their absence is no news
        self.to_remove: set[tuple[str, int]] = set()  # ended pods a removal failed for
        self.live_pods: set[str] = set()  # the pods of the last listing
        self.swept_at: float | None = None  # when the last sweep ran (None: never)
        self.legacy_seen: set[str] = set()  # an older version's shared volumes, reported once
        # Where each container's log was read up to (kept on disk), and the readers of the
        # containers that run (in memory: a redactor's held-back tail, an unfinished line).
        self.places = Places(Path(settings.work_dir).resolve() / "podman" / "output")
        self.readers: dict[str, ContainerLog] = {}
        self.no_log_file: set[str] = set()  # containers whose log is no file (asked once)
        self.workloads: dict[tuple[str, int], Workload] = {}  # of the running tasks read
        self.turn = 0  # where the next output_since() begins among the running tasks

    # -- the Launcher interface ------------------------------------------------------

    def launch(self, workload: Workload, hooks: Hooks) -> Outcome:
        workload = with_node_values(self.with_image(workload))
        self._play(workload)
        hooks.started()
        return Outcome("running")

    def observe(self, workload: Workload) -> Outcome | None:
        """The group's outcome from each replica's container (None: there is none)."""
        found = [self._inspect(self.container_name(workload, k))
                 for k in range(workload.replicas)]
        if all(state is None for state in found):
            return None
        if workload.replicas == 1:
            return state_outcome(found[0]) if found[0] is not None else None
        return group_outcome([state_outcome(s) if s is not None else None for s in found],
                             [_exited_at(s) for s in found],
                             self.first_failure.get((workload.task_id, workload.revision)))

    def changes(self) -> list[Change]:
        """What differs between this listing of taskenv's containers and the last one,
        and each end reported before that the reconciler has not recorded yet (it is
        reported until :meth:`applied` says it is: the pod is kept until then).

        A task of several replicas one of which failed has the others stopped at once
        (``pod stop``: their logs stay until the pod is removed), and is listed again,
        so the failure is reported with every replica's exit code.  A pod this launcher
        removed is not reported gone.  About once a minute the volumes and uid claims of
        pods no longer there are removed (:meth:`sweep`)."""
        self._collect_removed()
        before = self.listed
        now = self.listing(self.listed)
        if self._stop_failed_groups():
            now = self.listing(self.listed)
        self.listed = now
        gone = [Change(*key, None, POD_REMOVED) for key in before
                if key not in now and key not in self.removed]
        self.removed &= set(now)  # gone now, as it was to be: forgotten
        found = gone + [Change(*key, outcome) for key, outcome in now.items()
                        if before.get(key) != outcome]
        for change in found:
            key = (change.task_id, change.revision)
            if change.outcome is None or change.outcome.state != "running":
                self.unrecorded[key] = change
            else:
                self.unrecorded.pop(key, None)
        reported = {(c.task_id, c.revision) for c in found}
        again = [c for key, c in self.unrecorded.items() if key not in reported
                 and (c.outcome is None) == (key not in now)]
        self.unrecorded = {key: c for key, c in self.unrecorded.items()
                           if key in reported or c in again}
        self._sweep_now_and_then()
        return found + again

    def seen(self, workload: Workload) -> Outcome | None:
        return self.listed.get((workload.task_id, workload.revision))

    def applied(self, change: Change) -> None:
        """The reconciler has recorded ``change`` (or found it recorded): an ended pod has
        served its purpose (its output and outcome are in the task) and is removed now, with
        its volumes and its uid; a pod that is gone leaves its volumes, removed now too.
        Never raises: what could not be removed is tried again at the next listing."""
        key = (change.task_id, change.revision)
        if change.outcome is not None and change.outcome.state == "running":
            return
        self.unrecorded.pop(key, None)
        self.removed.add(key)
        try:
            self._remove_pod(run_name(*key), stop=change.outcome is not None)
        except Exception:  # podman busy: the next listing tries again
            self.to_remove.add(key)
            log.exception("podman: the pod of task %s r%s could not be removed", *key)

    def listing(self, known: dict[tuple[str, int], Outcome]) -> dict[tuple[str, int], Outcome]:
        """Every taskenv task's outcome, from one ``podman ps --all``: a task of several
        replicas is one outcome, from each replica container's (``group_outcome``)."""
        result = self.podman("ps", "--all", "--filter", f"label={SELECTOR}", "--format", "json")
        if result.returncode != 0:
            raise self._error("ps", result)
        seen: dict[tuple[str, int], dict[int, tuple[Outcome, float | None]]] = {}
        sizes: dict[tuple[str, int], int] = {}
        pods: set[str] = set()
        for container in json.loads(result.stdout or "[]") or []:
            pods.update(_pod_of(str(name)) for name in container.get("Names") or []
                        if REPLICA_CONTAINER.search(str(name)))
            found = _task_key(container)
            if found is None:
                continue
            key, index, replicas = found
            earlier = self.replica_seen.get(key, {}).get(index)
            outcome = self._listed_outcome(container, earlier[0] if earlier else known.get(key)
                                           if replicas == 1 else None)
            seen.setdefault(key, {})[index] = (outcome, _exited_at(container))
            sizes[key] = replicas
        self.replica_seen = seen
        self.live_pods = pods
        out: dict[tuple[str, int], Outcome] = {}
        for key, replicas in sizes.items():
            if replicas == 1:
                out[key] = seen[key][0][0] if 0 in seen[key] else Outcome("running")
                continue
            each = [seen[key].get(k) for k in range(replicas)]
            outcomes, ended = [e[0] if e else None for e in each], [e[1] if e else None
                                                                   for e in each]
            # The replica that failed before the others were stopped is the one named.
            if key not in self.first_failure:
                failed = first_failed(outcomes, ended)
                if failed is not None:
                    self.first_failure[key] = failed
            out[key] = group_outcome(outcomes, ended, self.first_failure.get(key))
        self.first_failure = {k: v for k, v in self.first_failure.items() if k in seen}
        return out

    def _stop_failed_groups(self) -> bool:
        """Stop every replica still running in a task another replica of which failed;
        True if any was stopped."""
        stopped = False
        for (task_id, revision), replicas in self.replica_seen.items():
            outcomes = [o for o, _ in replicas.values()]
            if any(o.state == "failed" for o in outcomes) and \
                    any(o.state == "running" for o in outcomes):
                pod = run_name(task_id, revision)
                log.info("task %s r%s: a replica failed; stopping the others", task_id,
                         revision)
                result = self.podman("pod", "stop", "--time", "0", pod)
                if result.returncode != 0 and not NO_SUCH.search(result.stderr):
                    raise self._error("pod stop", result)
                stopped = True
        return stopped

    def _listed_outcome(self, container: dict[str, Any], known: Outcome | None) -> Outcome:
        if container.get("State") not in FINISHED:
            return Outcome("running")
        code = int(container.get("ExitCode") or 0)
        if code == 0:
            return Outcome("succeeded", exit_code=0)
        if known is not None and known.state == "failed":
            return known  # inspected when it ended
        state = self._inspect(container["Names"][0])
        return state_outcome(state) if state else Outcome(
            "failed", exit_code=code, reason=f"container exited with {code}")

    def as_stored(self, text: str) -> str:
        """What :meth:`output_since` and :meth:`logs` give is as the log keeps it already
        (the steps' mark shown as text, the platform's lines marked)."""
        return text

    def output_since(self, workload_of: Callable[[str, int], Workload | None]
                     ) -> list[tuple[str, int, str]]:
        """What each running task's containers printed since the last call, as the log keeps
        it: at most :data:`READ_CHUNK` bytes of each container's log file, and about
        :data:`PASS_BYTES` in all, the tasks taken in turn from where the last call stopped
        (what is left waits in the files for the next).  ``workload_of`` is asked once for
        each task that runs (its secrets, its replicas).  Reads files on this host: no
        podman process, but one ``container inspect`` for each new task's log files."""
        running = [key for key, seen in self.listed.items() if seen.state == "running"]
        self.workloads = {k: w for k, w in self.workloads.items() if k in self.listed}
        # Pods removed elsewhere (a cancel, a restart's stop): their readers go too.
        self.readers = {n: r for n, r in self.readers.items() if _pod_of(n) in self.live_pods}
        first = self.turn % len(running) if running else 0
        out: list[tuple[str, int, str]] = []
        read = looked = 0
        for key in running[first:] + running[:first]:
            if read >= PASS_BYTES:
                break
            looked += 1
            workload = self.workloads.get(key) or workload_of(*key)
            if workload is None:
                continue
            self.workloads[key] = workload
            text = []
            for reader in self._readers(workload):
                text.append(reader.read(READ_CHUNK))
                read += reader.read_bytes
                if reader.read_bytes:
                    self.places.save(reader.name, reader.place)
            if "".join(text):
                out.append((*key, "".join(text)))
        self.turn = first + looked
        return out

    def logs(self, workload: Workload) -> str | None:
        """What each replica's container printed that was not read while it ran, read up to
        its share of the log's budget and no further (one huge line costs this worker what
        the budget does; past it, a line says so), as the log keeps it.  The readers' places
        are then forgotten.  A container whose log is no file (an older version's pod) is
        read whole with ``podman logs``, as far as the budget."""
        secrets = [v.value for v in workload.env if v.secret]
        budget = self.log_budget // workload.replicas
        readers = {r.name: r for r in self._readers(workload)}
        parts: list[str | None] = []
        for k in range(workload.replicas):
            name = self.container_name(workload, k)
            reader = readers.get(name)
            if reader is not None:
                parts.append(reader.rest(READ_CHUNK))
                continue
            stream = OutputStream(secrets, budget, k if workload.replicas > 1 else None)
            text = self._container_logs(name, budget)
            parts.append(None if text is None else stream.feed(text) + stream.finish())
        self._forget(workload.run_name)
        if all(part is None for part in parts):
            return None
        return "".join(part for part in parts if part)

    def _readers(self, workload: Workload) -> list[ContainerLog]:
        """A reader of each replica container's log file, from where it was read up to
        (this process's reader, else the place kept on disk, else the file's start); none
        for a container whose log is no file."""
        names = [self.container_name(workload, k) for k in range(workload.replicas)]
        places = {name: self.places.load(name) for name in names
                  if name not in self.readers and name not in self.no_log_file}
        unknown = [name for name, place in places.items() if place is None]
        for name, path in self._log_files(unknown).items():
            places[name] = Place(path) if path else None
        secrets = [v.value for v in workload.env if v.secret]
        budget = self.log_budget // workload.replicas
        for k, name in enumerate(names):
            place = places.get(name)
            if name in self.readers or place is None:
                continue
            stream = OutputStream(secrets, budget, k if workload.replicas > 1 else None,
                                  place.taken, place.cut)
            self.readers[name] = ContainerLog(name, place, stream)
        return [self.readers[name] for name in names if name in self.readers]

    def _log_files(self, names: list[str]) -> dict[str, str | None]:
        """Each container's log file (None: its log is no file, or it is not there yet),
        from one ``podman container inspect``."""
        if not names:
            return {}
        found = self.podman("container", "inspect", *names)
        files: dict[str, str | None] = dict.fromkeys(names)
        try:
            listed = json.loads(found.stdout or "[]") or []
        except ValueError:
            listed = []
        for container in listed:
            name = str(container.get("Name", ""))
            config = (container.get("HostConfig") or {}).get("LogConfig") or {}
            if name not in files:
                continue
            if config.get("Type") == LOG_DRIVER and config.get("Path"):
                files[name] = str(config["Path"])
            else:
                self.no_log_file.add(name)
        return files

    def _forget(self, pod: str) -> None:
        """The readers of the pod's containers, in memory and on disk."""
        for name in [n for n in self.readers if _pod_of(n) == pod]:
            del self.readers[name]
        self.no_log_file = {n for n in self.no_log_file if _pod_of(n) != pod}
        self.places.forget(pod)

    def _container_logs(self, name: str, budget: int) -> str | None:
        """``podman logs`` of a container, at most ``budget`` bytes and one more (to tell
        that there was more); None if podman has no such container."""
        # One pipe for both streams keeps the container's stdout and stderr in order.
        code, data = self.read_bounded(["logs", name], budget + 1)
        if code not in (0, None):
            return None
        return data.decode(errors="replace")

    def read_bounded(self, args: list[str], most: int) -> tuple[int | None, bytes]:
        """A podman command's exit code and at most ``most`` bytes of its output; a command
        that has more to say is stopped (its code is then None)."""
        try:
            proc = subprocess.Popen([self.binary, *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
        except FileNotFoundError:
            raise LaunchFailed(f"{self.binary} is not installed on this worker") from None
        assert proc.stdout is not None
        chunks: list[bytes] = []
        size = 0
        with proc:
            while size < most and (chunk := os.read(proc.stdout.fileno(), min(65536, most - size))):
                chunks.append(chunk)
                size += len(chunk)
            if size >= most:
                proc.kill()
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise TransientError(f"podman {args[0]} did not answer in "
                                     f"{self.timeout:g}s") from None
        return (None if size >= most else code), b"".join(chunks)

    def cancel(self, workload: Workload) -> None:
        """Stop the pod at once and remove it with its containers, its volumes and its uid;
        nothing if it is gone."""
        self._stop_and_remove(workload.run_name)
        self._forget(workload.run_name)
        self.remove_volumes(workload.run_name)
        if self.pod_exists(workload.run_name):  # a launch racing this one played it again
            raise TransientError(f"podman pod {workload.run_name} is still there")
        self.uids.release(workload.run_name)

    # -- what the launcher plays ---------------------------------------------------------

    def with_image(self, workload: Workload) -> Workload:
        """A task without an image of its own runs in the configured podman image."""
        return with_default_image(workload, self.image)

    def pod_manifest(self, workload: Workload, secret_name: str | None,
                     uid: int | None = None) -> dict[str, Any]:
        """The Pod podman plays: the Job's pod template, expanded as Kubernetes would, its
        volumes the pod's own (``<pod>-<volume>``) and its containers run as ``uid`` (the
        pod's from the host's pool when not given)."""
        job = manifest.to_dict(manifest.build(workload, self.manifest_settings).job)
        template = job["spec"]["template"]["metadata"]
        spec = manifest.to_dict(manifest.replicas_pod_spec(
            workload, secret_name, self.manifest_settings.limits(workload)))
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            expand_container(container)
        own_volumes(spec, workload.run_name)
        run_as(spec, self.uids.claim(workload.run_name) if uid is None else uid)
        metadata = {"name": workload.run_name, "labels": template.get("labels", {}),
                    "annotations": template.get("annotations", {})}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def render(self, workload: Workload, secret_name: str | None,
               uid: int | None = None) -> str:
        """The Pod, after the ConfigMap of the task's files if it has any: kube play makes
        the ConfigMap a volume of the same name, ``<pod>-files`` (removed with the pod,
        see ``remove``)."""
        docs = [self.pod_manifest(workload, secret_name, uid)]
        files = manifest.config_map(workload, self.manifest_settings)
        if files is not None:
            config_map = manifest.to_dict(files)
            config_map["metadata"]["name"] = volume_name(workload.run_name, "files")
            docs.insert(0, config_map)
        return yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)

    @staticmethod
    def volume_names(pod: str) -> list[str]:
        """Every volume podman makes for the pod: its home, its ``/tmp``, its files."""
        return [volume_name(pod, volume) for volume in POD_VOLUMES]

    def secret_payload(self, workload: Workload) -> bytes | None:
        """The secret variables as podman's ``secretKeyRef`` reads them: JSON, base64 values."""
        secret = manifest.build(workload, self.manifest_settings).secret
        if secret is None:
            return None
        data = dict(secret.data or {})
        for key, value in (secret.string_data or {}).items():
            data[key] = base64.b64encode(value.encode()).decode()
        return json.dumps(data).encode()

    def received(self, workload: Workload) -> Looks | None:
        """Each replica's env as its container was started with it: the container's own
        configuration (the pod spec's env over the image's ``ENV``), seen from outside,
        in one ``podman container inspect``; each value hashed at once (a secret's too)
        and never kept.  None when the containers are gone, or for a task of one replica
        (nothing to compare: it pays nothing)."""
        if workload.replicas == 1 and not workload.per_node:
            return None
        chosen = workload.node_env(HOST)
        names = {self.container_name(workload, k): k for k in range(workload.replicas)}
        found = self.podman("container", "inspect", *names)
        if found.returncode != 0:
            return None
        key = secrets.token_bytes(32)
        looks = []
        for container in json.loads(found.stdout or "[]") or []:
            replica = names.get(str(container.get("Name", "")))
            entries = (container.get("Config") or {}).get("Env") or []
            if replica is not None:
                env = dict(str(e).partition("=")[::2] for e in entries)
                looks.append(Look.of(replica, env, key, HOST,
                                     {n: env[n] for n in chosen if n in env}))
        return Looks(key, tuple(looks), backend_names=PODMAN_OWN) if looks else None

    def container_name(self, workload: Workload, replica: int = 0) -> str:
        """kube play's naming: ``<pod>-<container>``; replica k's container is ``task-k``."""
        return f"{workload.run_name}-{manifest.replica_container_name(replica, workload.replicas)}"

    # -- podman ----------------------------------------------------------------------

    def container_state(self, workload: Workload) -> dict[str, Any] | None:
        """``State`` from ``podman container inspect``; None if there is no such container."""
        return self._inspect(self.container_name(workload))

    def _inspect(self, container: str) -> dict[str, Any] | None:
        result = self.podman("container", "inspect", container)
        if result.returncode != 0:
            if NO_SUCH.search(result.stderr):
                return None
            raise self._error("container inspect", result)
        state: dict[str, Any] = json.loads(result.stdout)[0]["State"]
        return state

    def pod_exists(self, name: str) -> bool:
        result = self.podman("pod", "exists", name)
        if result.returncode in (0, 1):
            return result.returncode == 0
        raise self._error("pod exists", result)

    def remove(self, workload: Workload) -> None:
        """Remove the workload's pod and its containers (their logs go with them), its
        volumes and its uid, after a launch that failed (which is what is reported: what
        could not be removed is logged, and left to the sweep)."""
        try:
            self._remove_pod(workload.run_name)
        except (LaunchFailed, TransientError) as trouble:
            log.warning("podman: pod %s not removed: %s", workload.run_name, trouble)

    def _remove_pod(self, pod: str, stop: bool = True) -> None:
        """The pod removed (which takes the emptyDir volumes only this pod used, not the
        files' one), then whichever of its volumes are still there, then its uid.
        ``stop``: False when the pod is known gone (only its volumes may be left)."""
        if stop:
            self._stop_and_remove(pod)
        self.remove_volumes(pod)
        self.uids.release(pod)
        self._forget(pod)

    def _stop_and_remove(self, pod: str) -> None:
        """``pod stop --time 0`` (SIGKILL at once), then ``pod rm --force``; nothing if the
        pod is gone.

        Stopped first: ``pod rm --force`` of a pod whose infra container runs (every pod
        until it is stopped, even once its task containers have exited) now and then
        waits seconds for the pod's cgroup while the exit handlers of the containers it
        stops run (measured here: 0.3-0.7 s mostly, 3.4-4 s one time in three or four);
        a stopped pod's removal does not (0.3-1.1 s for both, each time)."""
        stopped = self.podman("pod", "stop", "--ignore", "--time", str(STOP_SECONDS), pod)
        if stopped.returncode != 0 and not NO_SUCH.search(stopped.stderr):
            raise self._error("pod stop", stopped)
        result = self.podman("pod", "rm", "--force", "--ignore", pod)
        if result.returncode != 0:
            raise self._error("pod rm", result)

    def remove_volumes(self, pod: str) -> None:
        """The pod's volumes that are left (one podman process, whatever is left); a volume
        some container still uses is not removed (never ``--force``)."""
        result = self.podman("volume", "rm", *self.volume_names(pod))
        trouble = [line for line in _podman_message(result.stderr).split("; ")
                   if line and not NO_VOLUME.search(line)]
        if result.returncode != 0 and trouble:
            log.warning("podman: volumes of pod %s left: %s", pod, "; ".join(trouble))

    def _collect_removed(self) -> None:
        """Pods whose removal failed in :meth:`applied`: tried again."""
        for key in list(self.to_remove):
            try:
                self._remove_pod(run_name(*key))
            except Exception:  # podman busy: the next listing tries again
                log.exception("podman: the pod of task %s r%s could not be removed", *key)
            else:
                self.to_remove.discard(key)

    def _sweep_now_and_then(self) -> None:
        now = time.monotonic()
        if self.swept_at is not None and now - self.swept_at < SWEEP_SECONDS:
            return
        self.swept_at = now
        try:
            self.sweep()
        except Exception:  # podman busy: the next sweep tries again
            log.exception("podman: the sweep of left-over volumes failed")

    def sweep(self, older_than: float = ORPHAN_AFTER) -> list[str]:
        """Remove what pods no longer there left (a worker that died before it removed
        them): their volumes, and their uid claims, once older than ``older_than``
        seconds (a launch between its claim and its play, or kube play between making a
        volume and the pod, is newer).  One ``volume ls``, then one ``volume rm`` if
        anything is left over; a volume in use is never removed.  An older version's
        shared ``work`` or ``tmp`` is reported, never mounted by a pod of this one, and
        left to the operator (another program's volume may have the name).  The volumes
        found left over (each removed unless a container uses it)."""
        listed = self.podman("volume", "ls", "--format", "json")
        if listed.returncode != 0:
            raise self._error("volume ls", listed)
        now = time.time()
        left: list[str] = []
        for volume in json.loads(listed.stdout or "[]") or []:
            name = str(volume.get("Name", ""))
            if name in LEGACY_VOLUMES and name not in self.legacy_seen:
                self.legacy_seen.add(name)
                log.warning("podman: volume %s is an older version's shared %s; no pod of "
                            "this version mounts it: remove it (podman volume rm %s) once "
                            "no older pod runs", name, name, name)
            owner = OWN_VOLUME.match(name)
            if owner is None or owner.group(1) in self.live_pods:
                continue
            made = _created_at(volume.get("CreatedAt"))
            if made is not None and now - made > older_than:
                left.append(name)
        if left:
            removed = self.podman("volume", "rm", *left)
            log.info("podman: left-over volumes of pods no longer there: %s%s",
                     ", ".join(left), "" if removed.returncode == 0 else
                     f" (not all removed: {_podman_message(removed.stderr)})")
        self.uids.release_stale(self.live_pods, older_than, now)
        self.places.stale(self.live_pods, older_than, now)
        return left

    def podman(self, *args: str, stdin: bytes | None = None,
               stderr: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
        try:
            raw = subprocess.run([self.binary, *args], input=stdin, stdout=subprocess.PIPE,
                                 stderr=stderr, timeout=self.timeout, check=False, env=self.env)
        except FileNotFoundError:
            raise LaunchFailed(f"{self.binary} is not installed on this worker") from None
        except subprocess.TimeoutExpired:
            raise TransientError(f"podman {args[0]} did not answer in {self.timeout:g}s") from None
        return subprocess.CompletedProcess(
            raw.args, raw.returncode, _text(raw.stdout), _text(raw.stderr))

    def _play(self, workload: Workload) -> None:
        """Play the revision's pod, or adopt it if an earlier or concurrent launch made it."""
        self._check_image(workload.image)
        result = self._play_with_secret(workload)
        if result.returncode == 0:
            self._start(workload, played_pod_id(result.stdout))
            return
        # Asked only now: a first launch needs no lookup, and a play refused because the
        # pod exists names it.
        if NAME_IN_USE.search(result.stderr) and self.pod_exists(workload.run_name):
            self._adopt(workload)
            return
        self.remove(workload)  # a failed play can leave a half-made pod
        self.images_present.discard(workload.image)
        self._check_image(workload.image)  # removed since it was found: say so plainly
        raise self._error("kube play", result)

    def _play_with_secret(self, workload: Workload) -> subprocess.CompletedProcess[str]:
        """``kube play`` with the secret variables in a podman secret that lives for the play."""
        payload = self.secret_payload(workload)
        secret = None
        if payload is not None:
            secret = f"{manifest.secret_name(workload)}-{uuid.uuid4().hex[:8]}"
            self._create_secret(secret, payload)
        try:
            with private_file(self.render(workload, secret)) as path:
                return self.play_file(path)
        finally:
            if secret is not None:
                self._remove_secret(secret)

    def _adopt(self, workload: Workload) -> None:
        """The revision's pod exists (a redelivery, a retry): start it if need be, never twice."""
        state = self.container_state(workload)
        if state is not None and state["Status"] in NOT_STARTED:
            self._start(workload)

    def _start(self, workload: Workload, pod_id: str | None = None) -> None:
        """Start the played pod once its processes are capped (never before: ``kube play``
        takes no pids limit from a manifest, so the pod is made stopped, capped, then
        started)."""
        self.cap_processes(workload, pod_id)
        result = self.podman("pod", "start", workload.run_name)
        if result.returncode != 0:
            self.remove(workload)  # a pod that cannot start never will: leave nothing
            raise self._error("pod start", result)

    def cap_processes(self, workload: Workload, pod_id: str | None = None) -> None:
        """The pod's pids cgroup holds its replicas' processes and threads to the task
        limit each (and the pod's pause process): a fork bomb stops there."""
        limit, path = self._pids_max(workload, pod_id)
        if limit is None:
            self.remove(workload)
            raise LaunchFailed(f"the pod's cgroup ({path or 'none'}) has no pids controller "
                               "to hold the task to its processes limit "
                               "(TASKENV_TASK_MAX_PROCESSES): run podman as root with "
                               "cgroupfs or systemd cgroups")
        limit.write_text(f"{self.maxima.pids * workload.replicas + 1}\n")

    def _pids_max(self, workload: Workload, pod_id: str | None) -> tuple[Path | None, str]:
        """The pod's ``pids.max`` and its cgroup's path: where podman's cgroup managers put
        a pod of that id (a look at the filesystem), else where ``pod inspect`` says (a
        podman process: a launch that adopted a pod, or a manager placing pods elsewhere)."""
        for pattern in POD_CGROUPS if pod_id else ():
            if (limit := self._pids_file(path := pattern.format(id=pod_id))) is not None:
                return limit, path
        found = self.podman("pod", "inspect", "--format", "{{.CgroupPath}}", workload.run_name)
        if found.returncode != 0:
            raise self._error("pod inspect", found)
        path = found.stdout.strip()
        return self._pids_file(path), path

    def _pids_file(self, cgroup: str) -> Path | None:
        for root in self.pids_roots:
            limit = Path(f"{root}{cgroup}") / "pids.max"
            if cgroup.startswith("/") and limit.exists():
                return limit
        return None

    def play_file(self, path: Path) -> subprocess.CompletedProcess[str]:
        """Each container's log file on this host is capped (conmon truncates it past the
        size and goes on writing): a step printing for ever fills no disk.  The cap is
        64 times the budget read of it at the end, so output cut on the host was far
        past what the log keeps anyway; what is read is then the start of what the
        host kept."""
        return self.podman("kube", "play", "--start=false", "--quiet",
                           "--log-driver", LOG_DRIVER,
                           "--log-opt", f"max-size={self.log_file_max}", str(path))

    def _check_image(self, image: str) -> None:
        """A local image that is missing cannot be pulled: say so instead of trying.

        Once found, an image is not asked about again by this worker process until a
        play fails (each question is a podman process of its own).
        """
        if not image.startswith("localhost/") or image in self.images_present:
            return
        result = self.podman("image", "exists", image)
        if result.returncode == 1:
            raise LaunchFailed(f"image {image} is not in podman's local store "
                               "(deploy/image/build.sh builds the default one)")
        if result.returncode != 0:
            raise self._error("image exists", result)
        self.images_present.add(image)

    def _create_secret(self, name: str, payload: bytes) -> None:
        result = self.podman("secret", "create", name, "-", stdin=payload)
        if result.returncode != 0:
            raise self._error("secret create", result)

    def _remove_secret(self, name: str) -> None:
        """Drop the podman secret: the container holds its own copy of the values now."""
        result = self.podman("secret", "rm", name)
        if result.returncode != 0:
            log.warning("podman secret %s could not be removed: %s", name,
                        _podman_message(result.stderr))

    def _error(self, what: str, result: subprocess.CompletedProcess[str]) -> Exception:
        message = _podman_message(result.stderr) or f"exit status {result.returncode}"
        if TRANSIENT.search(message):
            return TransientError(f"podman {what}: {message}")
        return LaunchFailed(f"podman {what}: {message}")


def state_outcome(state: dict[str, Any]) -> Outcome:
    """The outcome a container's inspected ``State`` tells."""
    if state["Status"] not in FINISHED:
        return Outcome("running")
    code = int(state["ExitCode"])
    if code == 0:
        return Outcome("succeeded", exit_code=0)
    reason = "killed: out of memory" if state.get("OOMKilled") else f"exited with {code}"
    if state.get("Error"):
        reason += f" ({state['Error']})"
    return Outcome("failed", exit_code=code, reason=f"container {reason}")


REPLICA_CONTAINER = re.compile(rf"-{manifest.CONTAINER_NAME}(?:-(\d+))?$")


def _task_key(container: dict[str, Any]) -> tuple[tuple[str, int], int, int] | None:
    """The task id and revision a listed container runs, its replica's index and how many
    replicas the task has (None: not a task's container)."""
    labels = container.get("Labels") or {}
    names = container.get("Names") or []
    task_id, revision = labels.get(manifest.LABEL_TASK_ID), labels.get(manifest.LABEL_REVISION)
    replicas = str(labels.get(manifest.LABEL_REPLICAS) or "1")
    found = next((m for n in names if (m := REPLICA_CONTAINER.search(str(n)))), None)
    if found is None or not task_id or not str(revision or "").isdigit() \
            or not replicas.isdigit():
        return None
    index = int(found.group(1) or 0)
    if (found.group(1) is None) != (replicas == "1") or index >= int(replicas):
        return None
    return (str(task_id), int(str(revision))), index, int(replicas)


def _exited_at(found: dict[str, Any] | None) -> float | None:
    """When a listed or inspected container exited, if podman says (None: it has not)."""
    if not found:
        return None
    at = found.get("ExitedAt")
    return float(at) if isinstance(at, (int, float)) and at > 0 else None


def _pod_of(container: str) -> str:
    """The pod a kube-played task container belongs to (``<pod>-task[-k]``)."""
    found = REPLICA_CONTAINER.search(container)
    return container[:found.start()] if found else container


def _created_at(text: object) -> float | None:
    """Epoch seconds of podman's ``CreatedAt`` (RFC 3339, nanoseconds); None if unreadable."""
    if not isinstance(text, str):
        return None
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    if found is None:
        return None
    zone = "+00:00" if found.group(2) == "Z" else found.group(2)
    return datetime.fromisoformat(found.group(1) + zone).timestamp()


def volume_name(pod: str, volume: str) -> str:
    """The name podman gives the pod's ``volume``: the pod's own (``<pod>-<volume>``)."""
    name = f"{pod}-{volume}"
    if not PODMAN_NAME.fullmatch(name) or len(name) > MAX_VOLUME_NAME:
        raise LaunchFailed(f"podman cannot name a volume {name!r}")
    return name


def own_volumes(spec: dict[str, Any], pod: str) -> None:
    """Name every volume of the Pod spec ``<pod>-<name>``, in its volumes and in every
    container's mounts alike; a ConfigMap volume's ConfigMap too, as kube play names
    the volume after the ConfigMap (the caller names the ConfigMap the same)."""
    renamed: dict[str, str] = {}
    for volume in spec.get("volumes") or []:
        own = renamed[volume["name"]] = volume_name(pod, volume["name"])
        volume["name"] = own
        if "configMap" in volume:
            volume["configMap"]["name"] = own
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        for mount in container.get("volumeMounts") or []:
            mount["name"] = renamed[mount["name"]]


def run_as(spec: dict[str, Any], uid: int) -> None:
    """Every container of the Pod spec (the files' init container too: it writes the home
    the steps use) runs as ``uid``, its group the same number."""
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        context = container.setdefault("securityContext", {})
        context["runAsUser"] = context["runAsGroup"] = uid


def played_pod_id(stdout: str) -> str | None:
    """The id of the pod ``kube play`` made, from what it printed (``Pod:`` then the id)."""
    found = PLAYED_POD.search(stdout)
    return found.group(1) if found else None


def run_name(task_id: str, revision: int) -> str:
    """The pod a task revision runs in: ``Workload.run_name``'s form."""
    return f"taskenv-{task_id[:20]}-r{revision}"


def expand_container(container: dict[str, Any]) -> None:
    """Expand env values, command and args in place, in the order Kubernetes does."""
    known: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            var["value"] = manifest.kube_expand(var["value"] or "", known.get)
            known[var["name"]] = var["value"]
        # a valueFrom variable is not expanded, and left out of ``known`` on purpose:
        # a reference to a secret must not copy its value into the manifest
    for key in ("command", "args"):
        if container.get(key):
            container[key] = [manifest.kube_expand(part, known.get) for part in container[key]]


@contextmanager
def private_file(text: str) -> Iterator[Path]:
    """A file only this user can read, removed on exit."""
    fd, name = tempfile.mkstemp(prefix="taskenv-pod-", suffix=".yaml")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        yield Path(name)
    finally:
        os.unlink(name)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", errors="replace") if raw else ""


def _podman_message(stderr: str, limit: int = 2000) -> str:
    """What podman said went wrong, without its noise (syslog and retry warnings)."""
    lines = [line.removeprefix("Error: ") for line in stderr.splitlines()
             if line.strip() and not NOISE.search(line)]
    return "; ".join(lines)[-limit:]


def with_node_values(workload: Workload) -> Workload:
    """The workload with the platform's per-node defaults this host gives it (for names its
    resolved env does not hold), as variables of the pod spec."""
    chosen = workload.node_env(HOST)
    if not chosen:
        return workload
    return dataclasses.replace(workload, env=(*workload.env, *(
        Resolved(name, value, "node") for name, value in chosen.items())))

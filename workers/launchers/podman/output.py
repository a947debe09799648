"""A container's output read from its log file on the host while it runs.

Podman's ``k8s-file`` log driver (the launcher plays every pod with it) has conmon write
each container's output to one file, a record a line: ``<time> <stream> <F|P> <text>``,
``P`` for a piece of a line longer than conmon's buffer (8 KiB), whose rest follows in
the next record.  The reconciler, on the same host as podman, reads the file from where
it last stopped: a bounded number of bytes a read, whole records only (a record being
written waits for the next read), with no podman process.  Where it stopped is kept in a
small file of its own beside the pod's uid claims (``<work dir>/podman/output/``), so a
reconciler that restarts goes on from there rather than storing the output twice.

What is read goes through :class:`~workers.launchers.common.stream.OutputStream`: the
step's mark shown as text, secrets hidden on the stream, each replica's lines prefixed, the
budget of the log kept.  The redactor's held-back tail and a replica's unfinished line are
kept in memory only: a reconciler that restarts loses them (a few characters that could
begin a secret, one unfinished line), never more.

Conmon replaces the file once it reaches the launcher's cap (``--log-opt max-size``): a
file found shorter than where the reader stopped, or another file at that path, is read
from its start, after a line of the platform's saying the host dropped output there.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.task.manifest import CONTAINER_NAME
from workers.launchers.common.stream import OutputStream

CONTAINER = re.compile(rf"-{CONTAINER_NAME}(?:-\d+)?$")  # after the pod's name: a replica's
HOST_CUT = ("taskenv: output lost here: podman's log file of the container reached its "
            "size cap and was started anew before this part was read")


def records(data: bytes) -> tuple[bytes, int]:
    """The output held by the whole records of ``data`` (a piece of a k8s-file log) and the
    bytes those records take; a record without its line end is left for the next read."""
    end = data.rfind(b"\n") + 1
    out: list[bytes] = []
    for record in data[:end].split(b"\n")[:-1]:
        parts = record.split(b" ", 3)
        if len(parts) < 3:
            continue  # no record of conmon's
        out.append(parts[3] if len(parts) == 4 else b"")
        if not parts[2].startswith(b"P"):
            out.append(b"\n")
    return b"".join(out), end


@dataclass
class Place:
    """Where a container's log was read up to: its file, the offset in it, that file's
    inode, and how much of the budget the output read took."""

    path: str
    offset: int = 0
    inode: int | None = None
    taken: int = 0
    cut: bool = False

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "offset": self.offset, "inode": self.inode,
                           "taken": self.taken, "cut": self.cut})

    @classmethod
    def from_json(cls, text: str) -> Place:
        found: dict[str, Any] = json.loads(text)
        return cls(str(found["path"]), int(found.get("offset") or 0), found.get("inode"),
                   int(found.get("taken") or 0), bool(found.get("cut")))


@dataclass
class ContainerLog:
    """One container's log file, read from where the last read stopped."""

    name: str  # the container's
    place: Place
    stream: OutputStream
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    read_bytes: int = 0  # of the file, by the last read

    def read(self, most: int) -> str:
        """The output added since the last read, from at most ``most`` bytes of the file,
        as the log keeps it."""
        self.read_bytes = 0
        if self.stream.cut:
            return ""
        try:
            with open(self.place.path, "rb") as log:
                shown = self._restarted(os.fstat(log.fileno()))
                log.seek(self.place.offset)
                data = log.read(most)
        except FileNotFoundError:
            return ""
        payload, used = records(data)
        self.place.offset += used
        self.read_bytes = used
        shown += self.stream.feed(self.decoder.decode(payload))
        self.place.taken, self.place.cut = self.stream.taken, self.stream.cut
        return shown

    def rest(self, most: int) -> str:
        """Everything left in the file, a read of at most ``most`` bytes at a time, and what
        the stream held back: the container has ended."""
        parts = []
        while True:  # until the end of the file, or of the budget
            parts.append(self.read(most))
            if not self.read_bytes or self.stream.cut:
                break
        parts.append(self.stream.feed(self.decoder.decode(b"", final=True)))
        parts.append(self.stream.finish())
        return "".join(parts)

    def _restarted(self, stat: os.stat_result) -> str:
        """Conmon started the file anew (its cap): read it from its start, saying so."""
        if self.place.inode is None:
            self.place.inode = stat.st_ino
            return ""
        if stat.st_ino == self.place.inode and stat.st_size >= self.place.offset:
            return ""
        self.place.inode, self.place.offset = stat.st_ino, 0
        self.decoder.reset()
        return self.stream.say(HOST_CUT)


class Places:
    """Where each container's log was read up to, one file each in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, container: str) -> Place | None:
        try:
            return Place.from_json((self.root / f"{container}.json").read_text())
        except (OSError, ValueError, KeyError):
            return None

    def save(self, container: str, place: Place) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{container}.json.tmp"
        tmp.write_text(place.to_json())
        tmp.replace(self.root / f"{container}.json")

    def forget(self, pod: str) -> None:
        """The places of the pod's containers (``<pod>-task``, ``<pod>-task-<k>``)."""
        for path in self.root.glob(f"{pod}-*.json"):
            path.unlink(missing_ok=True)

    def stale(self, live: set[str], older_than: float, now: float) -> list[str]:
        """Remove the places of pods not in ``live`` last written over ``older_than``
        seconds ago (a reconciler that stopped before the end was recorded); their names."""
        gone = []
        for path in self.root.glob("*.json"):
            pod = CONTAINER.sub("", path.stem)
            try:
                old = now - path.stat().st_mtime > older_than
            except OSError:
                continue
            if pod not in live and old:
                path.unlink(missing_ok=True)
                gone.append(path.stem)
        return gone

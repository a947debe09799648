"""Runtime directories for the tests, built from what the host has: real root filesystem
trees a sandbox can take its system directories from.

* :func:`busybox_runtime`: a merged-/usr tree holding Debian's static busybox and one
  link per applet (the podman runtime image's content): no Python, no loader.
* :func:`host_overlay_runtime`: the host's ``/usr`` (its python3 and torch included)
  under an overlay whose upper layer adds a marker file, so a step that reads the marker
  proves that it ran the runtime's tree, not the host's, at no copy's cost.

Each tree carries :data:`MARKER` naming it.  They are made readable by every user, as a
runtime directory must be for the task's unprivileged user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARKER = "usr/share/taskenv-runtime/name"  # relative to the runtime's root
BUSYBOX = "/bin/busybox"
MERGED = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
# What the loader and TLS need of /etc, as the sandbox binds it.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "localtime")


@contextlib.contextmanager
def public_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory every user may enter (pytest's own are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def mark(root: Path, name: str) -> None:
    marker = root / MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(name + "\n")
    for path in (marker, marker.parent):
        path.chmod(0o755 if path.is_dir() else 0o644)


def busybox_runtime(root: Path, name: str) -> Path:
    """A busybox tree at ``root``: ``usr/bin/busybox``, a link per applet, merged /usr."""
    if not os.path.exists(BUSYBOX):
        raise RuntimeError("busybox_runtime needs Debian's busybox-static (make test installs it)")
    for sub in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for link, target in MERGED.items():
        (root / link).symlink_to(target)
    shutil.copy2(BUSYBOX, root / "usr/bin/busybox")
    applets = subprocess.run([BUSYBOX, "--list-full"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        path = root / applet
        if "/" in applet and not path.exists() and not path.is_symlink():
            path.symlink_to("/usr/bin/busybox")
    mark(root, name)
    return root


@contextlib.contextmanager
def host_overlay_runtime(root: Path, name: str) -> Iterator[Path]:
    """The host's /usr at ``root/usr`` through an overlay (root only), plus the marker;
    unmounted on exit."""
    upper, work = root.parent / f"{root.name}.upper", root.parent / f"{root.name}.work"
    for path in (root / "usr", root / "etc", upper, work):
        path.mkdir(parents=True)
    for link, target in MERGED.items():
        (root / link).symlink_to(target)
    for entry in ETC:
        source = Path("/etc") / entry
        if source.is_dir():
            shutil.copytree(source, root / "etc" / entry, symlinks=True)
        elif source.exists():
            shutil.copy2(source, root / "etc" / entry)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir=/usr,upperdir={upper},workdir={work}", str(root / "usr")],
                   check=True)
    try:
        mark(root, name)
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root / "usr")], check=False)

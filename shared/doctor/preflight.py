"""The pre-flight report: the task's scripts, read statically, against its resolved env.

Three findings, each naming the file and the lines: one finding per variable and script
(and function, for a read inside one), however many times and lines the script reads it:

- a read the resolved env does not satisfy and the script has no default for (the job
  would die with a ``KeyError``, or run on ``None``), with the resolved names it may have
  meant: a warning, or an error where the task or a policy asks for ``strict_env``;
- a variable the task sets that no script reads (a possible typo on either side);
- a read satisfied by a platform or project default, with the layer that set it.

Variables that only exist at run time (the platform's identity, torchrun's and the
schedulers' per-replica variables, the process basics such as ``PATH``) are known and
never reported missing.  Variables the built-in catalog documents are read by libraries
(NCCL, CUDA, PyTorch...), not by the scripts: they are never reported as unread.

The work is bounded per call as per file: the files are read in order, and reading stops
at the first file past the task's file limits (``files.max_count``, ``files.max_bytes``),
which is named; none after it is read.  A script past the reader's budget is named as
too complex (``doctor.too_complex``, a warning whatever ``strict_env`` says).  While a
script is left unread, no variable is said to be unread: it may be read there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from shared.doctor.advice import likely
from shared.doctor.catalog import Catalog, builtin
from shared.doctor.scripts import Read, Reading, read
from shared.errors import Problem
from shared.file_limits import FileLimits, size

MISSING = "doctor.script_unset"
UNREAD = "doctor.script_unread"
UNREADABLE = "doctor.script_unreadable"
TOO_COMPLEX = "doctor.too_complex"
RUNTIME = (
    "TASK_*",  # the platform's identity variables
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_*", "PET_*",
    "OMPI_COMM_WORLD_*", "PMI_*", "SLURM_*", "SKYPILOT_*", "JOB_COMPLETION_INDEX",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "KUBERNETES_*", "HOSTNAME",
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TERM", "LANG",
    "LC_*", "TZ", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_*", "IFS", "PS1",
    "BASH_*", "RANDOM", "SECONDS", "LINENO", "UID", "EUID", "PPID", "HOSTTYPE", "OSTYPE",
)
MAX_FINDINGS = 200  # per kind: a report's size never depends on the scripts' size
MAX_LINES_SHOWN = 10  # in one finding's message; its ``lines`` has every line


@lru_cache(maxsize=8192)
def runtime_only(name: str) -> bool:
    """A variable the container gets at run time, whatever the task sets."""
    return any(fnmatchcase(name, pattern) for pattern in RUNTIME)


@lru_cache(maxsize=4096)
def _guesses(name: str, known: tuple[str, ...]) -> list[str]:
    """:func:`likely` across families, abbreviations too; remembered, since a console
    preview asks the same questions of the same scripts at every keystroke."""
    return likely(name, known, same_family=False, abbreviations=True)


@dataclass
class Report:
    """What the doctor found in the task's scripts."""

    scripts: list[dict[str, Any]] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)
    unread: list[dict[str, Any]] = field(default_factory=list)
    from_defaults: list[dict[str, Any]] = field(default_factory=list)
    unknowable: list[dict[str, Any]] = field(default_factory=list)
    strict: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"strict": self.strict, "scripts": self.scripts, "missing": self.missing,
                "unread": self.unread, "from_defaults": self.from_defaults,
                "unknowable": self.unknowable}

    def problems(self) -> list[Problem]:
        """The findings that need a person: missing reads, unread variables, scripts
        the doctor could not read."""
        found = [Problem(rule=MISSING, variable=m["name"], message=m["message"])
                 for m in self.missing]
        found += [Problem(rule=UNREAD, variable=u["name"], message=u["message"])
                  for u in self.unread]
        for s in self.scripts:
            if s.get("too_complex"):
                found.append(Problem(
                    rule=TOO_COMPLEX, field=s["path"], limit=s.get("limit"),
                    message=f"{s['path']} is too complex for the doctor to read: "
                            f"{s['too_complex']}; it did not read it (the task goes on)"))
            elif s.get("rule"):  # past the task's file limits: the error says it all
                found.append(Problem(rule=UNREADABLE, field=s["path"], limit=s["limit"],
                                     message=f"{s['path']}: {s['error']}"))
            elif s.get("error"):
                found.append(Problem(rule=UNREADABLE, field=s["path"],
                                     message=f"{s['path']}: {s['error']}; the doctor did not "
                                             "read it"))
        return found


def preflight(files: Iterable[Mapping[str, Any]], resolved: Sequence[Mapping[str, Any]],
              catalog: Catalog, strict: bool = False, limits: FileLimits | None = None
              ) -> Report:
    """The report for ``files`` (``{path, content}``) against the resolved env (records'
    ``resolved`` entries: name, source, scope).  ``limits``: the task's file limits; the
    first file past them stops the reading (the task's defaults if not given)."""
    report = Report(strict=strict)
    limits = limits or FileLimits()
    by_name = {v["name"]: v for v in resolved}
    readings: list[tuple[str, Reading]] = []
    complete = True
    listed = list(files)
    total = 0
    for index, f in enumerate(listed):
        path, content = str(f.get("path", "")), f.get("content")
        total += size(str(f.get("content", "")))  # as the task's file limits count them
        if index >= limits.max_files or total > limits.max_bytes:
            report.scripts.append(_past_limits(path, index, len(listed), limits, total))
            complete = False
            break
        if not isinstance(content, str):
            continue
        reading = read(path, content)
        complete = complete and reading.complete
        if reading.language is None:
            continue
        readings.append((path, reading))
        report.scripts.append(_summary(path, reading))
    if not readings:
        return report
    own = set().union(*(r.sets for _, r in readings))
    for path, reading in readings:
        # Most reads are of a name the task sets itself: settle those by name, at once.
        worth = {n for n in reading.names
                 if by_name.get(n, {}).get("source") in (None, "default", "protected")}
        judged = _Judged()
        for found in reading.reads:
            if found.name in worth:
                _judge(judged, found, by_name, own)
        judged.into(report, path)
        seen: set[tuple[int, str]] = set()
        for u in reading.unknowable:
            if (u.line, u.expression) in seen:  # one line, one finding
                continue
            seen.add((u.line, u.expression))
            report.unknowable.append({
                "path": path, "line": u.line, "expression": u.expression,
                "message": f"{path} line {u.line} reads a variable whose name is built at "
                           f"run time ({u.expression}): the doctor cannot tell which"})
    read_names = set().union(*(r.names for _, r in readings))
    if complete:  # a script left unread may read any of them
        _unread(report, resolved, read_names, catalog,
                unknowable=any(r.unknowable for _, r in readings))
    for kind in ("missing", "unread", "from_defaults", "unknowable"):
        setattr(report, kind, getattr(report, kind)[:MAX_FINDINGS])
    return report


def _summary(path: str, reading: Reading) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path, "language": reading.language,
                           "reads": sorted(reading.names)}
    if reading.error:
        out["error"] = reading.error
    if reading.too_complex:
        out.update(too_complex=reading.too_complex, limit=reading.limit)
    return out


def _past_limits(path: str, index: int, count: int, limits: FileLimits,
                 total: int) -> dict[str, Any]:
    """The first file past the task's file limits: named, neither it nor any after it read."""
    if index >= limits.max_files:
        rule, limit = "files.max_count", limits.max_files
        why = f"file {index + 1} of {count}, past files.max_count ({limit:,} files)"
    else:
        rule, limit = "files.max_bytes", limits.max_bytes
        why = f"with it the files take {total:,} bytes, past files.max_bytes ({limit:,})"
    after = count - index - 1
    unread = (f"read neither it nor the {after} file{'s' if after != 1 else ''} after it"
              if after else "did not read it")
    return {"path": path, "language": None, "reads": [], "rule": rule, "limit": limit,
            "error": f"{why}: the doctor {unread}"}


@dataclass
class _Judged:
    """One script's findings, one per variable (and function) however many times or
    lines it is read on: each keeps the lines, in order, that read it."""

    missing: dict[tuple[str, str | None], list[int]] = field(default_factory=dict)
    suggestions: dict[str, list[str]] = field(default_factory=dict)
    from_defaults: dict[str, tuple[list[int], str, str]] = field(default_factory=dict)

    def into(self, report: Report, path: str) -> None:
        for (name, function), lines in self.missing.items():
            lines.sort()
            guesses = self.suggestions[name]
            inside = (f" (inside {function}(), which counts whether or not it is called)"
                      if function else "")
            hint = f"; did you mean {' or '.join(guesses)}?" if guesses else ""
            report.missing.append({
                "path": path, "line": lines[0], "lines": lines, "name": name,
                "function": function, "suggestions": guesses,
                "message": f"{_where(path, lines)} {name}{inside}, which this task does not "
                           f"set and the script gives no default{hint}"})
        for name, (lines, source, layer) in self.from_defaults.items():
            lines.sort()
            report.from_defaults.append({
                "path": path, "line": lines[0], "lines": lines, "name": name,
                "source": source, "scope": layer,
                "message": f"{_where(path, lines)} {name}: set by a {source} of {layer}"})


def _where(path: str, lines: Sequence[int]) -> str:
    """``train.py line 4 reads``, ``prepare.sh lines 9, 17 and 18 read``; past
    ``MAX_LINES_SHOWN`` lines, how many more (the finding's ``lines`` has them all)."""
    if len(lines) == 1:
        return f"{path} line {lines[0]} reads"
    shown = [str(n) for n in lines[:MAX_LINES_SHOWN]]
    if len(lines) > MAX_LINES_SHOWN:
        shown.append(f"{len(lines) - MAX_LINES_SHOWN:,} more")
    return f"{path} lines {', '.join(shown[:-1])} and {shown[-1]} read"


def _judge(judged: _Judged, found: Read, by_name: Mapping[str, Mapping[str, Any]],
           own: set[str]) -> None:
    var = by_name.get(found.name)
    if var is not None:
        if var.get("source") in ("default", "protected"):
            lines, _, _ = judged.from_defaults.setdefault(
                found.name, ([], var["source"], var.get("scope") or "platform"))
            if found.line not in lines:
                lines.append(found.line)
        return
    if found.default or found.name in own or runtime_only(found.name):
        return
    if found.name not in judged.suggestions:
        judged.suggestions[found.name] = list(_guesses(found.name, tuple(by_name)))
    lines = judged.missing.setdefault((found.name, found.function), [])
    if found.line not in lines:
        lines.append(found.line)


def documented_upstream() -> frozenset[str]:
    """The names the built-in catalog documents (read once per process)."""
    return frozenset(e.name for e in builtin())


def _unread(report: Report, resolved: Sequence[Mapping[str, Any]], read_names: set[str],
            catalog: Catalog, unknowable: bool) -> None:
    # Libraries read what the built-in catalog documents, not the scripts: never "unread",
    # whichever layer last described the name (an admin's entry, a policy's note).
    builtin = documented_upstream()
    note = ("; a name built at run time may still read it" if unknowable else "")
    for var in resolved:
        name = var["name"]
        if (var.get("source") != "user" or name in read_names or name in builtin
                or runtime_only(name)):
            continue
        guesses = list(_guesses(name, tuple(sorted(read_names))))
        hint = f"; the scripts read {' or '.join(guesses)}" if guesses else ""
        report.unread.append({"name": name, "suggestions": guesses,
                              "message": f"{name} is set by the task but no script reads it "
                                         f"(a typo?){hint}{note}"})

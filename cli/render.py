"""Everything the CLI shows: error lines per variable, tables, diffs, impact summaries.

Data from the API is always wrapped in ``rich.text.Text``: a value such as
``[bold]`` or ``$(HOME)`` is printed as typed, never read as markup.  Its control
characters are shown escaped (``\x1b``): ``Text`` drops a bell or a backspace but
passes an escape sequence through, and a server's answer must not drive the terminal
(clear it, retitle it, hide a line).  Words written to be read (a reason, an error's
message, a description) keep their line ends: each further line is indented under the
first (``prose``), so none passes for a line of the CLI's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shared import timestamps

# Wide enough that a table piped to a file or a test keeps names on one line.
PIPE_WIDTH = 200


def console(stderr: bool = False) -> Console:
    """Made per command (never at import), so it writes to the streams of that moment."""
    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    return out


def shown(value: Any) -> str:
    """A value on one table line: control characters escaped, everything else as is."""
    text = "" if value is None else str(value)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def line(text: str, style: str = "") -> Text:
    """One line made of the server's words: control characters escaped, markup inert."""
    return Text(shown(text), style=style)


def prose_lines(text: Any) -> list[str]:
    """Words that may span lines (a reason, a message): each line's control characters
    escaped, as ``shown`` does, but a line end kept as one (a carriage return too, as a
    log's), trailing blank lines dropped."""
    raw = "" if text is None else str(text)
    lines = raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return [shown(part) for part in lines]


def indented(block: str, prefix: str) -> str:
    """Every line of ``block`` behind ``prefix``."""
    return "\n".join(prefix + part for part in block.split("\n"))


def prose(text: Any, after: str = "") -> str:
    """A reason or a message as real text: its first line as is (then ``after``), each
    further line indented under it, so that no line of the server's can pass for a line
    of the CLI's own at the margin."""
    first, *rest = prose_lines(text)
    return "\n".join([first + after, *(indented(part, "  ") for part in rest)])


def block(text: str, style: str = "") -> Text:
    """Text made with ``prose``, markup inert."""
    return Text(text, style=style)


def terminal_safe(text: str) -> str:
    """A task's output for the terminal: lines and tabs kept, a carriage return read as
    a line end (a progress bar's redraw), every other control character escaped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c if c in "\n\t" or c.isprintable() else repr(c)[1:-1] for c in text)


# The platform's own lines in a task's log start with this (the server's
# shared/task/replica_logs.py: a step's output never holds it).
PLATFORM_MARK = "\x1f"
PLATFORM_STYLE = "\x1b[1;36m"  # bold cyan: no step can print it (its escapes are shown)
PLAIN_STYLE = "\x1b[0m"


class LogOutput:
    """A task's output for stdout, in the chunks it is read in (``terminal_safe``), the
    platform's own lines (``==> step 2/3``, ``taskenv: ...``) told from a step's: on a
    terminal in bold cyan, without their mark, which a step's output cannot produce (its
    escape sequences are shown escaped); piped, with the mark kept (``grep $'^\\x1f'``),
    as the API sends it."""

    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal
        self.in_platform = False  # the last chunk ended inside a platform line

    def __call__(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        if self.in_platform:
            end = text.find("\n")
            pos = len(text) if end == -1 else end + 1
            out.append(self._platform(text[:pos], continued=True))
            self.in_platform = end == -1
        while pos < len(text):
            at = text.find(PLATFORM_MARK, pos)
            if at == -1:
                out.append(terminal_safe(text[pos:]))
                break
            out.append(terminal_safe(text[pos:at]))
            end = text.find("\n", at)
            stop = len(text) if end == -1 else end + 1
            out.append(self._platform(text[at + 1:stop]))
            self.in_platform = end == -1
            pos = stop
        return "".join(out)

    def _platform(self, line: str, continued: bool = False) -> str:
        body, ending = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        if not self.terminal:
            return ("" if continued else PLATFORM_MARK) + terminal_safe(line)
        return f"{PLATFORM_STYLE}{terminal_safe(body)}{PLAIN_STYLE}{ending}" if body else ending


def when(timestamp: Any) -> str:
    """An API time (RFC 3339, e.g. ``2026-12-01T15:04:05.123Z``) in the reader's zone, with
    that zone's offset (ISO 8601: ``2026-12-01T16:04:05+01:00``): a time read from a
    terminal, a log or another user's screen says which moment it is."""
    if not isinstance(timestamp, str) or not timestamp:
        return ""
    try:
        moment = timestamps.parse(timestamp)
    except ValueError:
        # As the server wrote it, but never passed off as a time in the reader's zone.
        return f"{shown(timestamp)} (time zone unknown)"
    return moment.astimezone().isoformat(timespec="seconds")


def problem_line(problem: dict[str, Any]) -> str:
    """``VARIABLE: message (rule, limit N)``: who, what and which rule, on one line."""
    who = problem.get("variable") or problem.get("field") or "request"
    rule = str(problem.get("rule") or "error")
    if problem.get("limit") is not None:
        rule += f", limit {problem['limit']}"
    message = str(problem.get("message", ""))
    message = message.removeprefix(f"{who}: ")  # schema messages start with their field
    # The rule on the first line, where a reader (or grep) finds who and which rule.
    return prose(f"{shown(who)}: {message}", f" ({shown(rule)})")


def print_problems(out: Console, heading: str, problems: Iterable[dict[str, Any]],
                   style: str = "red") -> None:
    lines = [problem_line(p) for p in problems]
    if not lines:
        return
    out.print(line(heading, style=f"bold {style}"))
    for shown_line in lines:
        out.print(block(indented(shown_line, "  "), style=style))


def print_api_error(out: Console, code: str, message: str, url: str,
                    status: int | None, problems: Sequence[dict[str, Any]]) -> None:
    # A network error's message names the URL already; an answer says who gave it.
    where = f"; {status} from {url}" if status else ""
    out.print(block(prose(f"error: {message}", shown(f" [{code}{where}]")), style="bold red"))
    for problem in problems:
        out.print(block(indented(problem_line(problem), "  "), style="red"))


def table(*columns: str, title: str | None = None) -> Table:
    # A title wraps at the table's width: keep the table at least as wide as its title.
    grid = Table(title=line(title) if title else None, title_justify="left",
                 header_style="bold",
                 min_width=len(title) + 4 if title else None)
    for column in columns:
        grid.add_column(column, overflow="fold")
    return grid


def row(grid: Table, *cells: Any) -> None:
    grid.add_row(*(c if isinstance(c, Text) else Text(shown(c)) for c in cells))


def prose_cell(text: Any) -> Text:
    """A table cell of words (a reason, a description): its lines kept, inside the cell."""
    return Text("\n".join(prose_lines(text)))


def scope_label(scope: Any) -> str:
    """A policy scope as read: ``platform``, ``project vision`` (the API's
    ``project:vision``); no scope is the platform's (records from before projects)."""
    if not scope:
        return "platform"
    kind, sep, name = str(scope).partition(":")
    return shown(f"{kind} {name}" if sep else kind)


def policy_versions(doc: dict[str, Any], missing: str = "-") -> str:
    """Each scope's policy version a task (or a preview) was resolved with, the platform's
    first: ``platform v3, project ml v2``; a record holding only ``policy_version`` was
    resolved with the platform's alone."""
    versions = doc.get("policy_versions")
    if isinstance(versions, dict) and versions:
        ordered = sorted(versions.items(), key=lambda item: item[0] != "platform")
        return ", ".join(f"{scope_label(scope)} v{shown(number)}" for scope, number in ordered)
    version = doc.get("policy_version")
    return missing if version is None else f"platform v{shown(version)}"


def overrode(variable: dict[str, Any]) -> str:
    """What a resolved variable took precedence over, each with its scope, and which scope
    did it: ``platform default (by project vision v7)``, ``user (by platform v4)``.
    Records from before scopes hold the sources alone (``overrode``)."""
    shadowed = [s for s in variable.get("shadowed") or [] if isinstance(s, dict)]
    if shadowed:
        parts = [f"{scope_label(s['scope'])} {s.get('source')}" if s.get("scope")
                 else str(s.get("source")) for s in shadowed]
    else:
        parts = [str(o) for o in variable.get("overrode") or []]
    if not parts:
        return ""
    text = ", ".join(parts)
    if not variable.get("scope"):
        return text  # the task's own value (or an identity variable): its source says so
    version = variable.get("policy_version")
    by = scope_label(variable["scope"]) + ("" if version is None else f" v{version}")
    return f"{text} (by {by})"


def env_table(variables: Iterable[dict[str, Any]], title: str | None = None) -> Table:
    """Resolved variables: value (masked by the API when secret), source, what it overrode
    and which scope's policy did it."""
    grid = table("name", "value", "source", "overrode", "secret", title=title)
    for v in variables:
        row(grid, v.get("name"), v.get("value"), v.get("source", ""), overrode(v),
            "yes" if v.get("secret") else "")
    return grid


def tasks_table(items: Iterable[dict[str, Any]]) -> Table:
    grid = table("id", "name", "status", "revision", "owner", "updated")
    for t in items:
        row(grid, t.get("id"), t.get("name"), t.get("status"), t.get("revision"),
            t.get("owner"), when(t.get("updated_at")))
    return grid


def projects_table(items: Iterable[dict[str, Any]]) -> Table:
    grid = table("name", "members", "maintainers", "policy version", "created by", "created")
    for p in items:
        row(grid, p.get("name"), ", ".join(p.get("members") or []) or "-",
            ", ".join(p.get("maintainers") or []) or "-", p.get("policy_version"),
            p.get("created_by") or "-", when(p.get("created_at")))
    return grid


def project_facts(project: dict[str, Any]) -> Table:
    """One project at a glance: who is in it, who looks after it, its policy's version."""
    grid = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in (("project", project.get("name")),
                       ("members", ", ".join(project.get("members") or []) or "-"),
                       ("maintainers", ", ".join(project.get("maintainers") or []) or "-"),
                       ("policy version", project.get("policy_version")),
                       ("created", f"{when(project.get('created_at')) or '-'} by "
                                   f"{project.get('created_by') or '-'}")):
        grid.add_row(key, Text(shown("-" if value is None else value)))
    return grid


def tokens_table(items: Iterable[dict[str, Any]]) -> Table:
    grid = table("id", "owner", "role", "created", "created by")
    for t in items:
        row(grid, t.get("id"), t.get("owner"), t.get("role"), when(t.get("created_at")),
            t.get("created_by"))
    return grid


def policy_tables(policy: dict[str, Any]) -> list[Table | Text]:
    head = line(f"{scope_label(policy.get('scope'))} policy version {policy.get('version')}, "
                f"on conflict: "
                f"{policy.get('on_conflict')}, by {policy.get('author') or '-'} "
                f"at {when(policy.get('created_at')) or '-'}")
    defaults = table("name", "value", "secret", title="defaults (injected into every task)")
    for d in policy.get("defaults") or []:
        row(defaults, d.get("name"), d.get("value"), "yes" if d.get("secret") else "")
    protected = table("name", "value", "reason", "secret",
                      title="protected (tasks may not set these)")
    for p in policy.get("protected") or []:
        value = p.get("value") if p.get("value") is not None else "(reserved, no value)"
        row(protected, p.get("name"), value, prose_cell(p.get("reason")),
            "yes" if p.get("secret") else "")
    rules = table("name", "constraint", "description", "applies to",
                  title="rules (what a task's values must satisfy)")
    for r in policy.get("rules") or []:
        row(rules, r.get("name"), rule_constraint(r), prose_cell(r.get("description")),
            condition(r.get("when")))
    return [head, defaults, protected, rules]


def rule_constraint(rule: dict[str, Any]) -> str:
    """``required; one of a, b; pattern ^x$; 0 <= value <= 1; length <= 64``."""
    parts = ["required"] if rule.get("required") else []
    if rule.get("allowed") is not None:
        parts.append("one of " + ", ".join(str(a) for a in rule["allowed"]))
    if rule.get("pattern") is not None:
        parts.append(f"pattern {rule['pattern']}")
    low, high = rule.get("min"), rule.get("max")
    if low is not None or high is not None:
        parts.append(" <= ".join(str(p) for p in (low, "value", high) if p is not None))
    if rule.get("max_length") is not None:
        parts.append(f"length <= {rule['max_length']}")
    return "; ".join(parts)


def condition(found: Any) -> str:
    """A ``when`` as ``gpus>=1, image=nvcr.io/*``; every task when there is none."""
    if not isinstance(found, dict) or not found:
        return "every task"
    return ", ".join(f"{k}{v}" if str(v)[:1] in "<>=" else f"{k}={v}"
                     for k, v in found.items())


def history_table(versions: Iterable[dict[str, Any]], current: int | None) -> Table:
    grid = table("version", "author", "created", "defaults", "protected", "on conflict")
    for p in versions:
        mark = " (current)" if p.get("version") == current else ""
        row(grid, f"{p.get('version')}{mark}", p.get("author") or "-", when(p.get("created_at")),
            len(p.get("defaults") or []), len(p.get("protected") or []), p.get("on_conflict"))
    return grid


def secret_or(entry: dict[str, Any], value: Any) -> str:
    return "(secret)" if entry.get("secret") else shown(value)


def diff_lines(diff: dict[str, Any]) -> list[Text]:
    """``+ NAME=value``, ``- NAME=value``, ``~ NAME: old -> new``, each with its source."""
    lines: list[Text] = []
    for entry in diff.get("added") or []:
        lines.append(line(f"+ {entry.get('name')}={secret_or(entry, entry.get('value'))}"
                          f"  [{entry.get('source', '')}]", style="green"))
    for entry in diff.get("removed") or []:
        lines.append(line(f"- {entry.get('name')}={secret_or(entry, entry.get('value'))}"
                          f"  [{entry.get('source', '')}]", style="red"))
    for entry in diff.get("changed") or []:
        secret = "changed" if entry.get("value_changed", True) else "same value"
        change = (f"(secret) {secret}" if entry.get("secret") else
                  f"{shown(entry.get('old'))} -> {shown(entry.get('new'))}")
        lines.append(line(f"~ {entry.get('name')}: {change}  [{entry.get('source', '')}]",
                          style="yellow"))
    return lines or [Text("no differences")]


def or_unset(value: Any) -> str:
    return "(unset)" if value is None else shown(value)


def impact_parts(impact: dict[str, Any]) -> list[Table | Text]:
    """A draft policy's predicted effect: rejections, changed values, who is touched.

    Reads ``{considered, newly_rejected, already_rejected, changed?, rejections:
    [{variable, rule, message, newly_rejected, already_rejected, owners}], changes:
    [{name, old, new, secret?, tasks, owners}]}``: what the draft newly rejects apart
    from what is rejected today already; a secret shows only as changed.
    """
    parts: list[Table | Text] = [line(
        f"tasks considered: {impact.get('considered', '?')}, "
        f"would newly be rejected: {impact.get('newly_rejected', 0)} "
        f"(rejected today already: {impact.get('already_rejected', 0)}), "
        f"would change: {impact.get('changed', len(impact.get('changes') or []))}")]
    rejections = impact.get("rejections") or []
    if rejections:
        grid = table("variable", "rule", "message", "newly rejected", "rejected already",
                     "owners", title="rejections")
        for r in rejections:
            row(grid, r.get("variable"), r.get("rule"), prose_cell(r.get("message")),
                r.get("newly_rejected"), r.get("already_rejected"), r.get("owners"))
        parts.append(grid)
    changes = impact.get("changes") or []
    if changes:
        grid = table("variable", "old", "new", "tasks", "owners", title="value changes")
        for c in changes:
            old, new = (("(secret)", "(changed)") if c.get("secret")
                        else (or_unset(c.get("old")), or_unset(c.get("new"))))
            row(grid, c.get("name"), old, new, c.get("tasks"), c.get("owners"))
        parts.append(grid)
    return parts


def task_facts(doc: dict[str, Any]) -> Table:
    """One task at a glance: state, revision, outcome, policy, times."""
    grid = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    # The reason keeps its lines, each in the value's column under the first.
    outcome = "; ".join(p for p in (
        f"exit code {doc['exit_code']}" if doc.get("exit_code") is not None else "",
        "\n".join(prose_lines(doc.get("reason") or ""))) if p)
    facts = [("task", doc.get("id")), ("name", doc.get("name")), ("owner", doc.get("owner")),
             ("project", doc.get("project") or "-"), ("status", doc.get("status")),
             ("revision", doc.get("revision")), ("outcome", Text(outcome or "-")),
             ("policy", policy_versions(doc)),
             ("image", doc.get("image") or "(the launcher's default)"),
             ("created", when(doc.get("created_at"))), ("updated", when(doc.get("updated_at")))]
    if doc.get("cancelled_by"):
        facts.append(("cancelled", f"by {doc['cancelled_by']} at "
                                   f"{when(doc.get('cancelled_at'))}"))
    for key, value in facts:
        grid.add_row(key, value if isinstance(value, Text)
                     else Text(shown("-" if value is None else value)))
    return grid


def revisions_table(items: Iterable[dict[str, Any]]) -> Table:
    grid = table("revision", "state", "how", "by", "made", "started", "ended", "exit code",
                 "policy", title="revisions, oldest first")
    for r in items:
        how = r.get("how") or ""
        if r.get("rerun_of"):
            how += f" of {r['rerun_of']}" + (" (pinned)" if r.get("pinned_from") else "")
        row(grid, r.get("revision"), r.get("state"), how, r.get("made_by"),
            when(r.get("made_at")), when(r.get("started_at")), when(r.get("ended_at")),
            "" if r.get("exit_code") is None else r["exit_code"], policy_versions(r, missing=""))
    return grid


def catalog_table(entries: Iterable[dict[str, Any]]) -> Table:
    """Every field an entry documents (the API's ``EntryOut``), each in its own column."""
    grid = table("name", "type", "values", "range", "case", "layer", "description", "source")
    for e in entries:
        row(grid, e.get("name"), e.get("type") or "string", ", ".join(e.get("values") or []),
            value_range(e), "any" if e.get("case_insensitive") else "",
            e.get("scope") or e.get("layer"), prose_cell(e.get("description")),
            e.get("source") or "")
    return grid


def value_range(entry: dict[str, Any]) -> str:
    """``0 <= value <= 1``, ``value >= 1``, or nothing: the documented bounds of a number."""
    low, high = (number(entry.get(k)) for k in ("min", "max"))
    if low and high:
        return f"{low} <= value <= {high}"
    return f"value >= {low}" if low else f"value <= {high}" if high else ""


def number(value: Any) -> str:
    """A JSON number as written by hand: ``1`` for 1.0, ``0.001`` as is; None as nothing."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def print_doctor(out: Console, report: dict[str, Any] | None) -> None:
    """The pre-flight report on the task's scripts, on stderr beside the warnings."""
    if not report:
        return
    read = ", ".join(s.get("path", "") for s in report.get("scripts") or [])
    out.print(line(f"doctor: read {read or 'no script'}", style="bold"))
    for kind, style in (("from_defaults", ""), ("unknowable", "yellow")):
        for item in report.get(kind) or []:
            out.print(block(indented(prose(item.get("message", "")), "  "), style=style))

"""A static reading of the variables a task's scripts read: nothing is ever executed.

Python is read with the standard library's ``ast``: ``os.environ[...]``,
``os.environ.get(name, default)``, ``os.getenv(name, default)``, ``.setdefault``,
``.pop`` and ``name in os.environ``, through ``import os as ...`` and
``from os import environ/getenv`` aliases.  A name built at run time
(``os.environ["LR_" + stage]``) is reported as unknowable, never guessed.  A read
inside a function counts wherever the function is, called or not: whether it is called
is a question of run time.

Shell is read with tree-sitter's bash grammar (MIT licensed; ``bashlex``, GPL, is not a
dependency a permissively licensed service can have): ``$NAME``, ``${NAME}``, and the
``${NAME:-default}``/``${NAME-default}``/``${NAME:=default}`` forms, which have a
default.  Quotes are the grammar's own: a single-quoted ``'$NAME'`` and a comment read
nothing.  A name the script assigns anywhere (``NAME=...``, ``export``, ``read``,
``for NAME in``) is its own, not the task's; order is not followed.

Readings are cached by content digest (a bounded LRU): a preview typed a character at
a time reads each script once.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SCRIPT_BYTES = 256 * 1024  # larger files are not read (and say so)
MAX_READS = 5000  # per script: a report's size never depends on a script's size
CACHE_SIZE = 512
SHELL_SUFFIXES = (".sh", ".bash")
DEFAULT_OPERATORS = {":-", "-", ":=", "=", ":+", "+"}  # "+" forms read nothing if unset


@dataclass(frozen=True)
class Read:
    """One place a script reads a variable."""

    name: str
    line: int
    default: bool  # the script says what to do when it is unset
    function: str | None = None  # the enclosing function, if any


@dataclass(frozen=True)
class Unknowable:
    """A read whose name is built at run time."""

    line: int
    expression: str


@dataclass(frozen=True)
class Reading:
    language: str | None  # "python", "shell", or None: not a script the doctor reads
    reads: tuple[Read, ...] = ()
    unknowable: tuple[Unknowable, ...] = ()
    # Names the script handles itself: it assigns them, or tests whether they are set
    # ("X" in os.environ) before reading them.
    sets: frozenset[str] = frozenset()
    error: str | None = None  # why it could not be read

    @cached_property
    def names(self) -> frozenset[str]:
        """Every name read (a reading is immutable: worked out once)."""
        return frozenset(r.name for r in self.reads)


@dataclass
class _Cache:
    """A bounded LRU of readings by (language, content digest), shared by threads."""

    size: int = CACHE_SIZE
    entries: OrderedDict[tuple[str, str], Reading] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0
    misses: int = 0

    def get(self, key: tuple[str, str]) -> Reading | None:
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return found

    def put(self, key: tuple[str, str], reading: Reading) -> None:
        with self.lock:
            self.entries[key] = reading
            self.entries.move_to_end(key)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.hits = self.misses = 0


CACHE = _Cache()


def language_of(path: str, content: str) -> str | None:
    """Which reader a file needs: by its suffix, else by its ``#!`` line."""
    lower = path.lower()
    if lower.endswith(".py"):
        return "python"
    if lower.endswith(SHELL_SUFFIXES):
        return "shell"
    first = content.split("\n", 1)[0]
    if first.startswith("#!"):
        if "python" in first:
            return "python"
        if re.search(r"\b(ba|da|k|z)?sh\b", first):
            return "shell"
    return None


def read(path: str, content: str) -> Reading:
    """What the script at ``path`` reads; cached by content."""
    language = language_of(path, content)
    if language is None:
        return Reading(None)
    if len(content.encode(errors="replace")) > MAX_SCRIPT_BYTES:
        return Reading(language, error=f"larger than {MAX_SCRIPT_BYTES} bytes: not read")
    key = (language, hashlib.sha256(content.encode(errors="replace")).hexdigest())
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    reading = read_python(content) if language == "python" else read_shell(content)
    CACHE.put(key, reading)
    return reading


# --- Python ------------------------------------------------------------------------------

def read_python(source: str) -> Reading:
    if "environ" not in source and "getenv" not in source:
        return Reading("python")  # nothing to find: not even parsed
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        return Reading("python", error=f"not valid Python (line {line}): "
                                       f"{error.__class__.__name__}")
    except (RecursionError, MemoryError):
        return Reading("python", error="nested too deeply to be read")
    found = _PythonReads()
    found.walk(tree)
    found.reads.sort(key=lambda r: r.line)
    found.unknowable.sort(key=lambda u: u.line)
    return Reading("python", tuple(found.reads[:MAX_READS]),
                   tuple(found.unknowable[:MAX_READS]), frozenset(found.sets),
                   _too_many(len(found.reads)))


class _PythonReads:
    """Collects reads of ``os.environ`` and ``os.getenv``, whatever they are imported as.

    One pass over the tree with an explicit stack and a dispatch on the node's type:
    ``ast.NodeVisitor``'s per-node method lookup costs more than the parse itself."""

    def __init__(self) -> None:
        self.os_names = {"os"}
        self.environ_names: set[str] = set()
        self.getenv_names: set[str] = set()
        self.reads: list[Read] = []
        self.unknowable: list[Unknowable] = []
        self.sets: set[str] = set()
        self.written: set[int] = set()  # os.environ[...] targets of an assignment
        self.dispatch: dict[type, Any] = {
            ast.Import: self.on_import, ast.ImportFrom: self.on_import_from,
            ast.Assign: self.on_assign, ast.Subscript: self.on_subscript,
            ast.Call: self.on_call, ast.Compare: self.on_compare}

    def walk(self, tree: ast.AST) -> None:
        stack: list[tuple[ast.AST, str | None]] = [(tree, None)]
        while stack:
            node, function = stack.pop()
            kind = type(node)
            handler = self.dispatch.get(kind)
            if handler is not None:
                handler(node, function)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                function = node.name  # type: ignore[attr-defined]
            for name in node._fields:
                if name == "ctx":
                    continue
                value = getattr(node, name, None)
                if isinstance(value, list):
                    stack.extend((child, function) for child in reversed(value)
                                 if isinstance(child, ast.AST))
                elif isinstance(value, ast.AST):
                    stack.append((value, function))

    # imports ---------------------------------------------------------------------------
    def on_import(self, node: ast.Import, function: str | None) -> None:
        for alias in node.names:
            if alias.name == "os":
                self.os_names.add(alias.asname or "os")

    def on_import_from(self, node: ast.ImportFrom, function: str | None) -> None:
        if node.module == "os":
            for alias in node.names:
                if alias.name == "environ":
                    self.environ_names.add(alias.asname or "environ")
                elif alias.name == "getenv":
                    self.getenv_names.add(alias.asname or "getenv")

    # reads -----------------------------------------------------------------------------
    def _is_environ(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environ_names
        return (isinstance(node, ast.Attribute) and node.attr == "environ"
                and isinstance(node.value, ast.Name) and node.value.id in self.os_names)

    def _is_getenv(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.getenv_names
        return (isinstance(node, ast.Attribute) and node.attr == "getenv"
                and isinstance(node.value, ast.Name) and node.value.id in self.os_names)

    def _record(self, key: ast.AST | None, line: int, default: bool,
                function: str | None) -> None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            self.reads.append(Read(key.value, line, default, function))
        elif key is not None:
            self.unknowable.append(Unknowable(line, _text(key)))

    def on_assign(self, node: ast.Assign, function: str | None) -> None:
        for target in node.targets:  # os.environ["X"] = ...: the script sets X itself
            if isinstance(target, ast.Subscript) and self._is_environ(target.value):
                self.written.add(id(target))
                key = target.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.sets.add(key.value)

    def on_subscript(self, node: ast.Subscript, function: str | None) -> None:
        # os.environ["X"]: a KeyError when unset (a del or an assignment is no read)
        if (isinstance(node.ctx, ast.Load) and id(node) not in self.written
                and self._is_environ(node.value)):
            self._record(node.slice, node.lineno, False, function)

    def on_call(self, node: ast.Call, function: str | None) -> None:
        func = node.func
        key = node.args[0] if node.args else _keyword(node, "key")
        if self._is_getenv(func):
            self._record(key, node.lineno, len(node.args) > 1 or
                         _keyword(node, "default") is not None, function)
        elif isinstance(func, ast.Attribute) and self._is_environ(func.value):
            if func.attr in ("get", "pop"):
                self._record(key, node.lineno, len(node.args) > 1, function)
            elif func.attr == "setdefault":
                self._record(key, node.lineno, True, function)
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.sets.add(key.value)

    def on_compare(self, node: ast.Compare, function: str | None) -> None:
        # "X" in os.environ: the script checks, so it has its own answer when unset
        if (len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn)
                and self._is_environ(node.comparators[0])):
            self._record(node.left, node.lineno, True, function)
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                self.sets.add(node.left.value)


def _keyword(node: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except RecursionError:  # a hostile expression nested past the interpreter's limit
        return "(an expression nested too deeply to show)"
    return text if len(text) <= 80 else text[:80] + "..."


# --- shell -------------------------------------------------------------------------------

_QUERY = """
(simple_expansion (variable_name) @read)
(expansion) @expansion
(variable_assignment name: (variable_name) @set)
(declaration_command (variable_name) @set)
(for_statement variable: (variable_name) @set)
(command name: (command_name) @command)
(function_definition name: (word) @name) @function
"""


def _bash() -> tuple[Any, Any]:
    """tree-sitter's bash parser and the query of what the doctor looks for, made once per
    thread (a parser is not thread-safe)."""
    local = _LOCAL
    if not hasattr(local, "parser"):
        import tree_sitter
        import tree_sitter_bash

        language = tree_sitter.Language(tree_sitter_bash.language())
        local.parser = tree_sitter.Parser(language)
        local.query = tree_sitter.Query(language, _QUERY)
    return local.parser, local.query


_LOCAL = threading.local()


def read_shell(source: str) -> Reading:
    """One parse, one query: the matching runs in tree-sitter's C code, and only the
    nodes the doctor needs become Python objects."""
    import tree_sitter

    parser, query = _bash()
    tree = parser.parse(source.encode(errors="replace"))
    found = tree_sitter.QueryCursor(query).captures(tree.root_node)
    functions = _Functions(found.get("function", []), found.get("name", []))
    reads = [Read(_node_text(n), n.start_point[0] + 1, False, functions.at(n.start_byte))
             for n in found.get("read", [])]
    unknowable: list[Unknowable] = []
    for node in found.get("expansion", []):
        _expansion(node, functions, reads, unknowable)
    sets = {_node_text(n) for n in found.get("set", [])}
    for name in found.get("command", []):
        command = name.parent
        if command is not None and _node_text(name) == "read":  # read X: the script's own
            sets.update(_node_text(c) for c in command.children[1:]
                        if c.type == "word" and NAME.fullmatch(_node_text(c)))
    reads = [r for r in reads if NAME.fullmatch(r.name)]
    reads.sort(key=lambda r: (r.line, r.name))
    error = "could not be parsed in full" if tree.root_node.has_error else None
    return Reading("shell", tuple(reads[:MAX_READS]), tuple(unknowable[:MAX_READS]),
                   frozenset(sets), error or _too_many(len(reads)))


def _expansion(node: Any, functions: _Functions, reads: list[Read],
               unknowable: list[Unknowable]) -> None:
    children = node.children
    names = [c for c in children if c.type == "variable_name"]
    line = node.start_point[0] + 1
    if not names:  # ${1}, ${@}: positional and special parameters
        return
    operators = {_node_text(c) for c in children if not c.is_named}
    if "!" in operators:  # ${!ref}: the name read is ref's value
        unknowable.append(Unknowable(line, _node_text(node)[:80]))
        return
    default = bool(operators & DEFAULT_OPERATORS) or "#" in operators  # ${#X}: a length
    reads.append(Read(_node_text(names[0]), line, default, functions.at(node.start_byte)))


class _Functions:
    """Which shell function a byte of the script is in (the innermost one)."""

    def __init__(self, bodies: list[Any], names: list[Any]) -> None:
        named = {n.parent.start_byte: _node_text(n) for n in names if n.parent is not None}
        self.spans = sorted((b.start_byte, b.end_byte, named.get(b.start_byte, "?"))
                            for b in bodies)
        self.starts = [s for s, _, _ in self.spans]

    def at(self, position: int) -> str | None:
        index = bisect.bisect_right(self.starts, position)
        for start, end, name in reversed(self.spans[max(0, index - 32):index]):
            if start <= position < end:
                return name
        return None


def _too_many(count: int) -> str | None:
    return (f"more than {MAX_READS} reads: only the first {MAX_READS} are used"
            if count > MAX_READS else None)


def _node_text(node: Any) -> str:
    raw = node.text
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)

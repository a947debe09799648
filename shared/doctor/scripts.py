"""A static reading of the variables a task's scripts read: nothing is ever executed.

Python is read with the standard library's ``ast``: ``os.environ[...]``,
``os.environ.get(name, default)``, ``os.getenv(name, default)``, ``.setdefault``,
``.pop`` and ``name in os.environ``, through ``import os as ...`` and
``from os import environ/getenv`` aliases, and a name given to them (``env = os.environ``,
read through from that line on: the walk follows the source's order).  A name built at run time
(``os.environ["LR_" + stage]``) is reported as unknowable, never guessed.  A read
inside a function counts wherever the function is, called or not: whether it is called
is a question of run time.

Shell is read with tree-sitter's bash grammar (MIT licensed; ``bashlex``, GPL, is not a
dependency a permissively licensed service can have): ``$NAME``, ``${NAME}``, and the
``${NAME:-default}``/``${NAME-default}``/``${NAME:=default}`` forms, which have a
default.  Quotes are the grammar's own: a single-quoted ``'$NAME'`` and a comment read
nothing.  A name the script assigns anywhere (``NAME=...``, ``export``, ``read``,
``for NAME in``) is its own, not the task's; order is not followed.

Reading is bounded whatever a script holds (:class:`Budget`), and the budget is kept
inside the reading itself: the shell parser reports its progress and is cancelled past
``MAX_PARSE_STEPS``; the walk over its tree counts the nodes it visits (``MAX_NODES``)
and the depth it reaches (``MAX_DEPTH``); the Python walk counts its nodes too, and
Python's own parser refuses nesting past its limits (200 brackets, 100 indentation
levels).  A script past one of them is *too complex*: its reading names the limit
reached and holds no reads (a warning, ``doctor.too_complex``, never an error).  Every
step of the reading is linear in the script, so a script within the budget costs time
in proportion to its size, and one past it costs no more than the budget.

Readings are cached by content digest (a bounded LRU): a preview typed a character at
a time reads each script once.
"""

from __future__ import annotations

import ast
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SCRIPT_BYTES = 256 * 1024  # larger files are not read (and say so)
MAX_READS = 5000  # per script: a report's size never depends on a script's size
CACHE_SIZE = 512
# The reading's budget, per script (see Budget).  A real script is far inside each: a
# 256 KiB shell script of ordinary lines makes some 70,000 syntax nodes, 2,000 parser
# steps and a tree 10 to 30 levels deep (each $( ) one inside another adds 3 levels).
MAX_DEPTH = 256  # shell: levels of the syntax tree
MAX_NODES = 200_000  # shell syntax nodes, or Python AST nodes, visited
MAX_PARSE_STEPS = 8_000  # shell: tree-sitter's progress reports while it parses
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
    # The limit of the budget the reading reached ("nested deeper than 256 levels"), and
    # its number: a too complex script, whose reading stopped there and holds no reads.
    too_complex: str | None = None
    limit: int | None = None

    @property
    def complete(self) -> bool:
        """Every line of the script was read (a script too large or too complex was not)."""
        return self.language is None or not (self.too_complex or _NOT_READ in (self.error or ""))

    @cached_property
    def names(self) -> frozenset[str]:
        """Every name read (a reading is immutable: worked out once)."""
        return frozenset(r.name for r in self.reads)


@dataclass
class Budget:
    """What reading one script may cost, counted inside the reading as it goes.

    ``parse_steps``: the shell parser's progress reports (tree-sitter makes one every
    hundred or so operations; past ``max_parse_steps`` it is cancelled); ``nodes``: the
    syntax nodes (shell) or AST nodes (Python) the walk visited; ``depth``: the deepest
    level of the shell syntax tree it reached.  ``reached`` names the limit that stopped
    the reading, if one did.  A test hands one in to count the work done."""

    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES
    max_parse_steps: int = MAX_PARSE_STEPS
    parse_steps: int = 0
    nodes: int = 0
    depth: int = 0
    reached: str | None = None

    def too_complex(self, language: str, why: str, limit: int | None) -> Reading:
        self.reached = why
        return Reading(language, error=f"too complex to read: {why}; {_NOT_READ}",
                       too_complex=why, limit=limit)

    def deeper_than(self) -> Reading:
        return self.too_complex("shell", f"nested deeper than {self.max_depth:,} levels",
                                self.max_depth)

    def more_nodes_than(self, language: str) -> Reading:
        return self.too_complex(language, f"more than {self.max_nodes:,} syntax nodes",
                                self.max_nodes)


_NOT_READ = "not read"


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
        return Reading(language, error=f"larger than {MAX_SCRIPT_BYTES} bytes: {_NOT_READ}")
    key = (language, hashlib.sha256(content.encode(errors="replace")).hexdigest())
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    reading = read_python(content) if language == "python" else read_shell(content)
    CACHE.put(key, reading)
    return reading


# --- Python ------------------------------------------------------------------------------

# Python's parser refuses nesting past its own limits (Parser/tokenizer.c: MAXLEVEL
# brackets, MAXINDENT indentation levels): a script past them is too complex, not wrong.
_PYTHON_LIMITS = (("too many nested parentheses", "more than 200 nested brackets", 200),
                  ("too many levels of indentation", "more than 100 levels of indentation",
                   100),
                  ("nested too deeply", "expressions nested too deeply", None))


def read_python(source: str, budget: Budget | None = None) -> Reading:
    budget = budget or Budget()
    if "environ" not in source and "getenv" not in source:
        return Reading("python")  # nothing to find: not even parsed
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as error:
        message = str(getattr(error, "msg", error))
        for says, why, limit in _PYTHON_LIMITS:
            if says in message:
                return budget.too_complex("python", f"{why} (Python's parser's limit)", limit)
        line = getattr(error, "lineno", None)
        return Reading("python", error=f"not valid Python (line {line}): "
                                       f"{error.__class__.__name__}")
    except (RecursionError, MemoryError):
        return budget.too_complex("python", "nested past the depth Python's parser reads",
                                  None)
    found = _PythonReads()
    if not found.walk(tree, budget):
        return budget.more_nodes_than("python")
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

    def walk(self, tree: ast.AST, budget: Budget) -> bool:
        """Visit every node, counting them into ``budget``; False past its ``max_nodes``."""
        stack: list[tuple[ast.AST, str | None]] = [(tree, None)]
        visited, most = budget.nodes, budget.max_nodes
        while stack:
            visited += 1
            if visited > most:
                budget.nodes = visited
                return False
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
        budget.nodes = visited
        return True

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
        # env = os.environ, getenv = os.getenv: a name for them, read through from then on
        if self._is_environ(node.value) or self._is_getenv(node.value):
            names = self.environ_names if self._is_environ(node.value) else self.getenv_names
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
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


# --- shell ---------------------------------------------------------------------------------

# What the walk looks at, by the grammar's node type; every other node is only passed.
_SHELL_KINDS = ("simple_expansion", "expansion", "variable_assignment",
                "declaration_command", "for_statement", "command", "function_definition")
_CHUNK = 64 * 1024  # bytes handed to the parser at a time


def _bash() -> tuple[Any, dict[int, str]]:
    """tree-sitter's bash parser, made once per thread (a parser is not thread-safe), and
    the node kinds the walk looks at by their ids (a kind may have several)."""
    local = _LOCAL
    if not hasattr(local, "parser"):
        import tree_sitter
        import tree_sitter_bash

        language = tree_sitter.Language(tree_sitter_bash.language())
        local.parser = tree_sitter.Parser(language)
        local.kinds = {i: language.node_kind_for_id(i) for i in range(language.node_kind_count)
                       if language.node_kind_is_named(i)
                       and language.node_kind_for_id(i) in _SHELL_KINDS}
    return local.parser, local.kinds


_LOCAL = threading.local()


def read_shell(source: str, budget: Budget | None = None) -> Reading:
    """One parse, cancelled past the budget's parser steps, then one walk over the tree
    with a cursor, counting the nodes it visits and the depth it reaches.  Each node is
    visited once, so the walk's cost is linear in the tree (a tree-sitter query's was
    not: it grew with the square of a wide error node, such as a run of backticks)."""
    budget = budget or Budget()
    parser, kinds = _bash()
    data = source.encode(errors="replace")

    def progress(_offset: int, _has_error: bool) -> bool:
        budget.parse_steps += 1
        return budget.parse_steps > budget.max_parse_steps  # True cancels the parse

    try:
        tree = parser.parse(lambda at, _point: data[at:at + _CHUNK],
                            progress_callback=progress)
    except ValueError:  # cancelled: "Parsing failed"
        parser.reset()  # the next parse must start afresh, not resume this one
        if budget.parse_steps <= budget.max_parse_steps:
            raise
        return budget.too_complex("shell", f"more than {budget.max_parse_steps:,} parser "
                                           "steps", budget.max_parse_steps)
    walk = _ShellWalk(kinds, data)
    if not walk.run(tree, budget):
        return budget.deeper_than() if budget.depth > budget.max_depth \
            else budget.more_nodes_than("shell")
    reads = [r for r in walk.reads + walk.expanded if NAME.fullmatch(r.name)]
    reads.sort(key=lambda r: (r.line, r.name))
    error = "could not be parsed in full" if tree.root_node.has_error else None
    return Reading("shell", tuple(reads[:MAX_READS]), tuple(walk.unknowable[:MAX_READS]),
                   frozenset(walk.sets), error or _too_many(len(reads)))


class _ShellWalk:
    """What a shell script reads and sets, in one pass over its syntax tree.

    ``reads``: ``$X`` (a ``simple_expansion``'s variable); ``expanded``: ``${X...}``
    (an ``expansion``), kept apart so that the order of two reads of a name on one line
    stays the one the doctor has always given; the innermost enclosing function of each
    is the top of a stack of the functions the walk is inside."""

    def __init__(self, kinds: dict[int, str], source: bytes) -> None:
        self.kinds = kinds
        # A tree parsed from a callback holds no text of its own (its nodes' .text must
        # not be asked for): the walk slices the source itself.
        self.source = source
        self.reads: list[Read] = []
        self.expanded: list[Read] = []
        self.unknowable: list[Unknowable] = []
        self.sets: set[str] = set()
        self.functions: list[tuple[int, str]] = []  # (depth of its node, name)

    def run(self, tree: Any, budget: Budget) -> bool:
        """Visit every node in document order; False at the first limit ``budget`` sets."""
        cursor = tree.walk()
        kinds, functions = self.kinds, self.functions
        depth = deepest = 0
        visited, most, too_deep = budget.nodes, budget.max_nodes, budget.max_depth
        try:
            while True:
                visited += 1
                if visited > most:
                    return False
                node = cursor.node
                kind = kinds.get(node.kind_id)
                if kind is not None:
                    self.on(kind, node, depth)
                if cursor.goto_first_child():
                    depth += 1
                    if depth > deepest:
                        deepest = depth
                        if depth > too_deep:
                            return False
                    continue
                while not cursor.goto_next_sibling():
                    if not cursor.goto_parent():
                        return True
                    depth -= 1
                while functions and functions[-1][0] >= depth:
                    functions.pop()  # the walk has left the function's body
        finally:
            budget.nodes, budget.depth = visited, max(budget.depth, deepest)

    def text(self, node: Any) -> str:
        return self.source[node.start_byte:node.end_byte].decode(errors="replace")

    def on(self, kind: str, node: Any, depth: int) -> None:
        text, function = self.text, (self.functions[-1][1] if self.functions else None)
        if kind == "simple_expansion":
            self.reads += [Read(text(c), c.start_point[0] + 1, False, function)
                           for c in node.children if c.type == "variable_name"]
        elif kind == "expansion":
            _expansion(node, function, text, self.expanded, self.unknowable)
        elif kind == "variable_assignment":
            self._set(node.child_by_field_name("name"))
        elif kind == "for_statement":
            self._set(node.child_by_field_name("variable"))
        elif kind == "declaration_command":
            self.sets.update(text(c) for c in node.children if c.type == "variable_name")
        elif kind == "command":
            name = node.child_by_field_name("name")
            if name is not None and name.type == "command_name" \
                    and text(name) == "read":  # read X: the script's own
                self.sets.update(text(c) for c in node.children[1:]
                                 if c.type == "word" and NAME.fullmatch(text(c)))
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            if name is not None and name.type == "word":
                self.functions.append((depth, text(name)))

    def _set(self, name: Any) -> None:
        if name is not None and name.type == "variable_name":
            self.sets.add(self.text(name))


def _expansion(node: Any, function: str | None, text: Callable[[Any], str],
               reads: list[Read], unknowable: list[Unknowable]) -> None:
    children = node.children
    names = [c for c in children if c.type == "variable_name"]
    line = node.start_point[0] + 1
    if not names:  # ${1}, ${@}: positional and special parameters
        return
    operators = {text(c) for c in children if not c.is_named}
    if "!" in operators:  # ${!ref}: the name read is ref's value
        unknowable.append(Unknowable(line, text(node)[:80]))
        return
    default = bool(operators & DEFAULT_OPERATORS) or "#" in operators  # ${#X}: a length
    reads.append(Read(text(names[0]), line, default, function))


def _too_many(count: int) -> str | None:
    return (f"more than {MAX_READS} reads: only the first {MAX_READS} are used"
            if count > MAX_READS else None)

"""Each test builds its own app, and werkzeug compiles two URL builders (Python source,
through ``ast`` and ``compile``) for each of its rules: half of an app's start-up.  A
builder's code depends on the rule's text, its parsed parts and its defaults only, so
apps with the same routes can share it; the rules, maps and apps stay each test's own.

Tests only: a server builds its app once.  The memo applies to the werkzeug versions
whose ``Rule._compile_builder`` it was checked against, and steps aside for any other
(the tests are then slower, never wrong)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from werkzeug.routing.rules import Rule

CHECKED = ("3.0.", "3.1.")  # _compile_builder reads rule, _trace, defaults (and converters)


def reuse_url_builders() -> None:
    if getattr(Rule._compile_builder, "_shared", False) or not version(
            "werkzeug").startswith(CHECKED):
        return
    compile_builder = Rule._compile_builder
    built: dict[tuple[Any, ...], Callable[..., tuple[str, str]]] = {}

    def shared(self: Rule, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        defaults = self.defaults or {}
        # A default for a variable in the rule is folded into the code through the rule's
        # own converter: such a rule gets its own builder, as before.
        if defaults and any(dynamic and data in defaults for dynamic, data in self._trace):
            return compile_builder(self, append_unknown)
        key = (self.rule, tuple(self._trace), tuple(defaults), append_unknown)
        builder = built.get(key)
        if builder is None:
            builder = built[key] = compile_builder(self, append_unknown)
        return builder

    shared._shared = True  # type: ignore[attr-defined]
    Rule._compile_builder = shared  # type: ignore[method-assign]

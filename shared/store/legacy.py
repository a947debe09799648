"""Task records from before revisions had keys of their own.

Such a record was one JSON document holding every revision: the current one at
the top level and the earlier ones in ``history``.  ``TaskStore`` converts one
the first time it reads it; these pure functions say how.
"""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
# What a past revision kept in ``history``.
_PAST_FIELDS = ("state", "env", "errors", "warnings", "resolved", "policy_version",
                "exit_code", "reason")


def legacy_env_lists(doc: Doc) -> list[list[dict[str, Any]] | None]:
    """Every list of variables in the old document, whose secrets are sealed."""
    revisions = [doc, *doc.get("history", [])]
    return [r.get(k) for r in revisions for k in ("env", "resolved")]


def legacy_split(doc: Doc) -> tuple[Doc, list[Doc]]:
    """The current record (without ``history``) and each past revision on its own."""
    events = doc.get("events", [])
    past = [{"revision": old["revision"], **{f: old.get(f) for f in _PAST_FIELDS},
             "events": [e for e in events if e.get("revision") == old["revision"]]}
            for old in doc.get("history", [])]
    current = {k: v for k, v in doc.items() if k != "history"}
    current["events"] = [e for e in events if e.get("revision") == doc["revision"]]
    return current, past

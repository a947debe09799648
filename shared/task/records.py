"""Task records as plain dicts: how one is made, revised and shown.

A record is stored as JSON in Redis (see ``shared.store.tasks``).  These functions
are pure so the API, the workers and the tests share one definition.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from shared.errors import Problem
from shared.secrets import masked
from shared.task import files as task_files
from shared.task import states
from shared.types import RESTART

NOTE = ("A running container's env cannot change: a change to the env makes a new "
        "revision, which is validated, resolved and launched in a new container.")
# Per-revision fields that a new revision starts without.
_RESULT_FIELDS = ("errors", "warnings", "resolved", "policy_version", "exit_code", "reason",
                  "doctor", "replica_exit_codes", "received", "per_node")
# Per-revision facts a new revision must not inherit from the one before.
_PER_REVISION = ("started_at", "ended_at", "drift", "pinned_from", "rerun_of", "cancelled_by",
                 "cancelled_at", "apply", "policy_versions", "replaces", "pinned_defaults",
                 "waits_on")


def restart_waits_for(doc: Mapping[str, Any]) -> int | None:
    """The revision whose stop a restart's pending revision waits for; None if it waits
    for none.  Usually the one before it; a change made while it waited replaced it, and
    waits for the same stop (``replaces``)."""
    if doc["state"] != states.PENDING or doc.get("apply") != RESTART:
        return None
    return int(doc.get("replaces") or doc["revision"] - 1)


def request_digest(data: Mapping[str, Any], key: bytes) -> str:
    """Fingerprint of a creation request, to spot an idempotency key reused for another.

    Secret values count too, through a keyed MAC (HMAC-SHA256): without the key, the
    stored fingerprint cannot be used to test guesses of a secret value.
    """
    canonical = json.dumps(data, sort_keys=True, default=str).encode()
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def new_task(data: Mapping[str, Any], owner: str) -> dict[str, Any]:
    now = time.time()
    return {
        "name": data["name"], "owner": owner, "image": data.get("image"),
        "workdir": data.get("workdir"), "steps": data["steps"],
        "resources": data.get("resources"), "env": list(data.get("env", [])),
        "files": task_files.stored(data.get("files") or []),
        **({"strict_env": True} if data.get("strict_env") else {}),
        "replicas": int(data.get("replicas") or 1),
        "procs_per_replica": int(data.get("procs_per_replica") or 1), "revision": 1,
        **({"nodes": int(data["nodes"])} if int(data.get("nodes") or 1) > 1 else {}),
        "state": states.PENDING, "created_at": now, "updated_at": now,
        "errors": [], "warnings": [], "resolved": None, "policy_version": None,
        "exit_code": None, "reason": None, "made_by": owner, "how": "create", "made_at": now,
        "events": [{"at": now, "revision": 1, "state": states.PENDING}],
    }


def patch_env(env: list[dict[str, Any]], set_: list[dict[str, Any]],
              unset: list[str]) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Add, modify and delete variables; names are kept in their first position."""
    problems: list[Problem] = []
    current = {_key(e.get("name")) for e in env}
    gone = {_key(n) for n in unset}
    for name in unset:
        if _key(name) not in current:
            problems.append(Problem(rule="name.unknown", variable=str(name), field="unset",
                                    message=f"{name} is not set on this task"))
    for name in {_key(e.get("name")) for e in set_} & gone:
        problems.append(Problem(rule="patch.ambiguous", variable=name,
                                message=f"{name} is both set and unset in one change"))
    out = [e for e in env if _key(e.get("name")) not in gone]
    index = {_key(e.get("name")): i for i, e in enumerate(out)}
    for entry in set_:
        key = _key(entry.get("name"))
        if key in index:
            out[index[key]] = dict(entry)
        else:
            index[key] = len(out)
            out.append(dict(entry))
    return out, problems


def _key(name: Any) -> str:
    """Names as dict keys, even a malformed one (the validation stage reports it)."""
    return name if isinstance(name, str) else repr(name)


def new_revision(doc: dict[str, Any], env: list[dict[str, Any]], actor: str,
                 how: str) -> dict[str, Any]:
    """Start the next revision at ``pending``; the current one keeps its own record.

    ``how`` says what made it: ``patch``, ``rerun`` or ``restart``.
    """
    now = time.time()
    for name in _PER_REVISION:
        doc.pop(name, None)
    doc.update({f: None for f in _RESULT_FIELDS}, errors=[], warnings=[])
    doc.update(revision=doc["revision"] + 1, env=env, state=states.PENDING, made_by=actor,
               how=how, made_at=now,
               events=[{"at": now, "revision": doc["revision"] + 1, "state": states.PENDING}])
    return doc


def summary_view(item: Mapping[str, Any], url: str) -> dict[str, Any]:
    """A task as a listing shows it: a few small fields, never its env."""
    return {"id": item["id"], "url": url, "name": item["name"], "owner": item["owner"],
            "project": item.get("project"), "status": item["state"],
            "revision": item["revision"], "created_at": item["created_at"],
            "updated_at": item["updated_at"]}


def public_view(doc: Mapping[str, Any], url: str) -> dict[str, Any]:
    """The record as the API shows it: secrets masked, internal fields left out."""
    resolved = doc.get("resolved")
    return {
        "id": doc["id"], "url": url, "name": doc["name"], "owner": doc["owner"],
        "image": doc.get("image"), "workdir": doc.get("workdir"), "steps": doc["steps"],
        "resources": doc.get("resources"), "status": doc["state"],
        "revision": doc["revision"], "how": doc.get("how") or "create",
        "env": [masked(e) for e in doc["env"]],
        "resolved_env": [masked(v) for v in resolved] if resolved is not None else None,
        "policy_version": doc.get("policy_version"), "errors": doc.get("errors", []),
        "policy_versions": doc.get("policy_versions"), "project": doc.get("project"),
        "warnings": [*doc.get("warnings", []), *(doc.get("received") or {}).get("warnings", [])],
        "exit_code": doc.get("exit_code"),
        "reason": doc.get("reason"), "created_at": doc["created_at"],
        "updated_at": doc["updated_at"], "events": doc.get("events", []), "note": NOTE,
        "drift": doc.get("drift"), "pinned_from": doc.get("pinned_from"),
        "rerun_of": doc.get("rerun_of"), "doctor": doc.get("doctor"),
        "files": task_files.summary(doc.get("files") or []),
        "replicas": doc.get("replicas") or 1,
        "procs_per_replica": doc.get("procs_per_replica") or 1,
        "nodes": doc.get("nodes") or 1,
        "replica_exit_codes": doc.get("replica_exit_codes"),
        "received": doc.get("received"),
        "per_node": doc.get("per_node"),
    }


# --- the resolved env as stored ---------------------------------------------------------
# Most of a stored record is the resolved env with its provenance.  It is stored as
# ``{"c": scope, "p": policy version, "r": entries}``: the scope and policy version most
# entries share said once, each entry with one-letter keys, without what an entry says
# by default (nothing overridden, not secret, the shared scope and version), and without
# a value the revision's own env holds in clear.  Read back, each entry is exactly what
# was written.  Records stored before this form (a list of whole entries) read as they are.
_SHORT = {"name": "n", "value": "v", "source": "s", "overrode": "o", "secret": "x",
          "scope": "c", "policy_version": "p", "when": "w", "shadowed": "h", "sealed": "z"}
_LONG = {short: long for long, short in _SHORT.items()}
_DEFAULTS: dict[str, Any] = {"overrode": [], "secret": False}


def compact_resolved(resolved: list[dict[str, Any]],
                     env: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The resolved env in its stored form (secrets already sealed)."""
    clear = _clear_values(env)
    common = _most_common([(e.get("scope"), e.get("policy_version")) for e in resolved])
    shared = dict(zip(("scope", "policy_version"), common, strict=True))
    return {"c": common[0], "p": common[1],
            "r": [_compact_entry(entry, clear, shared) for entry in resolved]}


def expand_resolved(stored: dict[str, Any] | list[dict[str, Any]],
                    env: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Inverse of :func:`compact_resolved`; a list of whole entries (older records) as it is."""
    if isinstance(stored, list):
        return stored
    clear = _clear_values(env)
    shared = {"scope": stored.get("c"), "policy_version": stored.get("p")}
    return [_expand_entry(entry, clear, shared) for entry in stored["r"]]


def _most_common(pairs: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    counts: dict[tuple[Any, Any], int] = {}
    for pair in pairs:
        counts[pair] = counts.get(pair, 0) + 1
    return max(counts, key=lambda pair: counts[pair]) if counts else (None, None)


def _clear_values(env: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The env's values that are stored in clear, by name."""
    return {e["name"]: e["value"] for e in env or []
            if not e.get("secret") and "value" in e and "name" in e}


def _compact_entry(entry: dict[str, Any], clear: dict[str, Any],
                   shared: dict[str, Any]) -> dict[str, Any]:
    out = {_SHORT.get(k, k): v for k, v in entry.items()
           if not (k in _DEFAULTS and v == _DEFAULTS[k]) and k not in shared}
    for key, common in shared.items():  # absent: the shared one; null: none at all
        if entry.get(key) != common:
            out[_SHORT[key]] = entry.get(key)
    if not entry.get("secret") and "value" in entry and clear.get(entry["name"]) == \
            entry["value"]:
        del out["v"]  # the user's own value, in the env beside it
        out["e"] = 1
    return out


def _expand_entry(entry: dict[str, Any], clear: dict[str, Any],
                  shared: dict[str, Any]) -> dict[str, Any]:
    out = {_LONG.get(k, k): v for k, v in entry.items() if k != "e"}
    if entry.get("e"):
        out["value"] = clear[out["name"]]
    for key, common in shared.items():
        out.setdefault(key, common)
        if out[key] is None:  # an entry without it, as Resolved.to_dict leaves it
            del out[key]
    return {**{k: list(v) if isinstance(v, list) else v for k, v in _DEFAULTS.items()},
            **out}

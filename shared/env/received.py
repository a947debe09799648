"""What each replica's process received of its env, and whether the replicas agree.

A launcher looks at each replica's environment where the step cannot alter it: the
last platform code before exec (a Slurm task, outside its sandbox), or the started
container's own configuration, from outside (podman).  Never the step's output, which
is the task's and may say anything.  A look is a :class:`Look`: every name the process
received, each with a keyed hash of its value (:func:`value_hash`, keyed with a secret
of the revision's launch that no record keeps, so a hash says nothing of a value to
whoever reads it, secrets included).

:func:`summary` compares the looks with the resolved env and with each other: the
resolved names whose value did not arrive as resolved, in each replica; the names the
runtime added beyond them (an image's ``ENV``, a node's environment), to every replica
or to some; and a digest per replica of the resolved values as received, equal in
every replica when each got the same env.  The names the platform sets per replica or
per node (identity, the interface chosen on the node) are left out by name, and so are
those the backend starts every process with (``backend_names``; names under
``backend_prefixes``, such as Slurm's own ``SLURM_*``, are named only when some replicas
have them and others not).  Each difference is a warning: names only, never a value.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from shared.env.identity import IDENTITY_NAMES, SOCKET_IFNAME_NAMES

RULE = "env.received"
# A record is bounded whatever a runtime adds: at most this many names per list, and at
# most this many replicas kept (replica 0, then those that differ from it).
MAX_NAMES = 50
MAX_REPLICAS_KEPT = 16
PLATFORM_PER_REPLICA = frozenset(IDENTITY_NAMES) | frozenset(SOCKET_IFNAME_NAMES)
HASH_CHARS = 24


def value_hash(key: bytes, value: str) -> str:
    """A value's keyed hash.  workers/launchers/slurm/job.py (standard library only, run on
    the nodes) computes the same: a test holds the two equal."""
    data = value.encode("utf-8", "surrogateescape")
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:HASH_CHARS]


@dataclass(frozen=True)
class Look:
    """One replica's environment as its process received it: name -> value hash."""

    replica: int
    hashes: Mapping[str, str]
    node: str = ""  # where it ran, as the launcher knows it
    # The platform's per-node defaults it got there (non-secret: kept in clear).
    node_values: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, replica: int, env: Mapping[str, str], key: bytes, node: str = "",
           node_values: Mapping[str, str] | None = None) -> Look:
        return cls(replica, {name: value_hash(key, value) for name, value in env.items()},
                   node, dict(node_values or {}))


@dataclass(frozen=True)
class Looks:
    """Every replica's look at one revision, as a launcher took them, with the key their
    hashes were made with and the names its backend starts every process with."""

    key: bytes
    looks: tuple[Look, ...]
    backend_names: tuple[str, ...] = ()
    backend_prefixes: tuple[str, ...] = ()

    def summary(self, resolved: Mapping[str, str]) -> dict[str, object]:
        return summary(resolved, self.looks, self.key, self.backend_names,
                       self.backend_prefixes)


def _capped(names: Collection[str]) -> tuple[list[str], int]:
    ordered = sorted(names)
    return ordered[:MAX_NAMES], max(0, len(ordered) - MAX_NAMES)


def _said(names: Collection[str]) -> str:
    shown, more = _capped(names)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def digest(resolved: Mapping[str, str], look: Look, key: bytes) -> str:
    """The replica's digest: the resolved names, each with the hash of what it received."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name in sorted(resolved):
        mac.update(f"{name}={look.hashes.get(name, '-')}\0".encode())
    return mac.hexdigest()[:32]


def summary(resolved: Mapping[str, str], looks: Sequence[Look], key: bytes,
            backend_names: Collection[str] = (), backend_prefixes: Sequence[str] = ()
            ) -> dict[str, object]:
    """The looks compared, as the revision keeps them (``received``): ``same`` (every
    replica's digest equal), ``added`` (names the runtime gave every replica), the
    replicas kept (replica 0 and those that differ), and the warnings."""
    looks = sorted(looks, key=lambda look: look.replica)
    expected = {name: value_hash(key, value) for name, value in resolved.items()}
    per_node = {name for look in looks for name in look.node_values}
    ignored = PLATFORM_PER_REPLICA | set(backend_names) | set(resolved) | per_node
    extras = {look.replica: {n for n in look.hashes if n not in ignored} for look in looks}
    common = set.intersection(*extras.values()) if extras else set()
    shown_common = {n for n in common if not n.startswith(tuple(backend_prefixes))}
    warnings: list[dict[str, object]] = []
    kept: list[dict[str, object]] = []
    digests = {look.replica: digest(resolved, look, key) for look in looks}
    first = digests[looks[0].replica] if looks else ""
    for look in looks:
        differs = sorted(n for n in resolved if look.hashes.get(n) != expected[n])
        own = extras[look.replica] - common
        entry: dict[str, object] = {"replica": look.replica, "digest": digests[look.replica]}
        if differs:
            entry["differs"] = _capped(differs)[0]
            warnings.append({"rule": RULE, "replica": look.replica, "names": entry["differs"],
                             "message": f"replica {look.replica} did not receive "
                                        f"{_said(differs)} as resolved (another value, or "
                                        "none)"})
        if own:
            entry["added"] = _capped(own)[0]
            warnings.append({"rule": RULE, "replica": look.replica, "names": entry["added"],
                             "message": f"replica {look.replica} received {_said(own)}, "
                                        "which the task's env does not set and not every "
                                        "replica received"})
        if look is looks[0] or differs or own or digests[look.replica] != first:
            kept.append(entry)
    if shown_common:
        warnings.append({"rule": RULE, "replica": None, "names": _capped(shown_common)[0],
                         "message": f"the runtime added {_said(shown_common)} to every "
                                    "replica: not in the task's env (an image's ENV, a "
                                    "node's environment)"})
    same = len(set(digests.values())) <= 1
    nodes = [{"replica": look.replica, "node": look.node, "values": dict(look.node_values)}
             for look in looks if look.node_values][:MAX_REPLICAS_KEPT]
    return {"same": same, "added": _capped(shown_common)[0],
            "replicas": kept[:MAX_REPLICAS_KEPT], "warnings": warnings,
            **({"per_node": nodes} if nodes else {})}

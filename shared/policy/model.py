"""The admins' policies and the merge that applies them to a user's env list.

A policy belongs to one scope: the platform's, or a project's (``scope`` ``"platform"`` or
``"project:<name>"``).  Precedence, highest first: platform identity variables >
platform protected > project protected > the task's own variables > project
defaults > platform defaults.  ``resolve_scopes`` is pure: the preview endpoint and
the policy worker call the same function, so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.env import envlist
from shared.env.envlist import EnvVar, Limits
from shared.env.identity import IDENTITY_NAMES, reserved_message
from shared.errors import Problem
from shared.policy import endpoints
from shared.policy.conditions import TaskFacts, When, applies, check_when, may_overlap, when_text
from shared.policy.endpoints import EndpointAllowance, allowance_problems
from shared.policy.hooks import DEFAULT_HOOKS, StartupHooks, withheld_warning
from shared.policy.rules import Rule, check_rule_entries, check_rules, entry_problems, valid_rules
from shared.secrets import MASK
from shared.types import DROP, ON_CONFLICT, REJECT, OnConflict

PLATFORM_NAMES = ("TASK_ID", "TASK_NAME", "TASK_ENV_REVISION", "TASK_POLICY_VERSION")
# Sources from lowest to highest precedence: where a resolved variable's value came from.
SOURCES = ("default", "user", "protected", "platform")
PLATFORM_SCOPE = "platform"
SCOPE_PREFIX = "project:"


def project_scope(name: str) -> str:
    """How a policy layer and a provenance entry name the project: ``project:<name>``."""
    return f"{SCOPE_PREFIX}{name}"


@dataclass(frozen=True)
class Default(EnvVar):
    """A default value, injected unless the task sets the name; maybe only for some tasks."""

    when: When | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.when is not None:
            out["when"] = self.when.to_dict()
        return out


@dataclass(frozen=True)
class Protected:
    name: str
    reason: str
    value: str | None = None  # None: the name is reserved, nothing is injected
    secret: bool = False
    when: When | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "reason": self.reason}
        if self.value is not None:
            out["value"] = self.value
        if self.secret:
            out["secret"] = True
        if self.when is not None:
            out["when"] = self.when.to_dict()
        return out


@dataclass(frozen=True)
class Policy:
    version: int = 0
    defaults: tuple[Default, ...] = ()
    protected: tuple[Protected, ...] = ()
    on_conflict: OnConflict = REJECT
    author: str | None = None
    created_at: float | None = None
    scope: str = PLATFORM_SCOPE
    rules: tuple[Rule, ...] = ()
    # A script read with no value and no default rejects the task instead of warning.
    strict_env: bool = False
    # The platform's only: the endpoint variables it lets one project's policy set.
    endpoint_allowances: tuple[EndpointAllowance, ...] = ()

    def __post_init__(self) -> None:
        # Plain EnvVar defaults (no condition) are accepted and kept as Default values.
        object.__setattr__(self, "defaults", tuple(_as_default(d) for d in self.defaults))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """A stored or checked policy; versions written before scopes and rules still load."""
        return cls(
            version=int(data.get("version", 0)),
            defaults=tuple(Default(d["name"], d["value"], bool(d.get("secret", False)),
                                   When.from_dict(d.get("when")))
                           for d in data.get("defaults", [])),
            protected=tuple(
                Protected(p["name"], p.get("reason", ""), p.get("value"),
                          bool(p.get("secret", False)), When.from_dict(p.get("when")))
                for p in data.get("protected", [])
            ),
            on_conflict=data.get("on_conflict", REJECT),
            author=data.get("author"),
            created_at=data.get("created_at"),
            scope=data.get("scope") or PLATFORM_SCOPE,
            rules=tuple(Rule.from_dict(r) for r in data.get("rules") or []),
            strict_env=bool(data.get("strict_env", False)),
            endpoint_allowances=tuple(EndpointAllowance.from_dict(a)
                                      for a in data.get(endpoints.FIELD) or []),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "version": self.version,
            "defaults": [d.to_dict() for d in self.defaults],
            "protected": [p.to_dict() for p in self.protected],
            "on_conflict": self.on_conflict,
            "author": self.author,
            "created_at": self.created_at,
            "scope": self.scope,
            "rules": [r.to_dict() for r in self.rules],
        }
        if self.strict_env:  # said only when set: versions written before it read the same
            out["strict_env"] = True
        if self.endpoint_allowances:
            out[endpoints.FIELD] = [a.to_dict() for a in self.endpoint_allowances]
        return out

    def allowed_endpoints(self, project: str | None) -> frozenset[str]:
        """The endpoint variables this (the platform's) policy lets ``project`` set."""
        return frozenset(a.name for a in self.endpoint_allowances if a.project == project)


def _as_default(entry: EnvVar) -> Default:
    return entry if isinstance(entry, Default) else Default(entry.name, entry.value, entry.secret)


@dataclass(frozen=True)
class Shadowed:
    """A layer a resolved variable took precedence over; ``value`` is masked if secret."""

    source: str
    scope: str | None
    value: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "scope": self.scope, "value": self.value}


@dataclass(frozen=True)
class Resolved:
    """One variable of the processed env, with where it came from."""

    name: str
    value: str
    source: str
    overrode: tuple[str, ...] = ()  # the sources in ``shadowed``, as older records hold them
    secret: bool = False
    scope: str | None = None
    policy_version: int | None = None
    when: str | None = None
    shadowed: tuple[Shadowed, ...] = ()

    @classmethod
    def of_user(cls, name: str, value: str, secret: bool) -> Resolved:
        """A user's variable that shadows nothing (most of a long list), equal to
        ``Resolved(name, value, "user", secret=secret)``.  Made without the frozen
        dataclass's ``__init__``, whose ``object.__setattr__`` per field was three
        quarters of the cost of each variable of a long list (docs/performance.md)."""
        made = object.__new__(cls)
        made.__dict__.update(name=name, value=value, source="user", overrode=(), secret=secret,
                             scope=None, policy_version=None, when=None, shadowed=())
        return made

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolved:
        """A stored entry; ``overrode`` holds layer names in older records, and may hold
        ``{source, scope, value}`` objects like ``shadowed``."""
        overrode = list(data.get("overrode") or [])
        detailed = data.get("shadowed") or [o for o in overrode if isinstance(o, Mapping)]
        # Every launch and every read of a task makes one per variable: filled as
        # ``of_user`` fills one, without the frozen ``__init__``.
        made = object.__new__(cls)
        made.__dict__.update(
            name=data["name"], value=data["value"], source=data["source"],
            overrode=tuple(o["source"] if isinstance(o, Mapping) else o for o in overrode),
            secret=bool(data.get("secret", False)), scope=data.get("scope"),
            policy_version=data.get("policy_version"), when=data.get("when"),
            shadowed=tuple(Shadowed(s["source"], s.get("scope"), s.get("value", ""))
                           for s in detailed))
        return made

    def to_dict(self) -> dict[str, Any]:
        """The keys every record has, then the provenance that says something: a user's
        variable that shadowed nothing reads as it did before layers existed."""
        out: dict[str, Any] = {"name": self.name, "value": self.value, "source": self.source,
                               "overrode": list(self.overrode), "secret": self.secret}
        extra = {"scope": self.scope, "policy_version": self.policy_version, "when": self.when}
        out.update({key: value for key, value in extra.items() if value is not None})
        if self.shadowed:
            out["shadowed"] = [s.to_dict() for s in self.shadowed]
        return out


@dataclass
class Resolution:
    policy_version: int
    variables: list[Resolved] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)  # scope -> policy version

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_env(self) -> dict[str, str]:
        return {v.name: v.value for v in self.variables}


def platform_env(task_id: str, task_name: str, revision: int, policy_version: int) -> list[EnvVar]:
    """The identity variables the platform always sets; nobody may override them."""
    values = (task_id, task_name, str(revision), str(policy_version))
    return [EnvVar(n, v) for n, v in zip(PLATFORM_NAMES, values, strict=True)]


# --- checking one policy -----------------------------------------------------------------

def check_policy(data: Mapping[str, Any], limits: Limits) -> list[Problem]:
    """Every reason one policy (any layer) cannot be saved, all at once."""
    defaults = list(data.get("defaults", []))
    protected = list(data.get("protected", []))
    problems = _check_lists(defaults, protected, limits)
    default_names = {d.get("name") for d in defaults if isinstance(d.get("name"), str)}
    for entry in [*defaults, *protected]:
        name = entry.get("name")
        if name in PLATFORM_NAMES:
            problems.append(Problem(
                rule="policy.platform_reserved", variable=name,
                message=f"{name} is set by the platform for every task; "
                        "a policy cannot default or protect it"))
    problems += _identity_entries(defaults, protected, data.get("rules"))
    problems += node_problems(defaults, protected, data.get("rules"))
    for entry in protected:
        problems += _check_protected_entry(entry, default_names)
    if data.get("on_conflict", REJECT) not in ON_CONFLICT:
        problems.append(Problem(
            rule="policy.on_conflict", field="on_conflict",
            message=f"on_conflict must be one of {', '.join(ON_CONFLICT)}"))
    if not isinstance(data.get("strict_env", False), bool):
        problems.append(Problem(rule="policy.strict_env", field="strict_env",
                                message="strict_env must be true or false"))
    problems += check_rule_entries(data.get("rules"))
    problems += allowance_problems(data.get(endpoints.FIELD))
    return problems + values_against_rules(data, valid_rules(data.get("rules")), "this policy's")


def node_problems(defaults: list[Any], protected: list[Any], rules: Any,
                  platform: bool = True) -> list[Problem]:
    """Every entry whose ``when.node`` cannot be: only the platform's non-secret defaults
    may depend on the node (resolved there by platform code), never a protected value, a
    rule or a secret, never a project's policy."""
    problems: list[Problem] = []
    lists = (("defaults", defaults), ("protected", protected),
             ("rules", rules if isinstance(rules, list) else []))
    for where, entries in lists:
        for index, entry in enumerate(entries):
            when = entry.get("when") if isinstance(entry, Mapping) else None
            if not isinstance(when, Mapping) or when.get("node") is None:
                continue
            name = entry.get("name") if isinstance(entry.get("name"), str) else None
            field = f"{where}[{index}].when.node"
            if where != "defaults":
                problems.append(Problem(
                    rule="when.node_kind", variable=name, field=field,
                    message=f"{field}: only a default may depend on the node (it is resolved "
                            f"there); a {where.rstrip('s')} entry holds for the whole task"))
            elif entry.get("secret"):
                problems.append(Problem(
                    rule="when.node_secret", variable=name, field=field,
                    message=f"{field}: a secret default may not depend on the node: per-node "
                            "values are resolved on the node and recorded in clear"))
            if not platform:
                problems.append(Problem(
                    rule="when.node_scope", variable=name, field=field,
                    message=f"{field}: only the platform's policy may depend on the node"))
    return problems


def _identity_entries(defaults: list[Any], protected: list[Any], rules: Any) -> list[Problem]:
    """Every entry naming a replica's identity variable: the platform sets those per replica."""
    problems: list[Problem] = []
    lists = (("defaults", defaults), ("protected", protected),
             ("rules", rules if isinstance(rules, list) else []))
    for where, entries in lists:
        for index, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if name in IDENTITY_NAMES:
                problems.append(Problem(
                    rule="policy.platform_identity", variable=name,
                    field=f"{where}[{index}].name", message=reserved_message(name)))
    return problems


def _check_lists(defaults: list[Any], protected: list[Any], limits: Limits) -> list[Problem]:
    problems = envlist.validate(defaults, limits, where="defaults")
    # A protected entry without a value still needs a valid name; "" stands in for its value
    # so that every entry is checked at its own position.
    problems += envlist.validate([_as_entry(p) for p in protected], limits, where="protected")
    # Two entries of one name are fine when no task can match both of their conditions.
    problems = [p for p in problems if p.rule != "name.duplicate"]
    for where, entries in (("defaults", defaults), ("protected", protected)):
        problems += _duplicates(entries, where)
        problems += [p for i, e in enumerate(entries)
                     for p in check_when(e.get("when"), f"{where}[{i}].when")]
    return problems


def _as_entry(protected: Mapping[str, Any]) -> dict[str, Any]:
    """A protected entry as an env entry; a secret value must be long enough to redact."""
    value = protected.get("value")
    if value is None:
        return {"name": protected.get("name"), "value": ""}  # reserved: nothing is injected
    return {"name": protected.get("name"), "value": value,
            "secret": protected.get("secret", False)}


def _duplicates(entries: list[Any], where: str) -> list[Problem]:
    seen: dict[str, list[tuple[int, When | None]]] = {}
    problems: list[Problem] = []
    for index, entry in enumerate(entries):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        when = _when_of(entry)
        first = next((i for i, w in seen.get(name, []) if may_overlap(w, when)), None)
        if first is not None:
            problems.append(Problem(
                rule="name.duplicate", variable=name, field=f"{where}[{index}].name",
                message=f"{name} is set twice ({where}[{first}] and {where}[{index}]) for the "
                        "same tasks; set each variable once, or give the entries conditions "
                        "no task can match both of"))
        seen.setdefault(name, []).append((index, when))
    return problems


def _when_of(entry: Mapping[str, Any]) -> When | None:
    """An entry's condition; an invalid one counts as none (it is reported on its own)."""
    raw = entry.get("when")
    return When.from_dict(raw) if not check_when(raw, "when") else None


def _check_protected_entry(entry: Mapping[str, Any], default_names: set[Any]) -> list[Problem]:
    name = entry.get("name")
    label = name if isinstance(name, str) else None
    problems: list[Problem] = []
    if label in default_names:
        problems.append(Problem(
            rule="policy.ambiguous", variable=label,
            message=f"{label} is both a default and protected; keep it in one list "
                    "(a protected entry with a value is injected into every task)"))
    if not str(entry.get("reason") or "").strip():
        problems.append(Problem(
            rule="policy.reason_required", variable=label,
            message=f"{label or 'a protected entry'}: a protected variable needs a reason "
                    "users can read"))
    return problems


def values_against_rules(data: Mapping[str, Any], rules: Sequence[Rule], whose: str,
                         scope: str | None = None) -> list[Problem]:
    """The policy's default and protected values that break ``rules`` (``whose`` names the
    rules' layer in messages) for some task both could apply to."""
    problems: list[Problem] = []
    for where, kind in (("defaults", "default"), ("protected", "protected value")):
        for index, entry in enumerate(data.get(where, [])):
            if _is_plain_value(entry):
                var = EnvVar(entry["name"], entry["value"], bool(entry.get("secret")))
                problems += entry_problems(var, _when_of(entry), rules, f"{where}[{index}].value",
                                           f"{kind} breaks {whose} rule:", scope)
    return problems


def _is_plain_value(entry: Any) -> bool:
    return (isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
            and isinstance(entry.get("value"), str))


# --- resolving a task's env through the chain of scopes ---------------------------------

def node_defaults(platform: Policy, task: TaskFacts, resolved: Collection[str]
                  ) -> list[dict[str, Any]]:
    """The platform's defaults that depend on the node and may reach this task, for the
    launcher to resolve on each node: those whose other conditions the task matches, of a
    name its resolved env does not hold (a default never overrides)."""
    return [{"name": d.name, "value": d.value, "node": d.when.node,
             "policy_version": platform.version}
            for d in platform.defaults
            if d.when is not None and d.when.node is not None and not d.secret
            and d.when.matches_task(task) and d.name not in resolved]


@dataclass(frozen=True)
class _Entry:
    """One policy's active entry for a name."""

    policy: Policy
    value: str | None
    secret: bool
    when: When | None
    reason: str = ""

    def resolved(self, name: str, source: str, shadowed: list[Shadowed]) -> Resolved:
        return Resolved(name, self.value or "", source, _sources(shadowed), self.secret,
                        self.policy.scope, self.policy.version, when_text(self.when),
                        tuple(shadowed))

    def as_shadowed(self, source: str) -> Shadowed:
        return Shadowed(source, self.policy.scope, MASK if self.secret else self.value or "")


def resolve(user_env: Iterable[EnvVar], policy: Policy, platform: Iterable[EnvVar],
            task: TaskFacts | None = None) -> Resolution:
    """One policy only: the platform's policy, as before projects existed."""
    return resolve_scopes(user_env, [policy], platform, task or TaskFacts())


def resolve_scopes(user_env: Iterable[EnvVar], policies: Sequence[Policy],
                   platform: Iterable[EnvVar], task: TaskFacts,
                   hooks: StartupHooks = DEFAULT_HOOKS,
                   pinned: Iterable[Mapping[str, Any]] = ()) -> Resolution:
    """Merge the policies' defaults and protected values, the task's own list and the platform
    variables, then check every policy's rules.  ``policies`` go highest scope first.
    ``pinned``: a pinned rerun's defaults, as an earlier revision resolved them (name,
    value, secret, scope, policy version): they stand in for today's defaults, still as
    defaults, wherever nothing the user set or a policy protects holds the name.

    A project policy never gives a start-up hook variable (``hooks``) a value, nor an
    endpoint variable (``hooks.endpoints``) the platform's policy does not allow the
    project, even a version stored before such policies were refused: see
    :func:`_without_hooks`."""
    result = Resolution(policy_version=policies[0].version if policies else 0,
                        versions={policy.scope: policy.version for policy in policies})
    admins = policies[0] if policies and policies[0].scope == PLATFORM_SCOPE else None
    policies = [_without_hooks(policy, hooks, task, result, admins) for policy in policies]
    pinned = _pins_allowed(pinned, hooks, admins, result)
    policies = [_without_identity(policy, result) for policy in policies]
    platform = list(platform)
    protected = _active(policies, task, protected=True)
    defaults = _active(policies, task, protected=False)
    accepted, dropped = _admit(user_env, {v.name for v in platform}, protected, result)
    for name, entries in protected.items():
        top = entries[0]
        if top.value is not None:
            shadowed = _user_shadow(dropped.get(name)) + [e.as_shadowed("protected")
                                                          for e in entries[1:] if e.value]
            shadowed += [e.as_shadowed("default") for e in defaults.get(name, [])]
            result.variables.append(top.resolved(name, "protected", shadowed))
    user_names = {v.name for v in accepted}
    for name, entries in defaults.items():
        if name not in protected and name not in user_names:
            shadowed = [e.as_shadowed("default") for e in entries[1:]]
            result.variables.append(entries[0].resolved(name, "default", shadowed))
    _pin_defaults(result, pinned, defaults, taken=set(protected) | user_names)
    for var in accepted:
        below = defaults.get(var.name)
        if below is None:  # most of a long list: nothing of a policy to record under it
            result.variables.append(Resolved.of_user(var.name, var.value, var.secret))
            continue
        shadowed = [e.as_shadowed("default") for e in below]
        result.variables.append(Resolved(var.name, var.value, "user", _sources(shadowed),
                                         var.secret, shadowed=tuple(shadowed)))
    # Platform variables go first, where a reader looks for the task's identity.  The order
    # carries no meaning for values: references are never expanded (see shared.task.manifest).
    result.variables[:0] = [Resolved(v.name, v.value, "platform") for v in platform]
    for policy in policies:
        for rule in policy.rules:  # a rule's severity says where what it finds goes
            found = check_rules(result.variables, [rule], task, _scope_name(policy))
            (result.warnings if rule.severity == "warning" else result.errors).extend(found)
    return result


def _pin_defaults(result: Resolution, pinned: Iterable[Mapping[str, Any]],
                  defaults: dict[str, list[_Entry]], taken: set[str]) -> None:
    """Each pinned default replaces today's default of its name (today's value, if it
    differs, is what it took precedence over), or is added where today has none."""
    at = {v.name: i for i, v in enumerate(result.variables)}
    for old in pinned:
        name = old["name"]
        if name in taken:
            continue
        shadowed = [e.as_shadowed("default") for e in defaults.get(name, [])
                    if e.value != old["value"]]
        var = Resolved(name, old["value"], "default", _sources(shadowed),
                       bool(old.get("secret")), old.get("scope"), old.get("policy_version"),
                       shadowed=tuple(shadowed))
        if name in at:
            result.variables[at[name]] = var
        else:
            result.variables.append(var)


def _without_hooks(policy: Policy, hooks: StartupHooks, task: TaskFacts,
                   result: Resolution, platform: Policy | None = None) -> Policy:
    """A project policy as it may apply: its defaults of start-up hook names, and of
    endpoint variables ``platform`` does not allow the project, left out; its protected
    values of them made reservations (members still cannot set the name); each one that
    would have reached this task reported as a warning.  Versions are immutable, so this is
    done where they are used, not where they are stored."""
    if policy.scope == PLATFORM_SCOPE:
        return policy
    withheld = _withholding(policy.scope, policy.version, hooks, platform)
    defaults = tuple(d for d in policy.defaults if withheld(d.name) is None)
    protected = tuple(replace(p, value=None, secret=False)
                      if p.value is not None and withheld(p.name) else p
                      for p in policy.protected)
    if len(defaults) == len(policy.defaults) and protected == policy.protected:
        return policy
    entries: list[Default | Protected] = [*policy.defaults, *policy.protected]
    warnings = (withheld(e.name) for e in entries if e.value is not None and applies(e.when, task))
    result.warnings += [w for w in warnings if w is not None]
    return replace(policy, defaults=defaults, protected=protected)


def _withholding(scope: str, version: int, hooks: StartupHooks,
                 platform: Policy | None) -> Callable[[str], Problem | None]:
    """For a name, the warning a task carries when ``scope``'s (a project's) value of it is
    withheld: a start-up hook, or an endpoint variable the platform does not allow the
    project; None when the project may give it a value."""
    project = scope.removeprefix(SCOPE_PREFIX)
    allowed = platform.allowed_endpoints(project) if platform is not None else frozenset()

    def withheld(name: str) -> Problem | None:
        hook = hooks.why(name)
        if hook is not None:
            return withheld_warning(name, scope, version, hook)
        endpoint = hooks.endpoints.why(name)
        if endpoint is not None and name not in allowed:
            return endpoints.withheld_warning(name, scope, version, endpoint)
        return None

    return withheld


def _pins_allowed(pinned: Iterable[Mapping[str, Any]], hooks: StartupHooks,
                  platform: Policy | None, result: Resolution) -> list[Mapping[str, Any]]:
    """A pinned rerun's defaults less a project's values ``_without_hooks`` withholds today
    (a revision resolved before they were, or under an allowance since withdrawn), each
    reported as a warning."""
    kept: list[Mapping[str, Any]] = []
    for old in pinned:
        scope = old.get("scope")
        if isinstance(scope, str) and scope.startswith(SCOPE_PREFIX):
            warning = _withholding(scope, int(old.get("policy_version") or 0), hooks,
                                   platform)(old["name"])
            if warning is not None:
                result.warnings.append(warning)
                continue
        kept.append(old)
    return kept


def _without_identity(policy: Policy, result: Resolution) -> Policy:
    """The policy without the entries a version stored before replicas existed may hold on a
    replica's identity variable (a policy naming one can no longer be saved): each is left
    out of every task, with a warning naming it, until the admins save a version without it."""
    names = [*(d.name for d in policy.defaults), *(p.name for p in policy.protected),
             *(r.name for r in policy.rules)]
    named = [name for name in names if name in IDENTITY_NAMES]
    if not named:
        return policy
    for name in dict.fromkeys(named):
        result.warnings.append(Problem(
            rule="policy.identity_ignored", variable=name,
            message=f"{_scope_name(policy)}'s policy version {policy.version} names {name}, "
                    f"which the platform sets per replica: its entry is ignored"))
    return replace(policy,
                   defaults=tuple(d for d in policy.defaults if d.name not in IDENTITY_NAMES),
                   protected=tuple(p for p in policy.protected if p.name not in IDENTITY_NAMES),
                   rules=tuple(r for r in policy.rules if r.name not in IDENTITY_NAMES))


def _active(policies: Sequence[Policy], task: TaskFacts,
            protected: bool) -> dict[str, list[_Entry]]:
    """Per name, the entries whose condition matches the task, highest precedence first:
    a higher scope's protected entry wins, a lower scope's default (closer to the task) wins."""
    found: dict[str, list[_Entry]] = {}
    for policy in (policies if protected else reversed(policies)):
        if protected:
            entries = [(p.name, _Entry(policy, p.value, p.secret, p.when, p.reason))
                       for p in policy.protected]
        else:
            entries = [(d.name, _Entry(policy, d.value, d.secret, d.when)) for d in policy.defaults]
        for name, entry in entries:
            if applies(entry.when, task):
                found.setdefault(name, []).append(entry)
    return found


def _admit(user_env: Iterable[EnvVar], reserved: set[str], protected: dict[str, list[_Entry]],
           result: Resolution) -> tuple[list[EnvVar], dict[str, EnvVar]]:
    """The user's variables no higher policy holds, and those dropped in ``drop`` mode."""
    accepted: list[EnvVar] = []
    dropped: dict[str, EnvVar] = {}
    for var in user_env:
        if var.name in IDENTITY_NAMES:
            result.errors.append(Problem(rule="platform.identity", variable=var.name,
                                         message=reserved_message(var.name)))
        elif var.name in reserved:
            result.errors.append(Problem(
                rule="platform.reserved", variable=var.name,
                message=f"{var.name} is set by the platform for every task and cannot be set"))
        elif var.name in protected:
            holder = protected[var.name][0]
            if _conflict(result, var, holder):
                dropped[var.name] = var
        else:
            accepted.append(var)
    return accepted, dropped


def _conflict(result: Resolution, var: EnvVar, holder: _Entry) -> bool:
    """Report a user variable a policy protects; True when it is dropped, not rejected.
    The policy that protects the name decides, by its own ``on_conflict``."""
    by = _scope_name(holder.policy)
    if holder.policy.on_conflict == DROP:
        result.warnings.append(Problem(
            rule="policy.protected", variable=var.name,
            message=f"{var.name} was not set: it is protected by {by} ({holder.reason})"))
        return True
    result.errors.append(Problem(
        rule="policy.protected", variable=var.name,
        message=f"{var.name} is protected by {by} and cannot be set: {holder.reason}"))
    return False


def _user_shadow(var: EnvVar | None) -> list[Shadowed]:
    return [] if var is None else [Shadowed("user", None, MASK if var.secret else var.value)]


def _sources(shadowed: list[Shadowed]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.source for s in shadowed))


def _scope_name(policy: Policy) -> str:
    """How messages name a policy: "the platform" or "project vision"."""
    if policy.scope == PLATFORM_SCOPE:
        return "the platform"
    return f"project {policy.scope.removeprefix('project:')}"

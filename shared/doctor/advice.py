"""Advice on an env list against the catalog: likely typos and values outside the docs.

Pure functions.  Advice never blocks by itself: each finding is a warning (a
:class:`~shared.errors.Problem` whose rule starts with ``doctor.``), unless a policy rule
with ``documented: true`` and severity ``error`` covers the name (see ``documented``).
A secret's value is never looked at: whether it is one of the documented values would
tell something about it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rapidfuzz.distance import OSA

from shared.doctor.catalog import HF_FALSE, HF_TRUE, Catalog, Entry, family, one_word
from shared.env.envlist import MAX_NAME_LENGTH
from shared.errors import Problem
from shared.policy.rules import Valued

NEAR_MISS = "doctor.near_miss"
VALUE = "doctor.value"
MAX_SHOWN = 40  # characters of a value quoted in a message


# --- names -----------------------------------------------------------------------------------

def distance(a: str, b: str, limit: int = 3) -> int:
    """Edit distance with adjacent transpositions (``DEBGU`` is one edit from ``DEBUG``);
    anything above ``limit`` comes back as ``limit + 1``.  rapidfuzz's optimal string
    alignment, in C and bit-parallel (64 characters a machine word): for two names at the
    length limit a few thousand word operations, where the pure-Python table it replaces
    took their product in interpreted steps."""
    return int(OSA.distance(a, b, score_cutoff=limit))


def allowed_edits(name: str) -> int:
    """How many edits still make a likely typo: none up to three characters (``LR`` and
    ``LN`` are different variables), one up to seven, two from eight on (``NCCL_DEBGU``)."""
    return 0 if len(name) <= 3 else 2 if len(name) >= 8 else 1


def of_one_family(a: str, b: str) -> bool:
    """Both of one library's prefix; two one-word names (``PRECISION``) are of one family."""
    if one_word(a) and one_word(b):
        return True
    return family(a).upper() == family(b).upper()


def initials(name: str) -> str:
    """``LR`` of ``LEARNING_RATE``: what an abbreviation of a long name looks like."""
    parts = [p for p in name.split("_") if p]
    return "".join(p[0] for p in parts) if len(parts) > 1 else ""


def likely(name: str, known: Iterable[str], same_family: bool = True,
           abbreviations: bool = False) -> list[str]:
    """The known names ``name`` most likely meant, closest first (at most three); none
    when ``name`` is itself known.  Same family prefix (unless ``same_family`` is off),
    within :func:`allowed_edits`; with ``abbreviations``, a name whose initials are
    ``name`` (or the other way round) counts too.

    A name past :data:`~shared.env.envlist.MAX_NAME_LENGTH` is no one's variable: it is
    neither guessed for (a script may read any name) nor guessed, so the work stays
    bounded by the limit whatever a tenant writes."""
    if len(name) > MAX_NAME_LENGTH:
        return []
    known = [other for other in known if len(other) <= MAX_NAME_LENGTH]
    if name in known:
        return []
    limit = allowed_edits(name)
    upper = name.upper()
    short = initials(name) if abbreviations else ""
    scored: list[tuple[int, str]] = []
    for other in known:
        if same_family and not of_one_family(name, other):
            continue
        if other.upper() == upper:  # same name, other case: the likeliest of all
            scored.append((0, other))
            continue
        # Cheap tests first: most names are too long or too short to be a typo.
        edits = distance(name, other, limit) if abs(len(other) - len(name)) <= limit \
            else limit + 1
        if edits <= limit:
            scored.append((edits, other))
        elif abbreviations and ((len(upper) <= 6 and upper == initials(other))
                                or short == other.upper()):
            scored.append((limit + 1, other))
    return [other for _, other in sorted(scored)[:3]]


def near_misses(names: Iterable[str], catalog: Catalog) -> list[Problem]:
    """A warning for each name the catalog does not document but is close to one it does."""
    problems: list[Problem] = []
    for name in dict.fromkeys(names):
        if name in catalog:
            continue
        guesses = likely(name, catalog.kin(name))
        if guesses:
            problems.append(near_miss(name, guesses, catalog))
    return problems


def near_miss(name: str, guesses: Sequence[str], catalog: Catalog,
              rule: str = NEAR_MISS, note: str = "") -> Problem:
    best = catalog.get(guesses[0])
    about = f" ({best.description})" if best is not None and best.description else ""
    others = f"; or {', '.join(guesses[1:])}" if len(guesses) > 1 else ""
    return Problem(rule=rule, variable=name,
                   message=f"{name} is not a documented variable: did you mean "
                           f"{guesses[0]}{about}{others}? Set as typed, it is likely "
                           f"ignored{note}")


# --- values ----------------------------------------------------------------------------------

def value_warnings(variables: Iterable[Valued], catalog: Catalog) -> list[Problem]:
    """A warning for each documented variable whose value is outside what its source states."""
    problems: list[Problem] = []
    for var in variables:
        entry = catalog.get(var.name)
        if entry is None or var.secret:
            continue
        why = outside(entry, var.value)
        if why:
            where = f" ({entry.source})" if entry.source else ""
            problems.append(Problem(rule=VALUE, variable=var.name,
                                    message=f"{var.name}: {why}{where}"))
    return problems


def outside(entry: Entry, value: str) -> str | None:
    """Why ``value`` is outside ``entry``'s documented values or type, as a clause that
    names what it is about (``the value 'verbose' is not one of ...``, ``'expandable_segment'
    is not a documented option ...``); None if it is not."""
    check = _CHECKS.get(entry.type)
    return check(entry, value) if check is not None else None


def _enum(entry: Entry, value: str) -> str | None:
    if not entry.values or _member(entry, value.strip()):
        return None
    return f"the value {_shown(value)} is not one of the documented values {_listing(entry.values)}"


def _list(entry: Entry, value: str) -> str | None:
    wrong = [item for item in value.split(",") if not _member(entry, item.strip())]
    if not entry.values or not wrong:
        return None
    return (f"the value {_shown(value)} has {_listing(tuple(wrong))}, not among the "
            f"documented values {_listing(entry.values)}")


def _options(entry: Entry, value: str) -> str | None:
    """``key:value,key:value``: each key must be a documented option.  Each wrong item is
    named on its own (``'expandable_segment' is not a documented option (did you mean
    'expandable_segments'?)``), then the documented options."""
    problems: list[str] = []
    for item in (i.strip() for i in value.split(",") if i.strip()):
        key, colon, _ = item.partition(":")
        if not colon:
            problems.append(f"{item!r} is not of the form option:value")
        elif entry.values and key.strip() not in entry.values:
            guesses = likely(key.strip(), entry.values, same_family=False)
            hint = f" (did you mean {guesses[0]!r}?)" if guesses else ""
            problems.append(f"{key.strip()!r} is not a documented option{hint}")
    if not problems:
        return None
    return "; ".join(problems) + f"; documented options: {_listing(entry.values)}"


def _number(entry: Entry, value: str) -> str | None:
    try:
        number = int(value.strip()) if entry.type == "int" else float(value.strip())
    except ValueError:
        return (f"the value {_shown(value)} is not "
                f"{'a whole number' if entry.type == 'int' else 'a number'}")
    if entry.min is not None and number < entry.min:
        return f"the value {_shown(value)} is below the documented minimum {entry.min:g}"
    if entry.max is not None and number > entry.max:
        return f"the value {_shown(value)} is above the documented maximum {entry.max:g}"
    return None


def _hf_bool(entry: Entry, value: str) -> str | None:
    if value.strip().upper() in HF_TRUE + HF_FALSE:
        return None
    return (f"the value {_shown(value)} is read as false: only {', '.join(HF_TRUE)} "
            "(any case) mean true")


def _member(entry: Entry, value: str) -> bool:
    if entry.case_insensitive:
        return value.upper() in {v.upper() for v in entry.values}
    return value in entry.values


_CHECKS: dict[str, Any] = {"enum": _enum, "list": _list, "options": _options, "int": _number,
                           "float": _number, "hf_bool": _hf_bool}


def _listing(values: tuple[str, ...]) -> str:
    shown = ", ".join(values[:12])
    return shown + (f" (and {len(values) - 12} more)" if len(values) > 12 else "")


def _shown(value: str) -> str:
    return repr(value if len(value) <= MAX_SHOWN else value[:MAX_SHOWN] + "...")


# --- all of it ---------------------------------------------------------------------------------

def advise(variables: Sequence[Valued], catalog: Catalog) -> list[Problem]:
    """Every warning for these variables: near-misses first, then values."""
    return near_misses((v.name for v in variables), catalog) + value_warnings(variables,
                                                                               catalog)

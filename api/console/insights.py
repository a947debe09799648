"""Where users hit the policy: counts for admins and project maintainers.

Tasks by state over the last day and the last week, the rules and protected
variables that rejected the most tasks, and the names the doctor most often took for a
typo of a documented one, by name (never a value), from the per-day counters of
:mod:`shared.store.insights`: the page reads twenty-four small hashes whatever the
number of tasks (three counters a day for the last 7 days, today's read twice).  Admins
see every task, or one project's with ``?project=``; a maintainer sees the projects they
maintain.
"""

from __future__ import annotations

from typing import Any

from flask import g, request

from api import auth
from api.console.blueprint import bp
from api.console.pages import page
from api.context import svc
from shared.errors import Forbidden
from shared.task import states

WINDOWS = (("today", 1), ("last 7 days", 7))


def _projects_shown() -> tuple[list[str], str | None]:
    """The projects this reader may choose from, and the one asked for (None: all tasks)."""
    who = auth.identity()
    choices = svc().projects.overseen_by(who.owner, who.is_admin)
    asked = request.args.get("project") or None
    if asked is None and not who.is_admin:
        if not choices:
            raise Forbidden("Only admins and project maintainers see where tasks are rejected.")
        asked = choices[0]
    if asked is not None and asked not in choices:
        raise Forbidden(f"You do not maintain project {asked}.")
    return choices, asked


@bp.get("/ui/insights")
def insights() -> Any:
    choices, project = _projects_shown()
    counters = svc().tasks.insights
    by_state = {label: counters.states(days, project) for label, days in WINDOWS}
    rejections = {label: counters.rejections(days, project) for label, days in WINDOWS}
    near_misses = {label: counters.top_near_misses(days, project) for label, days in WINDOWS}
    return page("insights.html", project=project, choices=choices, windows=WINDOWS,
                by_state=by_state, rejections=rejections, near_misses=near_misses,
                states=states.ALL)


@bp.context_processor
def insights_link() -> dict[str, Any]:
    """Whether the navigation offers the insights page (admins and maintainers)."""
    def may_see_insights() -> bool:
        who = g.get("identity")
        return who is not None and (who.is_admin or bool(
            svc().projects.maintained_by(who.owner)))
    return {"may_see_insights": may_see_insights}

"""The dashboard's part of the acts on record (store/acts.py): who a POST acts as, and
the ``/acts`` page listing them, filterable.

Every action POST of the dashboard (pause, resume, purge a queue; requeue, move, purge
dead letters) is written as an act in the change's transaction, by
:meth:`.auth.Auth.actor_name` (``web:<user>``) with the form's optional ``reason``. The
page shows every stored value through Jinja's autoescape, as the other pages do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import AlkstoreError
from ..store.acts import ACT_NAMES, ActFilter, Actor
from .filters import parse_time

if TYPE_CHECKING:
    from .app import Dashboard

#: Acts a page lists (newest first; a link reads the next page).
ACTS_PAGE = 100


def actor_for(dashboard: Dashboard, request: Request, form: Any) -> Actor:
    """The actor of an action POST: the authenticated client's name and the form's
    ``reason`` (empty: none). ConfigurationError when the reason is not a code (too
    long, a line break or control character)."""
    reason = (form.get("reason") or "").strip() or None
    return Actor(dashboard.auth.actor_name(request), reason).checked()


def acts_filter(params: Any) -> ActFilter:
    """The page's filter from its query fields (``queue``, ``by``, ``act``, ``since``:
    an ISO time or epoch seconds, ``before``: the last id of the previous page);
    ValueError or AlkstoreError for a bad one."""
    before = (params.get("before") or "").strip()
    where = ActFilter(
        queue=(params.get("queue") or "").strip() or None,
        by=(params.get("by") or "").strip() or None,
        act=(params.get("act") or "").strip() or None,
        since=parse_time(params.get("since")),
        before_id=int(before) if before else None,
    )
    where.params()  # refuses an unknown act or a bad queue name now
    return where


def acts_page(dashboard: Dashboard, request: Request) -> Response:
    """``/acts``: the acts on record matching the filters, newest first."""
    try:
        where = acts_filter(request.query_params)
    except (AlkstoreError, ValueError) as exc:
        return dashboard.refuse(request, f"bad filter: {exc}", 400)
    acts = dashboard.store.acts(where, limit=ACTS_PAGE + 1)
    more = len(acts) > ACTS_PAGE
    acts = acts[:ACTS_PAGE]
    query = {
        k: (request.query_params.get(k) or "").strip()
        for k in ("queue", "by", "act", "since")
        if (request.query_params.get(k) or "").strip()
    }
    next_query = {**query, "before": str(acts[-1].id)} if more else None
    return dashboard.render(
        request,
        "acts.html",
        acts=acts,
        query=query,
        next_query=next_query,
        act_names=ACT_NAMES,
        page=ACTS_PAGE,
    )

"""The dashboard: a Starlette app rendering Jinja2 templates (autoescaped), over a store.

Reads are open; every action is a POST that needs write access and a CSRF token (see
:mod:`.auth`). Nothing from a request reaches SQL but as a bound parameter of a store
method.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ..errors import AlkstoreError
from ..present import fmt_age, fmt_time
from ..store import Store
from ..store.options import validate_name
from . import beat, chart, guards, metrics
from .acts import actor_for, acts_page
from .auth import Auth
from .bulk import BulkRunner, apply
from .consumers import Inspector
from .filters import filter_query, parse_filter
from .messages import describe
from .sampler import Sampler

#: Every action taken through the dashboard, with the client's address (INFO).
audit = logging.getLogger("kombu_alkstore.web.audit")
TEMPLATES = Path(__file__).with_name("templates")
#: Where a form may send the browser back to: a path here ("//host" or "/\\host" would
#: leave the site).
SAFE_BACK = re.compile(r"^/(?![/\\])[\w\-./?=&%:+~]*$")
PAGE_SIZE = 50
#: Matching dead letters are counted up to this many on a page (then "1,000+"), so a
#: page with a text filter stops reading once that many matched.
COUNT_CAP = 1_000
#: Dead letters a page reads at most for a filter no index serves (task name, error text).
SCAN_WINDOW = 100_000
PEEK_DEFAULT, PEEK_MAX = 20, 500
#: Delayed tasks the scheduled page lists at most (soonest first; it says when more exist).
SCHEDULED_LIMIT = 100


@dataclass
class Config:
    """How the dashboard runs (see ``kombu-alkstore web --help``)."""

    token: str | None = None
    refresh: float = 5.0
    inspect: bool = True
    broker_url: str | None = None
    #: Seconds between two ``inspect active/reserved`` rounds (consumers page).
    inspect_every: float = 10.0


def page_time(ts: float | None) -> str:
    """Local wall time without the UTC offset, as every page shows a time (``-`` for
    None)."""
    return fmt_time(ts, offset=False)


class Dashboard:
    """The dashboard's state: the store, the sampler, bulk actions, the templates."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.auth = Auth(config.token)
        self.sampler = Sampler(store, config.refresh)
        self.bulk = BulkRunner(store, self.sampler.poke)
        self.inspector = (
            Inspector(config.broker_url, store.options.schema, config.inspect_every)
            if config.inspect and config.broker_url
            else None
        )
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html", "svg"], default=True),
        )
        self.env.filters.update(time=page_time, age=fmt_age)

    # ---------------------------------------------------------------- plumbing
    def render(
        self, request: Request, template: str, status: int = 200, **ctx: Any
    ) -> HTMLResponse:
        snap = self.sampler.snapshot
        ctx.update(
            request=request,
            writable=self.auth.may_write(request),
            write_configured=self.auth.writable,
            csrf=self.auth.csrf_token(request),
            snap=snap,
            where=f"{self.store.url.masked()} (schema {self.store.options.schema})",
            now=time.time(),
            urlencode=urlencode,
            flash=self._flash(request),
        )
        html = self.env.get_template(template).render(**ctx)
        return HTMLResponse(html, status_code=status)

    def refuse(self, request: Request, why: str, status: int = 403) -> HTMLResponse:
        return self.render(request, "error.html", status=status, message=why)

    async def form(self, request: Request) -> tuple[Any, HTMLResponse | None]:
        """The POSTed form, or the refusal when the POST is not allowed."""
        form = await request.form()
        why = self.auth.check_post(request, form.get("csrf"))
        if why:
            status = 401 if why.startswith("read-only") else 403
            return form, self.refuse(request, why, status)
        return form, None

    def done(self, url: str, message: str, request: Request | None = None) -> RedirectResponse:
        """Redirect to ``url`` (after a POST) with ``message`` shown there, signed so a
        link made elsewhere cannot put words on the dashboard; the action is logged."""
        client = request.client.host if request is not None and request.client else "?"
        audit.info("%s: %s", client, message)
        self.sampler.poke()
        sep = "&" if "?" in url else "?"
        query = urlencode({"flash": message, "fs": self._sign(message)})
        return RedirectResponse(f"{url}{sep}{query}", status_code=303)

    def _sign(self, message: str) -> str:
        return hmac.new(self.auth.secret, b"flash:" + message.encode(), "sha256").hexdigest()[:32]

    def _flash(self, request: Request) -> str | None:
        message = request.query_params.get("flash")
        sig = request.query_params.get("fs") or ""
        if message and hmac.compare_digest(sig, self._sign(message)):
            return message
        return None

    # ------------------------------------------------------------------- pages
    def overview(self, request: Request) -> Response:
        snap = self.sampler.snapshot
        queue = request.query_params.get("chart") or None
        rows = []
        for name in snap.queue_names():
            c = snap.queue(name)
            rin, rout = chart.last_minutes_rate(snap.rates, name, snap.taken_at or time.time())
            rows.append(
                {
                    "c": c,
                    "paused": name in snap.paused,
                    "rin": rin,
                    "rout": rout,
                    "limit": snap.limits.get(name),
                }
            )
        return self.render(
            request,
            "overview.html",
            rows=rows,
            chart=chart.build(snap.rates, queue, snap.taken_at or None),
            chart_queue=queue,
        )

    def queue(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            validate_name(name, "queue name")
            n = min(max(int(request.query_params.get("n", PEEK_DEFAULT)), 1), PEEK_MAX)
        except (AlkstoreError, ValueError) as exc:
            return self.refuse(request, str(exc), 400)
        snap = self.sampler.snapshot
        if not guards.queue_known(self.store, name, snap.queue_names()):
            why = (
                f"no queue named {name!r}: no worker or publisher declared it and it holds "
                "no messages or dead letters (the overview lists the queues)"
            )
            return self.refuse(request, why, 404)
        peeked = [describe(j) for j in self.store.peek(name, n)]
        return self.render(
            request,
            "queue.html",
            name=name,
            c=snap.queue(name),
            paused=self.store.paused_queues().get(name),
            limits=next((q for q in self.store.limits() if q.queue == name), None),
            peeked=peeked,
            n=n,
            chart=chart.build(snap.rates, name, snap.taken_at or None),
        )

    def dead(self, request: Request) -> Response:
        try:
            where = parse_filter(request.query_params)
            before = request.query_params.get("before")
            cursor = None
            if before:
                at, _, ident = before.partition(":")
                cursor = (float(at), int(ident))
        except ValueError as exc:
            return self.refuse(request, f"bad filter: {exc}", 400)
        # A task or error filter has no index: read a window of the newest dead letters
        # per page (bounded time), and offer the next window when it found too few.
        scan = SCAN_WINDOW if (where.task or where.error) else None
        jobs = self.store.dead_search(where, PAGE_SIZE + 1, cursor, scan)
        more = len(jobs) > PAGE_SIZE
        jobs = jobs[:PAGE_SIZE]
        window_end = None
        if scan is not None and not more:
            window_end = self.store.dead_window(scan, cursor)
        if cursor is None and not more and window_end is None:
            count = len(jobs)  # the first page holds them all: no second read
        elif scan is not None:
            count = None  # counting would read every dead letter: the bulk action counts
        else:
            count = self.store.dead_count(where, COUNT_CAP + 1)
        query = filter_query(where)
        next_url = None
        if more:
            last = jobs[-1]
            next_url = "/dead?" + urlencode({**query, "before": f"{last.died_at!r}:{last.id}"})
        elif window_end is not None:
            next_url = "/dead?" + urlencode(
                {**query, "before": f"{window_end[0]!r}:{window_end[1]}"}
            )
        items = [describe(j) for j in jobs]
        registered = self.inspector.registered if self.inspector else None
        unregistered = guards.unregistered_tasks(items, registered)
        return self.render(
            request,
            "dead.html",
            items=items,
            unregistered=guards.unregistered_warning(unregistered, registered is not None),
            where=where,
            query=query,
            count=count,
            capped=count is not None and count > COUNT_CAP,
            cap=COUNT_CAP,
            next_url=next_url,
            window=scan if window_end is not None else None,
            window_end=window_end,
            queues=self.sampler.snapshot.queue_names(),
        )

    def dead_one(self, request: Request) -> Response:
        try:
            ident = int(request.path_params["id"])
        except ValueError:
            return self.refuse(request, "a dead letter id is a number", 400)
        job = self.store.get_job(ident)
        if job is None or job.state != "dead":
            return self.refuse(request, f"no dead letter {ident}", 404)
        return self.render(request, "dead_one.html", item=describe(job))

    def result(self, request: Request) -> Response:
        """A task's state and result as the alkstore result backend stored them, by task
        id (``kombu_alkstore.results``); linked from a dead letter's page."""
        task_id = request.path_params["task_id"]
        try:
            rows = self.store.results().by_task(task_id)
        except AlkstoreError as exc:
            return self.refuse(request, str(exc), 400)
        return self.render(
            request, "result.html", task_id=task_id, rows=[result_row(r) for r in rows]
        )

    def scheduled(self, request: Request) -> Response:
        """Delayed tasks (ETA, countdown) the broker holds, soonest first: what ``celery
        inspect scheduled`` cannot list on this broker (``kombu-alkstore scheduled``)."""
        queue = (request.query_params.get("queue") or "").strip() or None
        try:
            if queue is not None:
                validate_name(queue, "queue name")
        except AlkstoreError as exc:
            return self.refuse(request, str(exc), 400)
        jobs = self.store.scheduled(queue=queue, limit=SCHEDULED_LIMIT + 1)
        snap = self.sampler.snapshot
        delayed = snap.queue(queue).delayed if queue else sum(c.delayed for c in snap.counts)
        return self.render(
            request,
            "scheduled.html",
            items=[describe(j) for j in jobs[:SCHEDULED_LIMIT]],
            more=len(jobs) > SCHEDULED_LIMIT,
            limit=SCHEDULED_LIMIT,
            queue=queue,
            delayed=delayed,
            queues=snap.queue_names(),
        )

    def schedules(self, request: Request) -> Response:
        items, error = beat.schedule_rows(self.store)
        return self.render(request, "schedules.html", items=items, error=error)

    def consumers(self, request: Request) -> Response:
        insp = self.inspector
        return self.render(
            request,
            "consumers.html",
            claims=self.sampler.snapshot.claims,
            workers=insp.workers if insp else None,
            inspected_at=insp.taken_at if insp else None,
            inspect_error=insp.error if insp else None,
        )

    def bulk_status(self, request: Request) -> Response:
        job = self.bulk.jobs.get(request.path_params["id"])
        if job is None:
            return self.refuse(request, "no such bulk action (the dashboard restarted?)", 404)
        return self.render(request, "bulk.html", job=job, query=filter_query(job.where))

    def login(self, request: Request) -> Response:
        if not self.auth.writable:
            return self.refuse(request, "write access is not configured (read-only)", 403)
        if not self.auth.may_write(request):
            return Response(
                "write access needs the dashboard token as the password",
                status_code=401,
                headers={"WWW-Authenticate": f'Basic realm="{self.auth.realm}"'},
            )
        return RedirectResponse("/", status_code=303)

    def scrape(self, request: Request) -> Response:
        return Response(metrics.render(self.registry), media_type=metrics.CONTENT_TYPE)

    # ----------------------------------------------------------------- actions
    async def queue_action(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        form, refused = await self.form(request)
        if refused:
            return refused
        try:
            validate_name(name, "queue name")
            actor = actor_for(self, request, form)
        except AlkstoreError as exc:
            return self.refuse(request, str(exc), 400)
        url = "/queues/" + _quote(name)
        if action == "pause":
            self.store.pause_queue(name, actor=actor)
            return self.done(url, f"queue {name} paused", request)
        if action == "resume":
            self.store.resume_queue(name, actor=actor)
            return self.done(url, f"queue {name} resumed", request)
        if action == "purge":
            n = self.store.purge(name, actor=actor)
            return self.done(url, f"purged {n} pending messages of {name}", request)
        return self.refuse(request, f"unknown action {action!r}", 404)

    async def dead_action(self, request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ("requeue", "purge"):
            return self.refuse(request, f"unknown action {action!r}", 404)
        form, refused = await self.form(request)
        if refused:
            return refused
        to = (form.get("to") or "").strip() or None
        try:
            if to:
                validate_name(to, "queue name")
            where = parse_filter(form)
            ids = [int(i) for i in form.getlist("id")]
            actor = actor_for(self, request, form)
        except (AlkstoreError, ValueError) as exc:
            return self.refuse(request, str(exc), 400)
        back = form.get("back") or "/dead"
        if not SAFE_BACK.match(back):  # only a path of this dashboard, never another site
            back = "/dead"
        if form.get("scope") == "matching":
            job = self.bulk.start(action, where, to if action == "requeue" else None, actor)
            client = request.client.host if request.client else "?"
            audit.info(
                "%s: %s all matching: %s (%d)",
                client,
                action,
                guards.describe_filter(where),
                job.total,
            )
            return RedirectResponse(f"/bulk/{job.id}", status_code=303)
        if not ids:
            return self.done(back, "nothing selected")
        n = apply(self.store, action, ids, to if action == "requeue" else None, actor)
        verb = "requeued" if action == "requeue" else "purged"
        dest = f" to {to}" if to and action == "requeue" else ""
        if back.startswith("/dead/"):
            back = "/dead"
        return self.done(back, f"{verb} {n} dead letter{'s' if n != 1 else ''}{dest}", request)

    async def schedule_action(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        form, refused = await self.form(request)
        if refused:
            return refused
        if action not in beat.ACTIONS:
            return self.refuse(request, f"unknown action {action!r}", 404)
        try:
            found = beat.run_action(self.store, action, name)
        except AlkstoreError as exc:
            return self.refuse(request, str(exc), 400)
        if not found:
            return self.refuse(request, f"no schedule named {name!r}", 404)
        message = f"schedule {name}: {action.replace('_', ' ')} done"
        return self.done("/schedules", message, request)

    # --------------------------------------------------------------------- app
    def app(self) -> Starlette:
        self.registry = metrics.registry(lambda: self.sampler.snapshot)
        routes = [
            Route("/", self.overview),
            Route("/queues/{name:path}/{action:str}", self.queue_action, methods=["POST"]),
            Route("/queues/{name:path}", self.queue),
            Route("/dead", self.dead),
            Route("/dead/{id}", self.dead_one),
            Route("/dead-action/{action}", self.dead_action, methods=["POST"]),
            Route("/bulk/{id}", self.bulk_status),
            Route("/results/{task_id:path}", self.result),
            Route("/scheduled", self.scheduled),
            Route("/schedules", self.schedules),
            Route("/schedules/{name:path}/{action:str}", self.schedule_action, methods=["POST"]),
            Route("/consumers", self.consumers),
            Route("/acts", lambda request: acts_page(self, request)),
            Route("/login", self.login),
            Route("/metrics", self.scrape),
        ]
        return Starlette(routes=routes, lifespan=self._lifespan)

    def _lifespan(self, app: Starlette) -> Any:
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def span(_: Starlette):
            self.start()
            try:
                yield
            finally:
                self.stop()

        return span(app)

    def start(self) -> None:
        self.sampler.start()
        if self.inspector:
            self.inspector.start()

    def stop(self) -> None:
        self.sampler.stop()
        if self.inspector:
            self.inspector.stop()


def result_row(row: dict[str, Any]) -> dict[str, Any]:
    """A stored result for display: its value as text when it is JSON (Celery's default
    serializer), else its size (pickle, or compressed)."""
    value = row["value"]
    try:
        text = json.dumps(json.loads(value.decode("utf-8")), indent=2, sort_keys=True)
    except (UnicodeDecodeError, ValueError):
        text = f"({len(value)} bytes, not JSON: another result_serializer or compression)"
    return {**row, "text": text}


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def create_app(store: Store, config: Config | None = None) -> Starlette:
    """The dashboard's ASGI app over ``store`` (which the caller closes)."""
    return Dashboard(store, config or Config()).app()

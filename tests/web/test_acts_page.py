"""The dashboard's acts on record (web/acts.py): every action POST writes its act with the
change, as the authenticated user (``web:<user>``) for the form's reason; ``/acts`` lists
them, filterable, every value escaped."""

from __future__ import annotations

import base64
import re

import pytest
from playwright.sync_api import expect

from kombu_alkstore.store import NewJob
from kombu_alkstore.store.acts import Actor
from tests.helpers import wait_for
from tests.web.conftest import TOKEN, login, serving
from tests.web.test_safety import basic, csrf_of

XSS = "<script>window.__xss = 1</script>"


def as_user(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{TOKEN}".encode()).decode()}


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-id="\d+">(.*?)</tr>', html, re.S)


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_dashboard_actions_are_kept_as_acts(engine, pg_target, sqlite_target):
    target = pg_target if engine == "postgresql" else sqlite_target
    with serving(target) as dash:
        store = dash.store
        store.queue_declare("q")
        store.enqueue_many([NewJob("q", b"secret-payload") for _ in range(3)])
        _, html = dash.get("/queues/q", as_user("alice"))
        token = csrf_of(html)
        assert 'name="reason"' in html
        status, _ = dash.post(
            "/queues/q/pause", {"csrf": token, "reason": "INC-9"}, as_user("alice")
        )
        assert status == 200
        bob = as_user("bob")
        _, html = dash.get("/queues/q", bob)
        status, _ = dash.post("/queues/q/purge", {"csrf": csrf_of(html)}, bob)
        assert status == 200 and store.size("q") == 0
        # a change of nothing: no act
        dash.post("/queues/q/purge", {"csrf": csrf_of(html)}, bob)
        # dead letters: the selected ones, then every one matching, as a bulk action
        store.enqueue_many([NewJob("d", b"x") for _ in range(4)])
        dead = store.claim(["d"], 4)
        store.fail(dead, "boom")
        _, html = dash.get("/dead", bob)
        ids = sorted(d.id for d in dead)
        status, _ = dash.post(
            "/dead-action/requeue",
            {"csrf": csrf_of(html), "id": [str(ids[0])], "to": "elsewhere", "reason": "retry"},
            bob,
        )
        assert status == 200
        status, _ = dash.post(
            "/dead-action/purge", {"csrf": csrf_of(html), "scope": "matching"}, basic()
        )
        assert status == 200
        job = next(iter(dash.dashboard.bulk.jobs.values()))
        wait_for(lambda: job.finished is not None, 10)
        acts = store.acts()
        assert [(a.act, a.actor, a.reason) for a in acts] == [
            ("dead_purge", "web:ops", None),
            ("dead_move", "web:bob", "retry"),
            ("queue_purge", "web:bob", None),
            ("queue_pause", "web:alice", "INC-9"),
        ]
        assert acts[0].ids == tuple(ids[1:]) and acts[1].target == "elsewhere"
        # a reason that is not a code is refused, nothing changes
        _, html = dash.get("/queues/q", bob)
        status, _ = dash.post("/queues/q/resume", {"csrf": csrf_of(html), "reason": "a\nb"}, bob)
        assert status == 400 and "q" in store.paused_queues()
        # the page, and its filters
        status, html = dash.get("/acts")
        assert status == 200
        assert len(_rows(html)) == 4 and "secret-payload" not in html
        assert 'href="/acts"' in html  # linked from the nav
        _, html = dash.get("/acts?by=web%3Abob")
        assert len(_rows(html)) == 2 and "web:alice" not in "".join(_rows(html))
        _, html = dash.get("/acts?act=queue_pause&queue=q")
        assert len(_rows(html)) == 1 and "INC-9" in html
        assert dash.get("/acts?act=bogus")[0] == 400


def test_the_acts_page_escapes_every_value(dashboard, page):
    store = dashboard.store
    store.enqueue("x<q>", b"1")
    store.purge("x<q>", actor=Actor(f"web:{XSS}", f"<b>{XSS}</b>"))
    login(page, dashboard.url)
    page.goto(dashboard.url + "/acts")
    assert page.evaluate("window.__xss") is None
    assert page.locator("#acts script").count() == 0
    expect(page.locator("#acts .by")).to_have_text(f"web:{XSS}")
    expect(page.locator("#acts .reason")).to_have_text(f"<b>{XSS}</b>")
    expect(page.locator("#acts .queue")).to_have_text("x<q>")
    page.click("#nav-acts")
    expect(page).to_have_url(dashboard.url + "/acts")

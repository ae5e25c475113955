"""The dashboard's safety: message values are escaped (no script of a task argument runs),
every action needs write access and a CSRF token, read-only by default; /metrics; SQLite."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlencode

from playwright.sync_api import expect
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import TOKEN, login, start_dashboard

XSS_ARG = "<script>window.__xss = 1</script>"
XSS_ERROR = '<img src=x onerror="window.__xss = 2">'


def celery_body(task: str, args: list) -> bytes:
    """A Celery protocol 2 message as the transport stores it (JSON, body inline)."""
    return json.dumps(
        {
            "body": json.dumps([args, {}, {}]),
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": {"task": task, "id": "id-1", "lang": "py"},
            "properties": {"body_encoding": "utf-8"},
        }
    ).encode()


def basic(token: str = TOKEN) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"ops:{token}".encode()).decode()}


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def test_message_values_are_shown_as_text_never_run(dashboard, page):
    store = dashboard.store
    store.enqueue("x<q>", celery_body("tasks.<i>evil</i>", [XSS_ARG]))
    store.enqueue("x<q>", celery_body("tasks.<i>evil</i>", [XSS_ARG]))
    (d,) = store.claim(["x<q>"], 1)
    store.fail([d], XSS_ERROR)
    dashboard.dashboard.sampler.take()
    for path in ["/", "/queues/x%3Cq%3E", "/dead", f"/dead/{d.id}", "/consumers"]:
        page.goto(dashboard.url + path)
        assert page.evaluate("window.__xss") is None, path
        assert page.locator("script").count() == 0, path
    page.goto(dashboard.url + f"/dead/{d.id}")
    expect(page.locator("#msg-args")).to_contain_text(XSS_ARG)
    expect(page.locator("#last-error")).to_have_text(XSS_ERROR)
    page.goto(dashboard.url + "/queues/x%3Cq%3E")
    expect(page.locator("#peek")).to_contain_text(XSS_ARG)
    expect(page.locator("#peek")).to_contain_text("tasks.<i>evil</i>")


def test_every_action_needs_write_access_and_a_csrf_token(dashboard):
    dashboard.store.queue_declare("q")  # a known queue: its page has the forms
    status, html = dashboard.get("/queues/q", basic())
    token = csrf_of(html)
    paused = dashboard.store.paused_queues
    # No credentials: refused as read-only.
    assert dashboard.post("/queues/q/pause", {"csrf": token})[0] == 401
    # Credentials but no, or a wrong, CSRF token.
    assert dashboard.post("/queues/q/pause", {}, basic())[0] == 403
    assert dashboard.post("/queues/q/pause", {"csrf": "0" * 64}, basic())[0] == 403
    # The right token for other credentials (a wrong password) is refused too.
    assert dashboard.post("/queues/q/pause", {"csrf": token}, basic("nope"))[0] == 401
    # A cross-site form post carries a foreign Origin.
    evil = {**basic(), "Origin": "http://evil.example"}
    assert dashboard.post("/queues/q/pause", {"csrf": token}, evil)[0] == 403
    for path in ["/dead-action/requeue", "/dead-action/purge", "/schedules/s/disable"]:
        assert dashboard.post(path, {"scope": "matching"}, basic())[0] == 403
    assert paused() == {}
    # GET never acts (it asks for the page of a queue named "q/pause": none).
    assert dashboard.get("/queues/q/pause", basic())[0] == 404
    assert paused() == {}
    status, _ = dashboard.post("/queues/q/pause", {"csrf": token}, basic())
    assert status == 200  # after the 303 to the queue page
    assert set(paused()) == {"q"}


def test_a_cross_site_form_in_the_browser_is_refused(dashboard, page):
    """An attacker's page auto-submits a form to the dashboard while the browser holds the
    operator's credentials: the form cannot know the CSRF token, so nothing happens."""
    store = dashboard.store
    store.enqueue("q", b"1")
    attack = (
        f'<form method="post" action="{dashboard.url}/queues/q/purge">'
        '<input name="csrf" value="guess"></form>'
        "<script>document.forms[0].submit()</script>"
    )
    login(page, dashboard.url)  # the browser holds the operator's credentials
    with page.expect_navigation():
        page.set_content(attack)
    expect(page.locator("#refused")).to_be_visible()
    assert store.size("q") == 1


def test_read_only_without_a_token(pg_target, anon_page):
    live, stop = start_dashboard(pg_target, token=None)
    try:
        live.store.enqueue("q", b"1")
        status, html = live.get("/queues/q", basic())
        assert status == 200 and 'name="csrf"' not in html and "read-only" in html
        assert live.post("/queues/q/purge", {"csrf": "x"}, basic())[0] == 401
        assert live.get("/login")[0] == 403
        anon_page.goto(live.url + "/queues/q")
        assert anon_page.locator("form[method=post]").count() == 0
        assert live.store.size("q") == 1
    finally:
        stop()


def test_metrics_for_prometheus(dashboard):
    store = dashboard.store
    store.enqueue("m", b"1")
    store.enqueue("m", b"2", delay=300)
    store.enqueue("m", b"3")
    store.ack(store.claim(["m"], 1))
    store.enqueue("m", b"4")
    (d,) = store.claim(["m"], 1)
    store.fail([d], "x")
    store.pause_queue("m")
    store.rates_tally.flush()
    dashboard.dashboard.sampler.take()
    status, text = dashboard.get("/metrics")
    assert status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("alkstore_queue_messages", queue="m", state="pending") == 1
    assert value("alkstore_queue_messages", queue="m", state="delayed") == 1
    assert value("alkstore_queue_messages", queue="m", state="processing") == 0
    assert value("alkstore_dead_letters", queue="m") == 1
    assert value("alkstore_queue_paused", queue="m") == 1
    assert value("alkstore_published_total", queue="m") == 4
    assert value("alkstore_acked_total", queue="m") == 1
    assert value("alkstore_oldest_pending_age_seconds", queue="m") >= 0
    assert value("alkstore_up") == 1


def test_metrics_scrape_sends_no_statement(dashboard, monkeypatch):
    """A scrape reads the sampler's snapshot: its cost does not grow with the store."""
    calls = []
    for name in ("_all", "_one", "_run"):
        original = getattr(dashboard.store, name)
        monkeypatch.setattr(
            dashboard.store, name, lambda *a, _o=original, **k: calls.append(a) or _o(*a, **k)
        )
    dashboard.dashboard.sampler.stop()
    for _ in range(3):
        assert dashboard.get("/metrics")[0] == 200
    assert calls == []


def test_dashboard_on_sqlite_with_its_schema_prefix(sqlite_target):
    live, stop = start_dashboard(sqlite_target)
    try:
        live.store.enqueue("s", celery_body("tasks.s", [1]))
        live.dashboard.sampler.take()
        for path in ["/", "/queues/s", "/dead", "/schedules", "/consumers", "/metrics"]:
            assert live.get(path)[0] == 200, path
        assert 'data-queue="s"' in live.get("/")[1]
        html = live.get("/queues/s", basic())[1]
        assert live.post("/queues/s/pause", {"csrf": csrf_of(html)}, basic())[0] == 200
        assert live.store.claim(["s"], 1) == []
        assert list(live.store.paused_queues()) == ["s"]
    finally:
        stop()


def test_no_words_or_redirects_from_a_link(dashboard):
    """A link made elsewhere can neither put a message on the dashboard nor make an action
    send the browser to another site."""
    status, html = dashboard.get("/?flash=Session+expired,+log+in+at+evil.example")
    assert status == 200 and "evil.example" not in html
    token = csrf_of(dashboard.get("/dead", basic())[1])
    for back in ["//evil.example/x", "/\\evil.example", "https://evil.example"]:
        req = {"csrf": token, "id": "1", "back": back}

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        r = urllib.request.Request(
            dashboard.url + "/dead-action/purge", data=urlencode(req).encode(), headers=basic()
        )
        try:
            opener.open(r, timeout=10)
            raise AssertionError("expected a redirect")
        except urllib.error.HTTPError as exc:
            assert exc.code == 303
            assert exc.headers["location"].startswith("/dead?"), exc.headers["location"]

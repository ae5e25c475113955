"""The dashboard driven as a person would: a real headless Chromium against a live
dashboard over a live PostgreSQL store, with real Celery workers (threads)."""

from __future__ import annotations

import threading
import time

from playwright.sync_api import expect

from kombu_alkstore.store.admin import DeadFilter
from kombu_alkstore.web import bulk
from tests.helpers import make_app, thread_worker, wait_for
from tests.web.conftest import login, start_dashboard
from tests.web.test_safety import celery_body


def reload_until(page, url: str, selector: str, text: str, timeout: float = 15) -> None:
    """Load ``url`` until ``selector`` shows ``text`` (the counts refresh every 0.3 s)."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(url)
        loc = page.locator(selector)
        if loc.count() and text in loc.first.inner_text():
            return
        assert time.monotonic() < deadline, f"{selector} never showed {text!r} at {url}"
        time.sleep(0.2)


def recording_app(target, ran: list):
    app = make_app(target)

    @app.task(name="tasks.record", shared=False)
    def record(x):
        ran.append(x)
        return x

    return app, record


def test_publish_tasks_and_see_the_depth_change(dashboard, page, pg_target):
    app, record = recording_app(pg_target, [])
    page.goto(dashboard.url + "/")
    expect(page.locator("#queues")).to_contain_text("no messages in any queue")
    for i in range(3):
        record.apply_async(args=(i,), queue="work")
    reload_until(page, dashboard.url + "/", 'tr[data-queue="work"] .pending', "3")
    page.click('a[href="/queues/work"]')
    expect(page.locator("#pending")).to_have_text("3")
    expect(page.locator("#peek")).to_contain_text("tasks.record")
    assert page.locator("#peek tr").count() == 4  # header + 3 messages, none claimed
    assert dashboard.store.size("work") == 3


def test_requeue_a_dead_letter_and_see_it_run(dashboard, page, pg_target):
    ran: list = []
    app, record = recording_app(pg_target, ran)
    result = record.apply_async(args=("again",))
    store = dashboard.store
    (d,) = store.claim(["celery"], 1)
    store.fail([d], "RuntimeError: the first run failed")
    with thread_worker(app):
        login(page, dashboard.url)
        page.goto(dashboard.url + "/dead")
        row = page.locator(f'#dead tr[data-id="{d.id}"]')
        expect(row).to_contain_text("tasks.record")
        row.locator("a").first.click()
        expect(page.locator("#last-error")).to_have_text("RuntimeError: the first run failed")
        expect(page.locator("#msg-args")).to_contain_text('"again"')
        page.click("#requeue-one button")
        expect(page.locator("#flash")).to_have_text("requeued 1 dead letter")
        wait_for(lambda: ran == ["again"], timeout=20)
        assert result.get(timeout=10) == "again"
    assert store.dead_count() == 0


def test_pause_a_queue_and_see_claims_stop(dashboard, page, pg_target):
    ran: list = []
    app, record = recording_app(pg_target, ran)
    with thread_worker(app):
        login(page, dashboard.url)
        page.goto(dashboard.url + "/queues/celery")
        page.click("#pause")
        expect(page.locator("#flash")).to_have_text("queue celery paused")
        expect(page.locator("#paused")).to_be_visible()
        for i in range(3):
            record.delay(i)
        time.sleep(2)  # a running worker, due tasks, and no claim
        assert ran == []
        reload_until(page, dashboard.url + "/queues/celery", "#pending", "3")
        page.goto(dashboard.url + "/")
        expect(page.locator('tr[data-queue="celery"]')).to_contain_text("paused")
        page.goto(dashboard.url + "/queues/celery")
        page.click("#resume")
        expect(page.locator("#flash")).to_have_text("queue celery resumed")
        wait_for(lambda: sorted(ran) == [0, 1, 2], timeout=20)


def test_toggle_a_schedule_and_run_it_now(dashboard, page, pg_target):
    from celery_beat_alkstore import api

    store = dashboard.store
    api.schedule(
        "nightly", "cron 30 7 * * * Europe/Paris", "tasks.record", args=["<b>x</b>"], store=store
    )
    login(page, dashboard.url)
    page.goto(dashboard.url + "/schedules")
    row = page.locator('#schedules tr[data-name="nightly"]')
    expect(row.locator(".state")).to_have_text("enabled")
    expect(row).to_contain_text("Europe/Paris")
    expect(row).to_contain_text("07:30:00 CET")  # the next fires, in the schedule's zone
    expect(row).to_contain_text('["<b>x</b>"]')  # shown as text
    row.locator("button.disable").click()
    expect(page.locator("#flash")).to_contain_text("nightly: disable done")
    expect(row.locator(".state")).to_have_text("disabled")
    assert api.get_schedule("nightly", store=store).enabled is False
    row.locator("button.enable").click()
    expect(row.locator(".state")).to_have_text("enabled")
    row.locator("button.run_now").click()
    expect(page.locator("#flash")).to_contain_text("nightly: run now done")
    expect(row).to_contain_text("run requested")
    assert api.get_schedule("nightly", store=store).run_requested is not None


def test_requeue_all_matching_in_batches_with_progress(dashboard, page, monkeypatch):
    monkeypatch.setattr(bulk, "BULK_BATCH", 7)
    store = dashboard.store
    for i in range(30):
        queue = "bulk" if i % 3 else "keep"
        store.enqueue(queue, b'{"headers": {"task": "tasks.bulk"}, "body": ""}')
        (d,) = store.claim([queue], 1)
        store.fail([d], f"Boom {i}")
    login(page, dashboard.url)
    page.goto(dashboard.url + "/dead?queue=bulk&error=boom")
    expect(page.locator("#match-count")).to_contain_text("20 matching")
    page.fill("#requeue-all input[name=to]", "retried")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("#requeue-all button")  # dismissed: nothing moves
    assert asked == ["Requeue 20 matching dead letters?"]
    assert store.dead_count() == 30 and page.locator("#finished").count() == 0
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("#requeue-all button")
    expect(page.locator("#finished")).to_be_visible()
    expect(page.locator("#progress")).to_contain_text("20 / 20")
    assert store.size("retried") == 20
    assert store.dead_count() == 10
    assert store.dead_count(DeadFilter(queue="keep")) == 10


def test_purge_selected_dead_letters(dashboard, page):
    store = dashboard.store
    ids = []
    for _ in range(3):
        store.enqueue("q", b"not json")
        (d,) = store.claim(["q"], 1)
        store.fail([d], "x")
        ids.append(d.id)
    login(page, dashboard.url)
    page.goto(dashboard.url + "/dead")
    page.check(f'#dead tr[data-id="{ids[0]}"] input[type=checkbox]')
    page.check(f'#dead tr[data-id="{ids[2]}"] input[type=checkbox]')
    page.click("#purge-selected")
    expect(page.locator("#flash")).to_have_text("purged 2 dead letters")
    assert [j.id for j in store.dead_search()] == [ids[1]]


def test_consumers_shows_the_worker_holding_a_claim(pg_target, page):
    live, stop = start_dashboard(pg_target, inspect=True)
    release = threading.Event()
    try:
        app = make_app(pg_target)

        @app.task(name="tasks.hold", shared=False)
        def hold():
            release.wait(30)

        with thread_worker(app, concurrency=1, hostname="holder@test"):
            hold.delay()
            wait_for(lambda: live.store.claim_stats(), timeout=20)
            reload_until(page, live.url + "/consumers", '#claims tr[data-queue="celery"]', "1")
            worker = '#workers tr[data-host="holder@test"]'
            reload_until(page, live.url + "/consumers", f"{worker} .active", "1", timeout=30)
            expect(page.locator(worker)).to_contain_text("tasks.hold")
            release.set()
    finally:
        release.set()
        stop()


def test_requeue_all_warns_of_a_task_no_worker_registered(pg_target, page):
    """A real worker answers ``inspect registered``: the dead letters of a task it does not
    define are named on the page and in the question before "Requeue all matching"."""
    live, stop = start_dashboard(pg_target, inspect=True, inspect_every=0.5)
    try:
        app, _ = recording_app(pg_target, [])
        store = live.store
        for task in ("tasks.record", "tasks.gone"):
            store.enqueue("parked", celery_body(task, [1]))
        store.fail(store.claim(["parked"], 2), "RuntimeError: boom")
        with thread_worker(app, concurrency=1, hostname="known@test"):
            wait_for(lambda: live.dashboard.inspector.registered, timeout=30)
            assert "tasks.record" in live.dashboard.inspector.registered
            login(page, live.url)
            page.goto(live.url + "/dead?queue=parked")
            warning = (
                "Some of these dead letters are of tasks no running worker has registered: "
                "tasks.gone. Requeueing will not fix them: deploy a worker that defines the "
                "task first."
            )
            expect(page.locator("#unregistered")).to_have_text(warning)
            asked: list[str] = []
            page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
            page.click("#requeue-all button")
            assert asked == ["Requeue 2 matching dead letters? " + warning]
            assert store.dead_count() == 2
    finally:
        stop()

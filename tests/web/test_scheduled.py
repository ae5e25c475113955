"""The dashboard's scheduled page (issue 19): the delayed tasks (ETA, countdown) the broker
holds, with their ETA, task name, task id and queue, soonest first, on both engines; and a
real Chromium that reaches it from the navigation."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from kombu_alkstore.web import app as web_app
from tests.helpers import make_app
from tests.web.conftest import LiveDashboard, serving

HOSTILE_ID = "<script>window.__xss = 1</script>"
HOSTILE_QUEUE = 'x"<b>q</b>'
HOSTILE_TASK = "tasks.<i>evil</i>"


@pytest.fixture
def live(target) -> Iterator[LiveDashboard]:
    """A dashboard over the test's store, PostgreSQL or SQLite."""
    with serving(target) as dash:
        yield dash


def rows(page: str) -> list[str]:
    """The rows of the scheduled table (HTML), in page order."""
    table = re.search(r'<table id="scheduled">(.*?)</table>', page, re.S)
    assert table, "no scheduled table on the page"
    return re.findall(r"<tr data-id=\"\d+\">(.*?)</tr>", table.group(1), re.S)


def cell(row: str, name: str) -> str:
    match = re.search(rf'<td class="{name}[^"]*">(.*?)</td>', row, re.S)
    assert match, f"no {name} cell in {row!r}"
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def test_a_countdown_task_is_listed_with_eta_task_id_and_queue(live, target):
    app = make_app(target)

    @app.task(name="tasks.later", shared=False)
    def later(x):
        return x

    before = time.time()
    result = later.apply_async(args=(7,), countdown=600, queue="slow")
    after = time.time()
    soon = later.apply_async(args=(8,), countdown=60)  # queue celery, due sooner
    later.apply_async(args=(9,))  # due now: not scheduled
    (job,) = live.store.scheduled(queue="slow")
    assert before + 600 - 1 <= job.run_at <= after + 600 + 1

    status, page = live.get("/scheduled")
    assert status == 200
    found = rows(page)
    assert len(found) == 2  # soonest first, the due task is not listed
    assert cell(found[0], "task-id") == soon.id
    first = found[1]
    assert cell(first, "task") == "tasks.later"
    assert cell(first, "task-id") == result.id
    assert cell(first, "queue") == "slow"
    assert cell(first, "eta") == web_app.page_time(job.run_at)
    assert re.fullmatch(r"in (9m5\ds|10m00s)", cell(first, "in"))

    # The queue filter (a bound parameter of Store.scheduled).
    status, page = live.get("/scheduled?queue=slow")
    assert [cell(r, "task-id") for r in rows(page)] == [result.id]
    status, page = live.get("/scheduled?queue=celery")
    assert [cell(r, "task-id") for r in rows(page)] == [soon.id]

    # The queue page links its delayed count to the filtered list.
    live.dashboard.sampler.take()
    status, page = live.get("/queues/slow")
    assert '<a href="/scheduled?queue=slow" id="delayed">1</a>' in page


def test_the_list_is_bounded_and_says_more_exist(live, target, monkeypatch):
    monkeypatch.setattr(web_app, "SCHEDULED_LIMIT", 2)
    app = make_app(target)
    ids = [app.send_task("tasks.t", countdown=300 + i).id for i in range(3)]
    status, page = live.get("/scheduled")
    assert [cell(r, "task-id") for r in rows(page)] == ids[:2]
    assert 'id="more"' in page and "The 2 soonest are shown; more exist" in page
    status, page = live.get("/scheduled?queue=celery")
    assert 'id="more"' in page
    monkeypatch.setattr(web_app, "SCHEDULED_LIMIT", 3)
    status, page = live.get("/scheduled")
    assert len(rows(page)) == 3 and 'id="more"' not in page


def test_hostile_task_id_queue_and_name_are_shown_escaped(live, target):
    app = make_app(target)
    app.send_task(HOSTILE_TASK, task_id=HOSTILE_ID, countdown=600, queue=HOSTILE_QUEUE)
    status, page = live.get("/scheduled")
    assert status == 200
    assert "<script>" not in page and "<i>evil" not in page and "<b>q" not in page
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page
    (row,) = rows(page)
    assert cell(row, "task-id") == HOSTILE_ID
    assert cell(row, "task") == HOSTILE_TASK
    assert cell(row, "queue") == HOSTILE_QUEUE
    # The filter by that queue name: data, echoed escaped.
    from urllib.parse import urlencode

    status, page = live.get("/scheduled?" + urlencode({"queue": HOSTILE_QUEUE}))
    assert status == 200 and "<b>q" not in page
    assert [cell(r, "task-id") for r in rows(page)] == [HOSTILE_ID]
    status, page = live.get("/scheduled?" + urlencode({"queue": "x' OR 1=1 --"}))
    assert status == 200 and rows(page) == []


def test_an_empty_list_says_so(live, target):
    app = make_app(target)
    app.send_task("tasks.now")  # due now: not a scheduled task
    status, page = live.get("/scheduled")
    assert status == 200 and rows(page) == []
    assert "no scheduled tasks" in page
    app.send_task("tasks.later", countdown=600, queue="slow")
    status, page = live.get("/scheduled?queue=other")
    assert rows(page) == [] and "no scheduled tasks in queue other" in page


def test_the_browser_reaches_scheduled_tasks_from_the_navigation(dashboard, page, pg_target):
    app = make_app(pg_target)
    result = app.send_task("tasks.remind", args=("<b>x</b>",), countdown=600, queue="mail")
    page.goto(dashboard.url + "/")
    page.click("#nav-scheduled")
    expect(page).to_have_url(dashboard.url + "/scheduled")
    row = page.locator("#scheduled tr[data-id]")
    expect(row).to_have_count(1)
    expect(row.locator(".task")).to_have_text("tasks.remind")
    expect(row.locator(".task-id")).to_have_text(result.id)
    expect(row.locator(".queue")).to_have_text("mail")
    expect(row.locator(".in")).to_contain_text("in ")
    expect(row).to_contain_text('"<b>x</b>"')  # the argument shown as text
    assert page.locator("#scheduled b").count() == 0
    # From the queue's page, its delayed count leads to the same list, filtered.
    dashboard.dashboard.sampler.take()
    page.goto(dashboard.url + "/queues/mail")
    page.click("#delayed")
    expect(page).to_have_url(dashboard.url + "/scheduled?queue=mail")
    expect(page.locator("#scheduled .task-id")).to_have_text(result.id)

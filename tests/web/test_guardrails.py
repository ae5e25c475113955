"""The dashboard's guard-rails of issue 33 over HTTP: an unknown queue's page says so, a
beat action on no schedule says so, Purge pending removes delayed tasks too, the audit log
writes a filter in words, dead letters a requeue will not fix are named."""

from __future__ import annotations

import html
import logging
import re
import time
from types import SimpleNamespace

from kombu_alkstore.store.admin import DeadFilter
from kombu_alkstore.web.consumers import registered_names
from kombu_alkstore.web.guards import describe_filter
from tests.web.test_safety import basic, celery_body, csrf_of


def refused(page: str) -> str:
    match = re.search(r'<div class="error" id="refused">(.*?)</div>', page, re.S)
    assert match, page
    return html.unescape(match.group(1))


def dead_letter(store, task: str, error: str, queue: str = "q") -> int:
    store.enqueue(queue, celery_body(task, [1]))
    (d,) = store.claim([queue], 1)
    store.fail([d], error)
    return d.id


def test_the_page_of_an_unknown_queue_says_so(dashboard):
    status, page = dashboard.get("/queues/nope")
    assert status == 404
    assert refused(page) == (
        "no queue named 'nope': no worker or publisher declared it and it holds no messages "
        "or dead letters (the overview lists the queues)"
    )
    store = dashboard.store
    store.queue_declare("declared")  # declared, empty
    store.pause_queue("paused")  # paused ahead of use
    dead_letter(store, "tasks.a", "boom", queue="deadonly")
    store.enqueue("fresh", b"1")  # newer than the last snapshot
    for name in ("declared", "paused", "deadonly", "fresh"):
        status, page = dashboard.get(f"/queues/{name}")
        assert status == 200 and 'id="refused"' not in page, name


def test_purge_pending_removes_delayed_tasks_too(dashboard):
    store = dashboard.store
    store.enqueue("q", b"1")
    store.enqueue("q", b"2", delay=3600)
    store.enqueue("q", b"3", delay=86400)
    dashboard.dashboard.sampler.take()
    status, page = dashboard.get("/queues/q", basic())
    assert (
        "onsubmit=\"return confirm('Delete every pending message of this queue, delayed "
        "(ETA, countdown) ones included?')\"" in page
    )
    status, page = dashboard.post("/queues/q/purge", {"csrf": csrf_of(page)}, basic())
    assert status == 200
    assert '<div class="flash" id="flash">purged 3 pending messages of q</div>' in page
    (counts,) = store.counts(["q"])
    assert (counts.pending, counts.delayed) == (0, 0)


def test_a_beat_action_on_no_schedule_says_so(dashboard):
    _, page = dashboard.get("/dead", basic())  # no schedules: the schedules page has no form
    token = csrf_of(page)
    for action in ("run_now", "disable", "enable"):
        status, page = dashboard.post(f"/schedules/nope/{action}", {"csrf": token}, basic())
        assert status == 404, action
        assert refused(page) == "no schedule named 'nope'"


def test_the_audit_log_writes_the_filter_in_words(dashboard, caplog):
    store = dashboard.store
    dead_letter(store, "tasks.a", "Boom")
    _, page = dashboard.get("/dead", basic())
    since = time.mktime((2026, 11, 30, 12, 0, 0, 0, 0, -1))
    form = {"csrf": csrf_of(page), "scope": "matching", "queue": "q", "task": "tasks.a"}
    form.update(error="boom", since="2026-11-30T12:00:00")
    with caplog.at_level(logging.INFO, logger="kombu_alkstore.web.audit"):
        status, _ = dashboard.post("/dead-action/purge", form, basic())
    assert status == 200
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kombu_alkstore.web.audit"]
    assert line == (
        "127.0.0.1: purge all matching: queue 'q', task 'tasks.a', error containing 'boom', "
        "died from 2026-11-30 12:00:00 (1)"
    )
    assert describe_filter(DeadFilter()) == "every dead letter"
    assert describe_filter(DeadFilter(until=since)) == "died until 2026-11-30 12:00:00"


UNREGISTERED_BY_ERROR = (
    "Some of these dead letters are of tasks the worker did not know (their error says "
    "unregistered task): tasks.gone. Requeueing will not fix them: deploy a worker that "
    "defines the task first."
)


def test_dead_letters_of_an_unregistered_task_are_named_from_their_error(dashboard):
    store = dashboard.store
    dead_letter(store, "tasks.fine", "RuntimeError: boom")
    _, page = dashboard.get("/dead", basic())
    assert 'id="unregistered"' not in page
    assert 'data-confirm="Requeue 1 matching dead letter?"' in page
    dead_letter(store, "tasks.gone", "rejected: unregistered task 'tasks.gone'")
    _, page = dashboard.get("/dead", basic())
    assert f'<div class="error" id="unregistered">{UNREGISTERED_BY_ERROR}</div>' in page
    confirm = html.unescape(re.search(r'data-confirm="([^"]*)"', page).group(1))
    assert confirm == "Requeue 2 matching dead letters? " + UNREGISTERED_BY_ERROR
    _, page = dashboard.get("/dead?task=tasks.fine", basic())  # the filter leaves it out
    assert 'id="unregistered"' not in page


def test_dead_letters_of_a_task_no_worker_registered_are_named(dashboard, monkeypatch):
    """With the workers' ``inspect registered`` known, a task none of them has is named,
    whatever its error says (here a worker that lost the task after a deploy)."""
    store = dashboard.store
    dead_letter(store, "tasks.known", "rejected: unregistered task 'tasks.known'")
    dead_letter(store, "tasks.removed", "RuntimeError: boom")
    monkeypatch.setattr(
        dashboard.dashboard, "inspector", SimpleNamespace(registered={"tasks.known"})
    )
    _, page = dashboard.get("/dead")
    assert (
        '<div class="error" id="unregistered">Some of these dead letters are of tasks no '
        "running worker has registered: tasks.removed. Requeueing will not fix them: deploy "
        "a worker that defines the task first.</div>"
    ) in page


def test_registered_names_from_inspect_replies():
    replies = {"a@h": ["tasks.x", "tasks.y [rate_limit=10/m]"], "b@h": ["tasks.z"]}
    assert registered_names(replies) == {"tasks.x", "tasks.y", "tasks.z"}
    assert registered_names({}) is None


def test_consumers_page_explains_the_hand_off_columns(dashboard):
    _, page = dashboard.get("/consumers")
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page.split('id="claims"')[1].split("</tr>")[0])
    assert headers == [
        "Queue",
        "Claimed",
        "Oldest claimed message published",
        "Next claim deadline",
        "Idle workers waiting",
        "Tasks they take at once",
    ]
    assert (
        '<p class="muted" id="handoff-note">Idle workers waiting: worker connections with '
        "nothing to do that a publish hands its new task to directly (hand-off, PostgreSQL), "
        "without waiting for their next claim. Tasks they take at once: how many more tasks "
        "those idle workers have room for (their prefetch). Zero while workers are busy or "
        "on SQLite.</p>"
    ) in page


def test_the_unregistered_warning_escapes_the_task_name(dashboard):
    evil = 'tasks."><script>window.__x=1</script>'
    dead_letter(dashboard.store, evil, "rejected: unregistered task 'x'")
    _, page = dashboard.get("/dead", basic())
    assert "<script>" not in page
    warning = UNREGISTERED_BY_ERROR.replace("tasks.gone", evil)
    confirm = html.unescape(re.search(r'data-confirm="([^"]*)"', page).group(1))
    assert confirm == "Requeue 1 matching dead letter? " + warning
    div = re.search(r'<div class="error" id="unregistered">([^<]*)</div>', page).group(1)
    assert html.unescape(div) == warning

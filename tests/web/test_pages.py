"""Dashboard pages over HTTP (no browser needed): the bounded search of dead letters."""

from __future__ import annotations

import html
import re

from kombu_alkstore.web import app as web_app
from tests.web.test_safety import celery_body


def test_task_search_reads_windows_and_offers_the_next(dashboard, monkeypatch):
    monkeypatch.setattr(web_app, "SCAN_WINDOW", 3)
    store = dashboard.store
    ids = []
    for i in range(10):
        store.enqueue("q", celery_body("tasks.a" if i % 4 == 0 else "tasks.b", [i]))
        (d,) = store.claim(["q"], 1)
        store.fail([d], "boom")
        ids.append(d.id)
    found, url, pages = [], "/dead?task=tasks.a", 0
    while url:
        status, page = dashboard.get(url)
        assert status == 200
        pages += 1
        found += [int(i) for i in re.findall(r'<tr data-id="(\d+)"', page)]
        if pages == 1:
            assert "among the 3 newest dead letters searched" in page
        link = re.search(r'<a href="([^"]+)" id="search-older">', page)
        url = html.unescape(link.group(1)) if link else None
    assert found == [ids[8], ids[4], ids[0]]
    assert pages == 4  # windows of 3, 3, 3 and the last one
    # An index-served filter is paged and counted as before.
    status, page = dashboard.get("/dead?queue=q")
    assert "<strong>10</strong> matching dead letters" in page

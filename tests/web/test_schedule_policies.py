"""The schedules page shows each schedule's catch-up policy, no stacking and its skipped
count, escaped, on both engines."""

from __future__ import annotations

from celery_beat_alkstore import api
from tests.web.conftest import serving
from tests.web.test_safety import basic


def test_schedules_page_shows_catch_up_stacking_and_skips(target):
    with serving(target) as live:
        store = live.store
        name = "<b>nightly</b>"
        api.schedule(name, "@every 1h", "t.n", catch_up="replay", no_stacking=True, store=store)
        api.schedule("plain", "@every 1m", "t.p", store=store)
        row = store.schedule_get(name)
        with store.schedule_tick() as tx:
            assert tx.skip_busy(name, row.next_at, row.next_at + 3600, 7)
        status, html = live.get("/schedules", basic())
    assert status == 200
    assert "<th>Catch-up</th><th>Stacking</th>" in html
    assert "<b>nightly</b>" not in html and "&lt;b&gt;nightly&lt;/b&gt;" in html
    nightly = html.split('data-name="&lt;b&gt;nightly&lt;/b&gt;"')[1].split("</tr>")[0]
    assert '<td class="catch-up">replay</td>' in nightly
    assert "no stacking" in nightly and "(7 skipped)" in nightly
    plain = html.split('data-name="plain"')[1].split("</tr>")[0]
    assert '<td class="catch-up">default</td>' in plain
    assert '<td class="stacking">stacks</td>' in plain

"""The dashboard's result page: a task's state and result by its id, beside its message
(linked from a dead letter's page), on both engines."""

from __future__ import annotations

from urllib.parse import quote

from tests.results.apps import result_app
from tests.web.conftest import serving


def test_a_tasks_result_is_shown_by_its_id_and_hostile_ids_are_escaped(target):
    app = result_app(target)
    backend = app.backend
    backend.store_result("t-ok", {"answer": 42}, "SUCCESS")
    hostile = "<script>window.__xss = 1</script>"
    backend.store_result(hostile, ValueError("<b>bad</b>"), "FAILURE")
    with serving(target) as live:
        status, page = live.get("/results/t-ok")
        assert status == 200
        assert '<td class="state">SUCCESS</td>' in page
        assert "&#34;answer&#34;: 42" in page or "&quot;answer&quot;: 42" in page
        status, page = live.get("/results/" + quote(hostile, safe=""))
        assert status == 200
        assert "<script>window" not in page and "&lt;script&gt;" in page
        assert '<td class="state">FAILURE</td>' in page
        assert "<b>bad</b>" not in page
        status, page = live.get("/results/never-ran")
        assert status == 200 and 'id="no-result"' in page


def test_a_dead_letters_page_links_to_its_tasks_result(target):
    app = result_app(target)
    store = app.backend.store
    with app.producer_or_acquire() as producer:
        app.send_task("r.add", (1, 2), task_id="dead-1", queue="q", producer=producer)
    (delivery,) = store.claim(["q"])
    store.fail([delivery], "rejected")
    (letter,) = store.dead_list()
    with serving(target) as live:
        status, page = live.get(f"/dead/{letter.id}")
        assert status == 200
        assert '<a href="/results/dead-1" id="result-link">dead-1</a>' in page

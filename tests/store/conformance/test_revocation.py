"""Revoke: marked jobs, delivered marked."""

from __future__ import annotations

import time


# ---------------------------------------------------------------------------- revoke
def test_revoke_marks_the_jobs_of_a_task_and_claims_deliver_them_marked(store):
    now = time.time()
    due = store.enqueue("q", b"due", msg_id="t-due")
    store.enqueue("q", b"delayed", msg_id="t-later", run_at=now + 60)
    other = store.enqueue("q", b"other", msg_id="t-other")
    assert store.revoke(["t-due", "t-later", "t-unknown"]) == 2
    assert store.revoke(["t-due"]) == 0  # once
    assert store.revoked_among([due, other]) == {due}
    got = {d.msg_id: d.revoked for d in store.claim(["q"], 10)}
    assert got == {"t-due": True, "t-other": False}
    assert [j.msg_id for j in store.scheduled()] == ["t-later"]
    assert store.scheduled(queue="elsewhere") == []

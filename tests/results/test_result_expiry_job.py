"""Expired results are deleted by the maintenance lease's holder (no beat needed)."""

from __future__ import annotations

import time

from kombu_alkstore.maintenance import Maintenance


def test_the_lease_holder_deletes_expired_results_at_most_every_interval(store):
    results = store.results()
    results.put("celery-task-meta-old", b"x", "SUCCESS", "old", time.time() - 1)
    results.put("celery-task-meta-new", b"y", "SUCCESS", "new", time.time() + 3600)
    results.put("celery-task-meta-ever", b"z", "SUCCESS", "ever", None)
    results.chord_size("gone", 2, time.time() - 1)
    holder, other = Maintenance(60.0), Maintenance(60.0)
    assert other.run(store) is not None  # the first round takes the lease
    assert results.statements["cleanup"] == 1
    assert sorted(
        results.get_many(["celery-task-meta-old", "celery-task-meta-new", "celery-task-meta-ever"])
    ) == [
        "celery-task-meta-ever",
        "celery-task-meta-new",
    ]
    assert results.chord_state("gone") is None
    results.put("celery-task-meta-old2", b"x", "SUCCESS", "old2", time.time() - 1)
    assert other.run(store) is not None
    assert results.statements["cleanup"] == 1  # not again within RESULTS_INTERVAL
    assert holder.run(store) is None  # not the holder: no cleanup either
    assert results.statements["cleanup"] == 1


def test_a_backlog_larger_than_a_batch_is_deleted_in_several_statements(store):
    results = store.results()
    results.cleanup_batch = 7
    for i in range(20):
        results.put(f"celery-task-meta-old{i}", b"x", "SUCCESS", f"old{i}", time.time() - 1)
    for i in range(9):
        results.chord_size(f"gone{i}", 2, time.time() - 1)
    results.put("celery-task-meta-new", b"y", "SUCCESS", "new", time.time() + 3600)
    before = sum(results.statements.values())
    gone = results.cleanup()
    assert (gone.results, gone.chords) == (20, 9)
    assert sum(results.statements.values()) - before == 3  # 7 + 7 + 6 results
    assert results.get_many(["celery-task-meta-new"]) == {"celery-task-meta-new": b"y"}
    assert all(results.chord_state(f"gone{i}") is None for i in range(9))

"""A frozen chord applied again reuses its group id (and its header tasks' ids): the new
run counts from zero, its parts that arrive before ``set_chord_size`` included, and fires
once more; a late duplicate of a part never fires a chord twice. Both engines, through
the result store the backend uses."""

from __future__ import annotations


def _part(results, task_id: str, idx: int):
    with results.chord_part("g", task_id, idx, f"v-{task_id}".encode(), False, None) as parts:
        return parts


def test_a_late_duplicate_of_a_part_never_fires_a_chord_twice(store):
    results = store.results()
    results.chord_size("g", 2, None)
    assert _part(results, "t1", 0) is None
    assert _part(results, "t2", 1) == [b"v-t1", b"v-t2"]  # fires
    assert _part(results, "t2", 1) is None  # redelivered after the fire
    assert _part(results, "t1", 0) is None


def test_a_rerun_counts_its_early_part_and_fires_at_its_last(store):
    results = store.results()
    results.chord_size("g", 2, None)
    _part(results, "t1", 0)
    assert _part(results, "t2", 1) is not None  # run 1 fires
    assert _part(results, "t1", 0) is None  # run 2's early part (before its size is set)
    results.chord_size("g", 2, None)
    assert _part(results, "t2", 1) == [b"v-t1", b"v-t2"]  # run 2 fires at its last part

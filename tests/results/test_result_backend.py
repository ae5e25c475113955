"""The alkstore result backend against both engines, with a real worker in a thread:
broker and backend both alkstore (PostgreSQL schema-isolated, SQLite file-isolated)."""

from __future__ import annotations

import threading

import pytest
from celery import chord, group, signals
from celery.exceptions import ChordError
from celery.result import AsyncResult, GroupResult

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.results.backend import ResultBackend
from tests.helpers import thread_worker, wait_for
from tests.results.apps import CALLS, RELEASE, result_app


def test_the_url_forms_resolve_to_the_backend_and_its_database(target, tmp_path):
    app = result_app(target)
    backend = app.backend
    assert isinstance(backend, ResultBackend)
    assert backend.config.url.engine == target.engine
    assert backend.config.shares_broker  # alkstore:// is the broker's database and schema
    assert backend.config.options.schema == target.schema
    other = result_app(target, backend=f"alkstore+sqlite:///{tmp_path / 'results.db'}")
    assert isinstance(other.backend, ResultBackend)
    assert other.backend.config.url.path == str(tmp_path / "results.db")
    assert not other.backend.config.shares_broker
    assert other.backend.as_uri().startswith("alkstore+sqlite:///")
    lone = result_app(target, backend="alkstore://")
    lone.conf.broker_url = "memory://"
    lone.conf.broker_transport = None
    with pytest.raises(ConfigurationError, match="names no database"):
        ResultBackend(app=lone, url="alkstore://")


def test_delay_get_state_traceback_children_and_extended_fields(target):
    app = result_app(target, result_extended=True)
    with thread_worker(app):
        r = app.tasks["r.add"].delay(2, 3)
        assert r.get(timeout=30) == 5
        assert r.state == "SUCCESS"
        fresh = AsyncResult(r.id, app=app)  # read by id, nothing cached
        assert fresh.result == 5 and fresh.date_done is not None
        assert (fresh.name, fresh.args, fresh.kwargs) == ("r.add", [2, 3], {})
        assert fresh.queue == "celery" and fresh.worker
        bad = app.tasks["r.boom"].delay("it failed")
        with pytest.raises(ValueError, match="it failed"):
            bad.get(timeout=30)
        assert bad.state == "FAILURE"
        assert "ValueError: it failed" in AsyncResult(bad.id, app=app).traceback
        parent = app.tasks["r.children"].delay()
        (child_id,) = parent.get(timeout=30)
        assert AsyncResult(child_id, app=app).get(timeout=30) == 2
        assert [c.id for c in AsyncResult(parent.id, app=app).children] == [child_id]
    assert AsyncResult("never-sent", app=app).state == "PENDING"


@pytest.mark.parametrize("serializer", ["json", "pickle"])
def test_serializers_and_compression_round_trip(target, serializer):
    app = result_app(
        target,
        result_serializer=serializer,
        accept_content=["json", "pickle"],
        result_accept_content=["json", "pickle"],
        result_compression="zlib",
    )
    with thread_worker(app):
        assert app.tasks["r.add"].delay("a", "b").get(timeout=30) == "ab"


def test_group_get_save_restore_delete(target):
    app = result_app(target)
    with thread_worker(app):
        res = group(app.tasks["r.add"].s(i, i) for i in range(10))()
        assert res.get(timeout=30) == [i * 2 for i in range(10)]
        assert res.join_native(timeout=30) == [i * 2 for i in range(10)]
        res.save()
        back = GroupResult.restore(res.id, app=app)
        assert [r.id for r in back.results] == [r.id for r in res.results]
        assert back.get(timeout=30) == [i * 2 for i in range(10)]
        back.delete()
        assert GroupResult.restore(res.id, app=app) is None


def test_chord_of_100_publishes_its_callback_once_without_chord_unlock(target):
    app = result_app(target)
    ran: list[str] = []

    def seen(sender=None, **_):
        ran.append(sender.name)

    signals.task_prerun.connect(seen, weak=False)
    try:
        with thread_worker(app, concurrency=4):
            header = [app.tasks["r.add"].s(i, i) for i in range(100)]
            res = chord(header)(app.tasks["r.total"].s())
            assert res.get(timeout=120) == sum(i * 2 for i in range(100))
            # Every header result was counted, the callback published once.
            state = app.backend.tables.chord_state(res.parent.id)
            assert state == (100, 0, 100, True)
    finally:
        signals.task_prerun.disconnect(seen)
    assert CALLS["total"] == 1
    assert "celery.chord_unlock" not in ran
    assert ran.count("r.total") == 1


def test_a_header_part_counted_twice_counts_once(target):
    """A redelivered header task returns again: its part is recorded once, so the
    callback still waits for the others (and fires once)."""
    app = result_app(target)
    tables = app.backend.tables
    tables.chord_size("g1", 2, None)
    for task_id, index in (("a", 0), ("a", 0), ("b", 1), ("b", 1), ("a", 0)):
        with tables.chord_part("g1", task_id, index, task_id.encode(), False, None) as parts:
            fired = parts
            if task_id == "b" and fired is not None:
                assert fired == [b"a", b"b"]
    assert tables.chord_state("g1") == (2, 0, 2, True)
    # A part before the size is known counts once the size comes.
    with tables.chord_part("g2", "x", 0, b"x", False, None) as parts:
        assert parts is None
    tables.chord_size("g2", 2, None)
    with tables.chord_part("g2", "y", 1, b"y", False, None) as parts:
        assert parts == [b"x", b"y"]


def test_the_callback_publish_commits_with_the_count_or_not_at_all(target):
    """Broker and results in one database: the callback's message is written in the
    transaction that completes the count, so a failure (a worker killed) before its
    commit leaves neither the count nor the message, and the part can come again."""
    app = result_app(target)
    backend, total = app.backend, app.tasks["r.total"]
    assert backend.config.shares_broker
    tables, store = backend.tables, backend.store
    tables.chord_size("g", 1, None)
    with pytest.raises(RuntimeError), tables.chord_part("g", "t", 0, b"x", True, None) as parts:
        assert parts == [b"x"]
        total.delay([1])
        raise RuntimeError("killed before the commit")
    assert store.size("celery") == 0
    assert tables.chord_state("g") == (1, 0, 0, False)
    with tables.chord_part("g", "t", 0, b"x", True, None) as parts:
        assert parts == [b"x"]
        total.delay([1])
    assert store.size("celery") == 1
    assert tables.chord_state("g") == (1, 0, 1, True)


def test_chord_errors_propagate_as_celery_defines(target):
    app = result_app(target)
    with thread_worker(app):
        header = [app.tasks["r.add"].s(1, 1), app.tasks["r.boom"].s("part failed")]
        callback = app.tasks["r.total"].s().on_error(app.tasks["r.on_error"].s())
        res = chord(header)(callback)
        # Celery raises the failed header task's error from the chord's get() (its
        # parent); the callback itself fails with a ChordError naming that task.
        with pytest.raises((ChordError, ValueError), match="part failed"):
            res.get(timeout=60)
        wait_for(lambda: AsyncResult(res.id, app=app).state == "FAILURE", 60)
        error = AsyncResult(res.id, app=app).result
        assert isinstance(error, ChordError) and "part failed" in str(error)
        wait_for(lambda: CALLS["on_error"] == 1, 60)
    assert CALLS["total"] == 0
    assert CALLS["on_error:ChordError"] == 1


def test_forget_deletes_the_result(target):
    app = result_app(target)
    with thread_worker(app):
        r = app.tasks["r.add"].delay(1, 2)
        assert r.get(timeout=30) == 3
    key = app.backend.get_key_for_task(r.id)
    assert app.backend.get(key) is not None
    r.forget()
    assert app.backend.get(key) is None
    assert AsyncResult(r.id, app=app).state == "PENDING"


def test_expired_results_are_hidden_then_deleted_by_cleanup(target):
    app = result_app(target, result_expires=1)
    with thread_worker(app):
        r = app.tasks["r.add"].delay(1, 2)
        assert r.get(timeout=30) == 3
        kept = app.tasks["r.add"].apply_async((2, 2), expires=None)
        assert kept.get(timeout=30) == 4
    backend = app.backend
    wait_for(lambda: AsyncResult(r.id, app=app).state == "PENDING", 60, interval=0.2)
    done = backend.tables.cleanup()
    assert done.results >= 2
    wait_for(lambda: backend.tables.cleanup().results == 0, 10)
    # Without expiry (result_expires=None): kept by cleanup.
    forever = result_app(target, result_expires=None)
    forever.backend.set(forever.backend.get_key_for_task("keep"), b"x")
    forever.backend.cleanup()
    assert forever.backend.get(forever.backend.get_key_for_task("keep")) == b"x"


def test_eight_threads_wait_on_one_listener_and_waiting_costs_no_statement_each(target):
    """Eight threads in get() at once (a web app's threads): one watcher and one
    listener for all of them; while they wait, the only reads are the watcher's
    fallback rounds, each one statement for all eight ids."""
    app = result_app(target, backend_options={"fallback_interval": 0.2})
    with thread_worker(app, concurrency=8):
        hold = app.tasks["r.hold"]
        sent = [hold.delay(i) for i in range(8)]
        got: dict[int, int] = {}
        watchers = set()

        def wait(i: int) -> None:
            r = AsyncResult(sent[i].id, app=app)  # each thread: its own backend
            watchers.add(id(r.backend.watcher))
            got[i] = r.get(timeout=120)

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        watcher = app.backend.watcher
        tables = app.backend.tables
        wait_for(lambda: watcher.watched() == 8, 60)
        wait_for(lambda: watcher.reads["fallback"] >= 1, 60)
        reads0, statements0 = sum(watcher.reads.values()), tables.statements["get_many"]
        fallback0 = watcher.reads["fallback"]
        wait_for(lambda: watcher.reads["fallback"] >= fallback0 + 5, 60)
        reads1, statements1 = sum(watcher.reads.values()), tables.statements["get_many"]
        fallback1 = watcher.reads["fallback"]
        RELEASE.set()
        for t in threads:
            t.join(120)
    assert got == {i: i * 2 for i in range(8)}
    assert len(watchers) == 1
    # While eight waited: one statement per fallback round, none per waiter.
    assert reads1 - reads0 == fallback1 - fallback0
    assert statements1 - statements0 == fallback1 - fallback0
    # Starting to wait was batched too: at most one read per get(), not a poll.
    assert watcher.reads["fresh"] <= 8


def test_a_success_is_never_overwritten_by_a_late_state(target):
    """Celery's rule for key/value backends (a lost worker's late STARTED or FAILURE
    must not replace a result), kept in the storing statement itself."""
    app = result_app(target)
    backend = app.backend
    backend.store_result("t1", 1, "STARTED")
    backend.store_result("t1", 2, "SUCCESS")
    backend.store_result("t1", None, "STARTED")
    backend.store_result("t1", ValueError("late"), "FAILURE")
    assert backend.tables.statements["get_many"] == 0  # stored without reading first
    assert AsyncResult("t1", app=app).state == "SUCCESS"
    assert backend.get_task_meta("t1", cache=False)["result"] == 2
    backend.store_result("t2", ValueError("first"), "FAILURE")
    backend.store_result("t2", 3, "SUCCESS")
    assert backend.get_task_meta("t2", cache=False)["result"] == 3


def test_small_results_come_in_the_notification_large_ones_are_read(target):
    app = result_app(target)
    with thread_worker(app):
        hold, add = app.tasks["r.hold"], app.tasks["r.add"]
        r = hold.delay(21)
        watcher = app.backend.watcher
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(r.get(timeout=60)))
        waiter.start()
        wait_for(lambda: watcher.watched() == 1 and watcher.reads["fresh"] >= 1, 60)
        RELEASE.set()  # the result is stored while the waiter listens
        waiter.join(60)
        assert got == [42]
        big = "x" * 20_000
        assert add.delay(big, "y").get(timeout=30) == big + "y"
    if target.engine == "postgresql":
        assert watcher.carried >= 1  # no read after its notification
    else:
        assert watcher.carried == 0 and watcher.reads["changed"] >= 1


def test_parts_counted_from_many_threads_at_once_fire_exactly_once(target):
    """100 header results (each sent twice) from 8 threads on their own connections:
    one part completes the count, and it sees all 100 parts in header order."""
    app = result_app(target)
    tables = app.backend.tables
    tables.chord_size("g", 100, None)
    fired: list[list[bytes]] = []
    lock = threading.Lock()

    def run(offset: int) -> None:
        for i in list(range(offset, 100, 8)) * 2:
            with tables.chord_part("g", f"t{i}", i, str(i).encode(), False, None) as parts:
                if parts is not None:
                    with lock:
                        fired.append(parts)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(fired) == 1
    assert fired[0] == [str(i).encode() for i in range(100)]
    assert tables.chord_state("g") == (100, 0, 100, True)


def test_a_chord_whose_header_holds_a_group_gets_every_result(target):
    """Celery flattens a group inside a chord header (its tasks share the header index
    of the group): the callback gets the three results, the group's first, as from
    Celery's Redis backend ([4, 2, 6] there, equal indexes in no set order)."""
    app = result_app(target)
    add = app.tasks["r.add"]
    with thread_worker(app):
        header = [group(add.s(1, 1), add.s(2, 2)), add.s(3, 3)]
        got = chord(header)(app.tasks["r.same"].s()).get(timeout=60)
    assert sorted(got[:2]) == [2, 4] and got[2] == 6
    assert CALLS["same"] == 1


def test_a_lost_listener_connection_misses_nothing(pg_target):
    """The LISTEN connection is terminated while a get() waits: the watcher reconnects
    and reads every watched id again, so the result stored meanwhile is found (the
    fallback round is set too far away to be what finds it)."""
    import psycopg

    app = result_app(pg_target, backend_options={"fallback_interval": 600})
    with thread_worker(app):
        r = app.tasks["r.hold"].delay(5)
        got: list[int] = []
        waiter = threading.Thread(target=lambda: got.append(r.get(timeout=120)))
        waiter.start()
        watcher = app.backend.watcher
        wait_for(lambda: watcher._listener is not None and watcher.reads["fresh"] >= 1, 60)
        pid = watcher._listener._conn.info.backend_pid
        with psycopg.connect(pg_target.url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        RELEASE.set()
        waiter.join(120)
    assert got == [10]


def test_a_state_stored_inside_the_callers_transaction_commits_with_it(target):
    """Inside ``kombu_alkstore.transaction(conn)`` (the caller's connection to the
    store's database) a stored state is written through that connection: it rolls back
    and commits with the caller's work, as a publish does."""
    import sqlite3

    import psycopg

    import kombu_alkstore

    app = result_app(target)
    backend = app.backend
    if target.engine == "postgresql":
        conn = psycopg.connect(target.url)
    else:
        conn = sqlite3.connect(target.url.removeprefix("sqlite:///"))
    try:
        with kombu_alkstore.transaction(conn):
            backend.store_result("tx1", 1, "SUCCESS")
        conn.rollback()
        assert backend.get_task_meta("tx1", cache=False)["status"] == "PENDING"
        with kombu_alkstore.transaction(conn):
            backend.store_result("tx2", 2, "SUCCESS")
        assert backend.get_task_meta("tx2", cache=False)["status"] == "PENDING"  # not yet
        conn.commit()
        assert backend.get_task_meta("tx2", cache=False)["result"] == 2
    finally:
        conn.close()

"""The walk of one claim through the package, counted (issue 31's "walk of a claim").

A kombu consumer in a real kombu ``Hub`` (the event loop a Celery worker runs) on
PostgreSQL, hand-off off so the job is claimed, not handed over. One message is published
while the loop idles; then the loop turns, under ``sys.setprofile``, until the message is
delivered. Printed: the package's function calls on that path, the files they are in, the
calls from one file into another, and the file pairs that call each other both ways.

Two kinds of frame are not taken for a call from one module into another: the event
loop's guard wrapper (``guarded``'s ``call``, a pass-through: the caller is the one
before it), and an *answer*, the claims session (or its immediate adapter) calling the
callback a caller gave it with an operation; answers are counted apart.

    python benchmarks/claim_walk.py                      # the working tree
    PYTHONPATH=/tmp/old python benchmarks/claim_walk.py  # another revision's package

Figures describe the code's shape, not its speed.
"""

from __future__ import annotations

import collections
import os
import sys
import time
import uuid
from pathlib import Path

import psycopg
from kombu import Connection, Queue
from kombu.asynchronous import Hub

PG_URL = os.environ.get("ALKSTORE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: Pass-through wrappers (file, function): the caller is the frame before them.
WRAPPERS = {("transport/link.py", "call"), ("transport/transport.py", "call")}
#: The claims sessions: a call from one of them into the transport is an answer (the
#: store package never imports the transport: it only calls back what it was given).
SESSIONS = {"store/postgres/claims.py", "transport/immediate.py"}


def _where(frame, root: str) -> tuple[str, str]:
    name = frame.f_code.co_filename
    rel = name[len(root) + 1 :] if name.startswith(root) else "(outside)"
    return rel, frame.f_code.co_name


def _walk() -> list[tuple[str, str, str, bool]]:
    import kombu_alkstore

    root = str(Path(kombu_alkstore.__file__).parent)
    schema = "walk_" + uuid.uuid4().hex[:10]
    options = {"schema": schema, "handoff": False}
    url = f"alkstore+{PG_URL}"
    calls: list[tuple[str, str, str, bool]] = []  # (caller's file, file, function, answer)
    try:
        with Connection(url, transport_options=options) as conn:
            conn.connect()
            hub = Hub()
            got: list = []
            queue = Queue("q", routing_key="q")
            consumer = conn.Consumer([queue], callbacks=[lambda b, m: got.append(m)])
            consumer.consume()
            conn.transport.register_with_event_loop(conn.connection, hub)
            idle_until = time.monotonic() + 1.0
            while time.monotonic() < idle_until:  # first claims, due-time read: done
                hub.run_once()
            with Connection(url, transport_options=options) as producer_conn:
                producer_conn.Producer().publish({"x": 1}, routing_key="q", declare=[queue])

            def profile(frame, event, arg):
                if event != "call" or not frame.f_code.co_filename.startswith(root):
                    return
                rel, fn = _where(frame, root)
                if (rel, fn) in WRAPPERS:
                    return
                back = frame.f_back
                while back is not None and _where(back, root) in WRAPPERS:
                    back = back.f_back
                caller = _where(back, root) if back is not None else ("(outside)", "")
                answer = caller[0] in SESSIONS and rel.startswith("transport/") and rel != caller[0]
                calls.append((caller[0], rel, fn, answer))

            sys.setprofile(profile)
            try:
                deadline = time.monotonic() + 10
                while not got and time.monotonic() < deadline:
                    hub.run_once()
            finally:
                sys.setprofile(None)
            assert got, "the message was not delivered"
            got[0].ack()
            conn.close()
            hub.close()
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return calls


def main() -> None:
    calls = _walk()
    files = collections.Counter(f for _, f, _, _ in calls)
    edges = collections.Counter((c, f) for c, f, _, a in calls if c != f and not a)
    answers = collections.Counter((c, f) for c, f, _, a in calls if c != f and a)
    print(f"calls: {len(calls)} in {len(files)} files")
    for f, n in files.most_common():
        print(f"  {n:4d}  {f}")
    print("calls from one file into another (caller -> callee):")
    for (a, b), n in edges.most_common():
        print(f"  {n:4d}  {a} -> {b}")
    print("answers (a claims session calling the callback given with an operation):")
    for (a, b), n in answers.most_common():
        print(f"  {n:4d}  {a} -> {b}")
    both = {tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges}
    print("file pairs calling each other both ways:", sorted(both) or "none")
    print("path:", " -> ".join(f"{Path(f).stem}.{fn}" for _, f, fn, _ in calls))


if __name__ == "__main__":
    main()

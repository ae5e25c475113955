#!/usr/bin/env python3
"""Check the transport through a connection pooler (the README's PgBouncer table).

    python examples/postgres_ha/pgbouncer_check.py \\
        --direct postgresql://postgres@127.0.0.1:5432/test \\
        --pooled postgresql://postgres@127.0.0.1:6432/test

Runs 30 publish/claim/heartbeat/ack rounds through the pooled URL, then measures how
long a consumer on the pooled URL takes to wake up after a publish made directly.
Uses a private schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg
from kombu import Connection

import kombu_alkstore  # noqa: F401
from kombu_alkstore.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direct", required=True, help="a direct PostgreSQL URL")
    parser.add_argument("--pooled", required=True, help="the same database via the pooler")
    args = parser.parse_args()
    schema = "pooler_" + uuid.uuid4().hex[:8]
    open_store(args.direct, schema=schema).close()
    options = {"schema": schema, "setup": False}
    try:
        store = open_store(args.pooled, schema=schema, setup=False)
        try:
            for _ in range(30):
                store.enqueue("q", b"x")
                held = store.claim(["q"], 1)
                store.heartbeat(held)
                store.ack(held)
            print("store statements through the pooler: ok (30 rounds)")
        except psycopg.Error as exc:
            print(f"store statements through the pooler FAIL: {type(exc).__name__}: {exc}")
        finally:
            store.close()
        for label, url in (("pooled", args.pooled), ("direct", args.direct)):
            latencies = []
            with Connection(f"alkstore+{url}", transport_options=options) as conn:
                queue = conn.SimpleQueue("wake")
                for _ in range(3):
                    sent = []

                    def publish(sent: list = sent) -> None:
                        with Connection(f"alkstore+{args.direct}", transport_options=options) as p:
                            sent.append(time.time())
                            p.SimpleQueue("wake").put("hi")

                    timer = threading.Timer(1.0, publish)
                    timer.start()
                    message = queue.get(timeout=30)
                    message.ack()
                    latencies.append(time.time() - sent[0])
                    timer.join()
                queue.close()
            print(f"consumer {label}: wake-up after publish {[round(x, 3) for x in latencies]} s")
    finally:
        with psycopg.connect(args.direct, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()

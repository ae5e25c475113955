#!/usr/bin/env python3
"""Transactional publish, end to end: an order and its task commit or roll back together.

    python examples/transactional/run.py                          # SQLite, temporary file
    python examples/transactional/run.py --db postgresql://postgres@127.0.0.1:5432/test

Starts a real ``celery worker`` on the shop's database, then, in this process:

1. places an order whose transaction commits: the worker runs ``send_receipt`` once,
   after the commit, and finds the order;
2. places an order whose payment fails: the transaction rolls back and the task with it,
   so no receipt, no order, and nothing left in the queue;
3. (PostgreSQL only) the same order published *without* ``kombu_alkstore.transaction``:
   the worker runs the task before the commit and does not find the order.

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--schema", default="alkstore", help="the broker's schema")
    parser.add_argument("--prefix", default="shop_", help="prefix of the shop's tables")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="alkstore-shop-"))
    os.environ["SHOP_DB"] = args.db or f"sqlite:///{tmp / 'shop.db'}"
    os.environ["SHOP_SCHEMA"] = args.schema
    os.environ["SHOP_PREFIX"] = args.prefix
    sys.path.insert(0, str(HERE))
    import shop  # configured by the environment set above

    print(f"database and broker: {os.environ['SHOP_DB']}")
    shop.setup()
    log = tmp / "worker.log"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "shop", "worker", "--pool=threads",
             "--concurrency=2", "--loglevel=INFO"],
            cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    print(f"started: celery -A shop worker (pid {worker.pid})")

    def receipt(order_id: int, wait: float) -> tuple | None:
        end = time.monotonic() + wait
        while True:
            with shop.engine.connect() as conn:
                row = conn.execute(
                    sa.select(shop.receipts).where(shop.receipts.c.order_id == order_id)
                ).first()
            if row is not None or time.monotonic() > end:
                return row
            time.sleep(0.05)

    ok = True

    def check(cond: bool, text: str) -> None:
        nonlocal ok
        ok &= bool(cond)
        print(f"  {'ok ' if cond else 'FAIL'} {text}")

    try:
        print("1. place_order('book'): the order and send_receipt.delay() in one transaction")
        t0 = time.monotonic()
        order_id = shop.place_order("book")
        row = receipt(order_id, 30)
        check(row is not None, f"the worker ran send_receipt({order_id}) after the commit")
        check(row is not None and row.item == "book", "and it found the committed order")

        print("2. place_order('lamp', pay_ok=False): payment declined, transaction rolled back")
        end = time.monotonic() + 15
        while _jobs(shop) and time.monotonic() < end:  # order 1's ack may still be on its way
            time.sleep(0.1)
        with contextlib.suppress(shop.PaymentDeclined):
            shop.place_order("lamp", pay_ok=False)
        time.sleep(3.0)  # give the worker every chance to run something
        with shop.engine.connect() as conn:
            lamps = conn.execute(
                sa.select(sa.func.count()).where(shop.orders.c.item == "lamp")
            ).scalar()
            n_receipts = conn.execute(sa.select(sa.func.count()).select_from(shop.receipts))
            n_receipts = n_receipts.scalar()
        check(lamps == 0, "no order row")
        check(n_receipts == 1, "no receipt: the task was never published")
        check(_jobs(shop) == 0, "nothing left in the queue")

        if os.environ["SHOP_DB"].startswith("postgresql"):
            print("3. place_order_naively('mug'): published before the commit (the classic bug)")
            row = receipt(shop.place_order_naively("mug"), 30)
            check(
                row is not None and row.item is None,
                "the worker ran the task before the commit and did not find the order",
            )
        print(f"done in {time.monotonic() - t0:.1f}s: {'all steps ok' if ok else 'FAILED'}")
    finally:
        try:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(worker.pid, signal.SIGKILL)
        if not ok:
            print(log.read_text()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


def _jobs(shop) -> int:
    """Messages in the queue (any state), read through the broker's store."""
    with shop.app.connection_for_read() as conn:
        conn.ensure_connection()
        store = conn.transport.store
        return sum(c.pending + c.delayed + c.processing for c in store.counts(["celery"]))


if __name__ == "__main__":
    sys.exit(main())

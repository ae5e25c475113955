"""A tiny shop: an order and the task that sends its receipt commit together.

The application's database is also the broker (``alkstore+<same URL>``), so the task is a
row written in the same transaction as the order. Configured by the environment:

``SHOP_DB``      the database, ``sqlite:///shop.db`` (default) or ``postgresql://…``
``SHOP_SCHEMA``  the broker's schema (PostgreSQL) or table prefix (SQLite), default alkstore
``SHOP_PREFIX``  prefix of the shop's own tables, default ``shop_``

Run by ``run.py``; the worker is ``celery -A shop worker``.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from celery import Celery

import kombu_alkstore

DB = os.environ.get("SHOP_DB", "sqlite:///shop.db")
PREFIX = os.environ.get("SHOP_PREFIX", "shop_")

app = Celery("shop", broker=f"alkstore+{DB}")
app.conf.update(
    broker_transport_options={"schema": os.environ.get("SHOP_SCHEMA", "alkstore")},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

# The shop's own tables, in the same database as the broker's.
engine = sa.create_engine(DB.replace("postgresql://", "postgresql+psycopg://", 1))
metadata = sa.MetaData()
orders = sa.Table(
    f"{PREFIX}orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("item", sa.Text, nullable=False),
)
receipts = sa.Table(
    f"{PREFIX}receipts",
    metadata,
    sa.Column("order_id", sa.Integer, primary_key=True),
    sa.Column("item", sa.Text),  # what the task found; NULL if the order was not there
)


class PaymentDeclined(Exception):
    pass


@app.task
def send_receipt(order_id: int) -> None:
    """Runs on the worker: reads the order (it must be committed by now)."""
    with engine.begin() as conn:
        item = conn.execute(sa.select(orders.c.item).where(orders.c.id == order_id)).scalar()
        conn.execute(receipts.insert().values(order_id=order_id, item=item))


def place_order(item: str, pay_ok: bool = True) -> int:
    """What a web view does: one transaction for the order and the task it starts."""
    with engine.connect() as conn, kombu_alkstore.transaction(conn):
        order_id = conn.execute(
            orders.insert().values(item=item).returning(orders.c.id)
        ).scalar_one()
        send_receipt.delay(order_id)  # a row in this transaction, not yet visible
        if not pay_ok:
            raise PaymentDeclined(item)  # leaving without commit: rolled back, task too
        conn.commit()  # the order and its task, together
    return order_id


def place_order_naively(item: str) -> int:
    """The classic bug, for comparison (PostgreSQL): the task is published on the
    broker's own connection before the order commits, so the worker may not find it."""
    import time

    with engine.connect() as conn:
        order_id = conn.execute(
            orders.insert().values(item=item).returning(orders.c.id)
        ).scalar_one()
        send_receipt.delay(order_id)  # visible to workers at once
        time.sleep(1.0)  # the rest of the request
        conn.commit()
    return order_id


def setup() -> None:
    """Open the broker once (creates its tables; WAL mode on SQLite) and the shop's."""
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
    metadata.create_all(engine)

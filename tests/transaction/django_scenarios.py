"""Django scenarios for transactional publish, run in a subprocess (own Django settings).

Usage: ``python -m tests.transaction.django_scenarios ENGINE BROKER_URL SCHEMA`` where
ENGINE is ``sqlite`` (BROKER_URL ``alkstore+sqlite:///file``) or ``postgresql``. Prints one
JSON line: ``{"ran": [[key, saw_order], ...], "errors": {...}}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import django
from django.conf import settings


def configure(engine: str, broker_url: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(broker_url.removeprefix("alkstore+"))
    if engine == "sqlite":
        db = {"ENGINE": "django.db.backends.sqlite3", "NAME": url.database}
        db["OPTIONS"] = {"timeout": 30}
    else:
        db = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.database,
            "USER": url.username or "",
            "PASSWORD": url.password or "",
            "HOST": url.host or "",
            "PORT": str(url.port or ""),
        }
    settings.configure(DATABASES={"default": db}, INSTALLED_APPS=[], USE_TZ=True)
    django.setup()


def main() -> None:
    engine, broker_url, schema = sys.argv[1:4]
    configure(engine, broker_url)

    from django.db import connection, transaction

    import kombu_alkstore.django
    from kombu_alkstore.errors import ConfigurationError
    from tests.conftest import Target
    from tests.helpers import make_app, thread_worker, wait_for

    target = Target(engine, broker_url.removeprefix("alkstore+"), schema)
    orders = f'"{schema}".orders' if engine == "postgresql" else "orders"
    with connection.cursor() as cur:
        cur.execute(f"CREATE TABLE {orders} (id INTEGER PRIMARY KEY, item TEXT)")

    app = make_app(target)
    ran: list = []
    lock = threading.Lock()

    def order_exists(item: str) -> bool:
        from django.db import connections

        conn = connections["default"]  # this worker thread's own connection
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {orders} WHERE item = %s", [item])
                return cur.fetchone()[0] == 1
        finally:
            conn.close()

    @app.task(shared=False)
    def receipt(item):
        with lock:
            ran.append([item, order_exists(item)])

    def place(item: str, n: int) -> None:
        with connection.cursor() as cur:
            cur.execute(f"INSERT INTO {orders} (id, item) VALUES (%s, %s)", [n, item])
        receipt.delay(item)

    errors: dict[str, str] = {}
    with thread_worker(app):
        # 1. atomic + transaction(): commits together.
        with transaction.atomic(), kombu_alkstore.django.transaction():
            place("committed", 1)
            time.sleep(0.5)
            assert ran == [], ran

        # 2. an exception rolls the atomic block back, and the task with it.
        try:
            with transaction.atomic(), kombu_alkstore.django.transaction():
                place("rolled-back", 2)
                raise RuntimeError("boom")
        except RuntimeError:
            pass

        # 3. outside atomic: refused, nothing published.
        try:
            with kombu_alkstore.django.transaction():
                receipt.delay("outside-atomic")
        except ConfigurationError as exc:
            errors["outside"] = str(exc)

        # 4. a nested atomic (savepoint) rolled back: only the outer tasks run.
        with transaction.atomic(), kombu_alkstore.django.transaction():
            place("outer", 3)
            try:
                with transaction.atomic():
                    place("inner", 4)
                    raise RuntimeError("inner")
            except RuntimeError:
                pass

        # 5. kombu_alkstore.django.atomic() as a decorator.
        @kombu_alkstore.django.atomic()
        def view():
            place("decorated", 5)

        view()

        # 6. bound first, atomic opened inside: resolved at each publish.
        with kombu_alkstore.django.transaction():
            with transaction.atomic():
                place("bound-first", 6)
            try:
                receipt.delay("after-atomic")  # atomic is over: refused
            except ConfigurationError as exc:
                errors["after"] = str(exc)

        wait_for(lambda: len(ran) >= 4, 20)
        time.sleep(2.0)
    print(json.dumps({"ran": ran, "errors": errors}))


if __name__ == "__main__":
    main()

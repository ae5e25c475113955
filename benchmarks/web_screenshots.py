"""Screenshots of every dashboard page for the docs (``docs/dashboard-*.png``).

    python benchmarks/web_screenshots.py [--out docs]

Seeds a private PostgreSQL schema with a small, realistic broker state (queues with due,
delayed and claimed messages, dead letters, a paused queue, an hour of publish/ack
counts, beat schedules, a Celery worker holding a task), serves the dashboard with write
access, and photographs each page with the system's headless Chromium (Playwright).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

PG_URL = os.environ.get("ALKSTORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "screenshot"


def seed(app, store, release: threading.Event) -> None:
    from celery_beat_alkstore import api
    from kombu_alkstore.store.admin import RatePoint

    @app.task(name="billing.charge_invoice", shared=False)
    def charge(invoice_id, amount):
        return amount

    @app.task(name="mail.send_receipt", shared=False)
    def receipt(order_id, to=None):
        return order_id

    @app.task(name="reports.nightly_rollup", shared=False)
    def rollup():
        return None

    @app.task(name="media.transcode", shared=False)
    def transcode(video):
        release.wait(120)

    rnd = random.Random(7)
    for i in range(140):
        charge.apply_async(args=(1000 + i, round(rnd.uniform(5, 500), 2)), queue="billing")
    for i in range(35):
        receipt.apply_async(args=(5000 + i,), kwargs={"to": f"user{i}@example.com"}, queue="mail")
    for i in range(12):
        receipt.apply_async(args=(6000 + i,), queue="mail", countdown=600 + i * 60, priority=5)
    # Delayed work on other queues too, for the Scheduled page: an ETA and retry backoffs.
    charge.apply_async(args=(3001, 99.0), queue="billing", countdown=90)
    for i in range(4):
        charge.apply_async(args=(3100 + i, 42.0), queue="billing", countdown=300 * (i + 1))
    rollup.apply_async(queue="reports", eta=datetime.now(timezone.utc) + timedelta(hours=9))
    for _ in range(8):
        rollup.apply_async(queue="reports")
    for i in range(3):
        transcode.apply_async(args=(f"clip-{i}.mp4",), queue="media")
    # Dead letters: some rejected, some out of attempts, one with markup in its argument.
    errors = [
        "ValueError: invoice 1042 has no customer",
        "TimeoutError: payment gateway did not answer in 30 s",
        "attempts exhausted",
    ]
    for i in range(9):
        charge.apply_async(args=(2000 + i, 12.5), queue="billing-retry")
    receipt.apply_async(args=("<script>alert('x')</script>",), queue="billing-retry")
    for n, d in enumerate(store.claim(["billing-retry"], 10)):
        store.fail([d], errors[n % 3] if n < 9 else "KeyError: '<script>' (shown as text)")
    store.pause_queue("reports")
    now = time.time() // 60 * 60
    points = []
    for m in range(60):
        base = 60 + 40 * (1 + math.sin(m / 7))
        pub = int(base + rnd.uniform(-10, 10))
        ack = int(base * 0.95 + rnd.uniform(-10, 10))
        points.append(RatePoint("billing", now - (59 - m) * 60, pub, ack))
        points.append(RatePoint("mail", now - (59 - m) * 60, pub // 3, pub // 3))
    store._write_rates(points)
    api.schedule(
        "nightly-rollup", "cron 30 2 * * * Europe/Paris", "reports.nightly_rollup", store=store
    )
    api.schedule(
        "weekday-report",
        "cron 0 9 * * mon-fri America/New_York",
        "reports.nightly_rollup",
        store=store,
    )
    api.schedule("retry-sweeper", "@every 5m", "billing.charge_invoice", args=[0, 0], store=store)
    api.schedule("heartbeat", "@every 30s", "mail.send_receipt", args=[0], store=store)
    api.disable("retry-sweeper", store=store)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    out = Path(args.out)

    import uvicorn
    from celery import Celery
    from celery.contrib.testing.worker import start_worker
    from playwright.sync_api import sync_playwright

    import kombu_alkstore  # noqa: F401
    from kombu_alkstore.store import open_store
    from kombu_alkstore.web import Config, Dashboard

    schema = "webshots_" + uuid.uuid4().hex[:8]
    broker = f"alkstore+{PG_URL}"
    store = open_store(PG_URL, schema=schema)
    app = Celery("shop", broker=broker, backend="rpc://", set_as_current=False)
    app.conf.broker_transport_options = {"schema": schema, "polling_interval": 1.0}
    app.conf.worker_hijack_root_logger = False
    release = threading.Event()
    try:
        seed(app, store, release)
        dash = Dashboard(
            store,
            Config(token=TOKEN, refresh=1.0, inspect=True, broker_url=broker, inspect_every=1.0),
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(dash.app(), host="127.0.0.1", port=port, log_level="warning")
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        with start_worker(
            app,
            pool="threads",
            concurrency=2,
            perform_ping_check=False,
            queues=["media"],
            hostname="worker1@media-host",
            loglevel="WARNING",
            shutdown_timeout=5,
        ):
            time.sleep(4)  # the worker holds two transcodes; the inspector asks it
            dead_id = store.dead_search(limit=1)[0].id
            shots = [
                ("overview", "/"),
                ("queue", "/queues/billing"),
                ("dead", "/dead"),
                ("dead-letter", f"/dead/{dead_id}"),
                ("scheduled", "/scheduled"),
                ("schedules", "/schedules"),
                ("consumers", "/consumers"),
            ]
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
                )
                ctx = browser.new_context(
                    http_credentials={"username": "ops", "password": TOKEN},
                    viewport={"width": 1280, "height": 800},
                )
                page = ctx.new_page()
                page.goto(base + "/login")
                for name, path in shots:
                    page.goto(base + path)
                    page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=True)
                    print("wrote", out / f"dashboard-{name}.png")
                browser.close()
            release.set()
        server.should_exit = True
        dash.stop()
    finally:
        release.set()
        store.close()
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()

"""Fixtures for the dashboard tests: a live dashboard (uvicorn in a thread, on a free port)
over the test's own store, and one real headless Chromium shared by the whole session.

Chromium is the distribution's package (``/usr/bin/chromium``, installed by ``.ci/run``),
driven by Playwright for Python; a missing browser fails the tests, never skips them.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

CHROMIUM = os.environ.get("ALKSTORE_CHROMIUM", "/usr/bin/chromium")
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
TOKEN = "test-token-1234"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveDashboard:
    """A running dashboard: its URL, its store, and the Dashboard object."""

    url: str
    store: object
    dashboard: object

    def get(self, path: str, headers: dict | None = None) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, data: dict, headers: dict | None = None) -> tuple[int, str]:
        from urllib.parse import urlencode

        req = urllib.request.Request(
            self.url + path, data=urlencode(data, doseq=True).encode(), headers=headers or {}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def start_dashboard(target, token: str | None = TOKEN, inspect: bool = False, **kw):
    """Serve the dashboard over ``target`` in a thread; returns (LiveDashboard, stop)."""
    import uvicorn

    from kombu_alkstore.web import Config, Dashboard

    store = target.open(setup=True)
    config = Config(
        token=token,
        refresh=kw.pop("refresh", 0.3),
        inspect=inspect,
        broker_url=target.broker_url,
        inspect_every=kw.pop("inspect_every", 1.0),
    )
    dash = Dashboard(store, config)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(dash.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not start")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(15)
        store.close()

    return LiveDashboard(f"http://127.0.0.1:{port}", store, dash), stop


@contextmanager
def serving(target) -> Iterator[LiveDashboard]:
    """A dashboard with write access (token ``TOKEN``) on ``target``, stopped after."""
    live, stop = start_dashboard(target)
    try:
        yield live
    finally:
        stop()


@pytest.fixture
def dashboard(pg_target) -> Iterator[LiveDashboard]:
    """A dashboard with write access (token ``TOKEN``) on the test's PostgreSQL schema."""
    with serving(pg_target) as live:
        yield live


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (Playwright, the system's chromium)."""
    from playwright.sync_api import sync_playwright

    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.fail(f"Chromium is required for the browser tests and {CHROMIUM} is missing")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def login(page, url: str) -> None:
    """Log in as an operator does: ``/login`` answers 401 with a Basic challenge, the
    browser answers it with its credentials and sends them on every later request."""
    page.goto(url + "/login")
    assert "write access" in page.locator("header").inner_text()


@pytest.fixture
def page(browser):
    """A page whose browser has the dashboard token as its HTTP Basic credentials (sent
    once the dashboard asks: see :func:`login`)."""
    context = browser.new_context(
        http_credentials={"username": "ops", "password": TOKEN},
        viewport={"width": 1200, "height": 800},
    )
    p = context.new_page()
    p.set_default_timeout(15_000)
    try:
        yield p
    finally:
        context.close()


@pytest.fixture
def anon_page(browser):
    """A page without credentials (read-only)."""
    context = browser.new_context()
    p = context.new_page()
    p.set_default_timeout(15_000)
    try:
        yield p
    finally:
        context.close()

"""``web``: serve the dashboard and ``/metrics`` (the ``web`` extra) until interrupted."""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from .arguments import positive
from .connection import open_cli_store, store_url
from .errors import CLIError


def cmd_web(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``web``: serve the dashboard until interrupted (the ``web`` extra); write access
    only with a token (``--token-file`` or ``$ALKSTORE_WEB_TOKEN``)."""
    try:
        from ..web import Config, serve
    except ImportError as exc:
        raise CLIError(
            f"the dashboard needs the web extra: pip install 'kombu-alkstore[web]' ({exc})"
        ) from None
    token = os.environ.get("ALKSTORE_WEB_TOKEN") or None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip() or None
    store = open_cli_store(args)
    broker = store_url(args.broker)
    config = Config(
        token=token,
        refresh=args.refresh,
        inspect=not args.no_inspect,
        broker_url=f"alkstore+{broker}",
    )
    mode = "write access with the token" if token else "read-only (no ALKSTORE_WEB_TOKEN)"
    out.write(f"dashboard on http://{args.host}:{args.port}/ for {store.url.masked()}: {mode}\n")
    out.flush()
    try:
        serve(store, config, host=args.host, port=args.port)
    finally:
        store.close()
    return 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``web`` on the subcommands ``sub``."""
    p = sub.add_parser(
        "web",
        parents=[common],
        help="the dashboard and Prometheus /metrics (read-only unless $ALKSTORE_WEB_TOKEN)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the write-access token (else $ALKSTORE_WEB_TOKEN; none: read-only)",
    )
    p.add_argument(
        "--refresh", type=positive, default=5.0, help="seconds between count refreshes (5)"
    )
    p.add_argument(
        "--no-inspect",
        action="store_true",
        help="do not ask Celery workers (inspect active/reserved) for the consumers page",
    )
    p.set_defaults(func=cmd_web)

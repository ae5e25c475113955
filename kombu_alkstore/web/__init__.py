"""The dashboard and Prometheus ``/metrics`` (``pip install "kombu-alkstore[web]"``).

``kombu-alkstore -b URL web [--host H --port P]`` serves it; :func:`create_app` gives the
ASGI app over an open store for embedding. Modules: :mod:`.app` (routes, pages),
:mod:`.sampler` (the whole-table figures, read in the background), :mod:`.messages` (a
message as a page shows it), :mod:`.filters` (the dead-letter filter of a page or form),
:mod:`.bulk` (requeue and purge, in batches), :mod:`.beat` (the schedules page over
``celery_beat_alkstore.api``), :mod:`.consumers` (Celery's inspect of the workers),
:mod:`.chart` (the SVG rate chart), :mod:`.metrics` (Prometheus), :mod:`.auth` (write
access, CSRF). Messages are decoded and formatted by :mod:`kombu_alkstore.present`.
"""

from __future__ import annotations

from .app import Config, Dashboard, create_app

__all__ = ["Config", "Dashboard", "create_app", "serve"]


def serve(store, config: Config, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the dashboard over ``store`` until interrupted (uvicorn); every action is
    logged to stderr (``kombu_alkstore.web.audit``)."""
    import logging

    import uvicorn

    audit = logging.getLogger("kombu_alkstore.web.audit")
    if not audit.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s audit %(message)s"))
        audit.addHandler(handler)
        audit.setLevel(logging.INFO)

    app = create_app(store, config)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)

"""kombu-alkstore: a Celery broker on SQL queue tables (PostgreSQL, SQLite).

Importing this package registers the ``alkstore`` transport alias with kombu, so
``broker_url = "alkstore+postgresql://…"`` or ``"alkstore+sqlite:///celery.db"`` works.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from . import failover, limits, unique
from .compat import celery as _compat_celery
from .transaction import transaction

TRANSPORT_ALIASES.setdefault("alkstore", "kombu_alkstore.transport:Transport")
failover.install()  # kombu failover lists of alkstore+ URLs
# Before Celery 5.7 a worker loses task events buffered while it flushes (compat.celery);
# connected here, on import, so that it precedes every worker's worker_init.
_compat_celery.keep_events_sent_during_flush()
unique.install()  # per-task unique keys (the alkstore_unique task option)
limits.install()  # per-task limit keys (the alkstore_limit_key task option)

__all__ = ["transaction"]
__version__ = "0.1.0"

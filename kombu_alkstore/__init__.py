"""kombu-alkstore: a Celery broker on SQL queue tables (PostgreSQL, SQLite).

Importing this package registers the ``alkstore`` transport alias with kombu, so
``broker_url = "alkstore+postgresql://…"`` or ``"alkstore+sqlite:///celery.db"`` works.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from . import failover
from .transaction import transaction

TRANSPORT_ALIASES.setdefault("alkstore", "kombu_alkstore.transport:Transport")
failover.install()  # kombu failover lists of alkstore+ URLs

__all__ = ["transaction"]
__version__ = "0.1.0"

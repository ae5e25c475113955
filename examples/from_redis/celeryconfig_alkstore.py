"""AFTER: the same application on kombu-alkstore (PostgreSQL).

Load it with ``app.config_from_object("celeryconfig_alkstore")``. The broker URL comes
from ``CELERY_BROKER_URL`` when set (the example's test points it at an SQLite file).
"""

import os

import kombu_alkstore  # noqa: F401  registers the "alkstore+" URL scheme with kombu

broker_url = os.environ.get(
    "CELERY_BROKER_URL",
    # libpq multi-host form: a PostgreSQL failover is just a reconnect
    "alkstore+postgresql://app_rw:secret@/app?host=db1,db2&target_session_attrs=read-write",
)
# Results: keep them on Redis if you like ("redis://redis.internal:6379/1"), or send them
# back through the broker:
result_backend = "rpc://"

broker_transport_options = {
    "schema": "proj",  # was global_keyprefix: each app (or environment) its own schema
    "setup": False,  # tables created by the migration: `kombu-alkstore setup --print`
    "visibility_timeout": 300,  # default; heartbeats keep long tasks' claims alive
    "max_attempts": 3,  # new: after 3 deliveries a message becomes a dead letter
    #                     (Redis would redeliver it forever)
    "dead_letter_retention": 14 * 86400,  # new: drop dead letters after two weeks
}

# Priority runs the other way: higher first, 0–255. Map Redis 0..9 (0 highest) to
# 9..0, i.e. new = 9 - old; a task sent with priority=0 ("urgent" on Redis) now needs 9.
task_default_priority = 0  # was 0 ("highest" on Redis) → now the lowest, the normal case

task_acks_late = True
task_reject_on_worker_lost = True  # with acks_late: a killed worker's task runs again
worker_prefetch_multiplier = 1
task_routes = {"proj.tasks.send_email": {"queue": "email"}}


def redis_to_alkstore_priority(old: int) -> int:
    """Redis priority (0 = highest … 9 = lowest) → alkstore priority (higher first)."""
    return 9 - max(0, min(9, old))

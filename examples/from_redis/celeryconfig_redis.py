"""BEFORE: a typical Celery configuration on Redis (for comparison; not used by the example).

Each setting that changes meaning on alkstore is marked "→" with what to do; see
celeryconfig_alkstore.py for the result.
"""

broker_url = "redis://redis.internal:6379/0"  # → alkstore+postgresql://… (one import needed)
result_backend = "redis://redis.internal:6379/1"  # → may stay on Redis, or use rpc://

broker_transport_options = {
    # Redis holds ETA/countdown tasks in the worker and restores unacked messages after
    # this timeout, so it is often raised to the longest countdown to avoid duplicates.
    "visibility_timeout": 43200,  # → not needed: ETA is stored in the broker, and claims
    #                                   are heartbeated (alkstore default 300 s is fine)
    "priority_steps": [0, 3, 6, 9],  # → drop: alkstore priorities are 0–255
    "sep": ":",  # → drop
    "queue_order_strategy": "priority",  # → drop
    "global_keyprefix": "proj:",  # → use the "schema" option to separate apps
}

task_default_priority = 0  # Redis: 0 is the HIGHEST priority  → alkstore: 255 is highest
task_acks_late = True  # → keep: safe with heartbeats, no giant visibility timeout needed
worker_prefetch_multiplier = 1  # → keep
task_routes = {"proj.tasks.send_email": {"queue": "email"}}  # → keep as is

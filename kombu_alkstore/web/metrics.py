"""``/metrics`` for Prometheus, with the official ``prometheus_client``.

A scrape reads the dashboard's :class:`~.sampler.Snapshot` (refreshed by the sampler on
its own timer), so it sends no statement itself: the cost per scrape is constant however
many queues or messages there are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .sampler import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StoreCollector(Collector):
    """Queue depths, dead letters, oldest age and publish/ack counters per queue; limits;
    the xmin horizon and the store tables' dead rows."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator:
        snap = self.snapshot()
        depth = GaugeMetricFamily(
            "alkstore_queue_messages",
            "Messages in a queue by state (pending: due, delayed: ETA in the future, "
            "processing: claimed)",
            labels=["queue", "state"],
        )
        dead = GaugeMetricFamily("alkstore_dead_letters", "Dead letters", labels=["queue"])
        oldest = GaugeMetricFamily(
            "alkstore_oldest_pending_age_seconds",
            "Age of the oldest due pending message",
            labels=["queue"],
        )
        paused = GaugeMetricFamily("alkstore_queue_paused", "1 if paused", labels=["queue"])
        for c in snap.counts:
            for state in ("pending", "delayed", "processing"):
                depth.add_metric([c.queue, state], getattr(c, state))
            dead.add_metric([c.queue], c.dead)
            oldest.add_metric([c.queue], c.oldest_age or 0.0)
        for name in snap.queue_names():
            paused.add_metric([name], 1.0 if name in snap.paused else 0.0)
        published = CounterMetricFamily(
            "alkstore_published", "Messages published to a queue", labels=["queue"]
        )
        acked = CounterMetricFamily("alkstore_acked", "Messages acked (done)", labels=["queue"])
        for t in snap.totals:
            published.add_metric([t.queue], t.published)
            acked.add_metric([t.queue], t.acked)
        age = GaugeMetricFamily(
            "alkstore_snapshot_timestamp_seconds", "When these figures were read"
        )
        age.add_metric([], snap.taken_at)
        up = GaugeMetricFamily("alkstore_up", "1 if the last read of the store succeeded")
        up.add_metric([], 0.0 if snap.error else 1.0)
        limit = GaugeMetricFamily(
            "alkstore_queue_limit",
            "Concurrency limit: most jobs claimed at once (key empty: the whole queue; "
            "'*': each key without its own)",
            labels=["queue", "key"],
        )
        used = GaugeMetricFamily(
            "alkstore_queue_limit_used",
            "Jobs claimed now, of a limited queue (key empty) or of a key with claims",
            labels=["queue", "key"],
        )
        for q in snap.limits.values():
            if q.limit is not None:
                limit.add_metric([q.queue, ""], q.limit)
            used.add_metric([q.queue, ""], q.used)
            for key, n in q.keys.items():
                limit.add_metric([q.queue, key], n)
            for key, n in q.keys_used.items():
                used.add_metric([q.queue, key], n)
        yield from (depth, dead, oldest, paused, published, acked, age, up, limit, used)
        yield from _rates(snap)
        yield from _vacuum(snap)


def _rates(snap: Snapshot) -> Iterator:
    """Each rate limit (claims per period), its use within the period, and whether the
    queue is throttled now (docs/flow-control.md "Rate limits")."""
    rate = GaugeMetricFamily(
        "alkstore_queue_rate_limit",
        "Rate limit: most claims in any period (key empty: the whole queue; '*': each key "
        "without its own)",
        labels=["queue", "key"],
    )
    period = GaugeMetricFamily(
        "alkstore_queue_rate_period_seconds", "The period of a rate limit", labels=["queue", "key"]
    )
    used = GaugeMetricFamily(
        "alkstore_queue_rate_used",
        "Claims within the rate's last period ('*': of the busiest key without its own)",
        labels=["queue", "key"],
    )
    throttled = GaugeMetricFamily(
        "alkstore_queue_throttled",
        "1 if every due job of the queue waits for a rate's window, else 0",
        labels=["queue"],
    )
    throttles = CounterMetricFamily(
        "alkstore_queue_rate_throttled",
        "Throttled claims: times a claim found every due job of the queue refused by a rate",
        labels=["queue"],
    )
    for q in snap.limits.values():
        r = q.rates
        if r is None:
            continue
        entries = ([("", r.rate, r.used)] if r.rate is not None else []) + [
            (key, each, r.keys_used.get(key, 0)) for key, each in r.keys.items()
        ]
        for key, each, n in entries:
            rate.add_metric([q.queue, key], each.n)
            period.add_metric([q.queue, key], each.per)
            used.add_metric([q.queue, key], n)
        throttled.add_metric([q.queue], 1.0 if r.throttled_until is not None else 0.0)
        throttles.add_metric([q.queue], r.throttles)
    yield from (rate, period, used, throttled, throttles)


def _vacuum(snap: Snapshot) -> Iterator:
    """The horizon's oldest holder and each store table's rows (store/health.py)."""
    holders = snap.health.holders
    horizon = GaugeMetricFamily(
        "alkstore_horizon_age_seconds",
        "How long the oldest open transaction or prepared transaction of the database "
        "has held back the removal of dead rows (0: none)",
    )
    horizon.add_metric([], max((h.age or 0.0 for h in holders), default=0.0))
    xids = GaugeMetricFamily(
        "alkstore_horizon_xids",
        "Transaction ids behind the oldest horizon holder: sessions, replication slots, "
        "prepared transactions (0: none)",
    )
    xids.add_metric([], max((h.xids or 0 for h in holders), default=0))
    rows = GaugeMetricFamily(
        "alkstore_table_rows",
        "Rows of a store table by state (live, dead)",
        labels=["table", "state"],
    )
    autovacuum = GaugeMetricFamily(
        "alkstore_table_autovacuum", "1 if autovacuum cleans the store table", labels=["table"]
    )
    for t in snap.health.tables:
        rows.add_metric([t.table, "live"], t.live)
        rows.add_metric([t.table, "dead"], t.dead)
        autovacuum.add_metric([t.table], 1.0 if t.autovacuum else 0.0)
    yield from (horizon, xids, rows, autovacuum)


def registry(snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(snapshot))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)

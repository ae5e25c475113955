"""Transport options (``broker_transport_options``): validated at connect, naming the bad one."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigurationError
from ..store.fair import parse_fair
from ..store.limits import parse_limits
from ..store.options import StoreOptions, coerce_option, is_finite_number
from ..store.rates import parse_rates
from ..tables.spec import parse_tables

#: The shortest visibility timeout a transport accepts (seconds): a claim must outlive the
#: round trip that delivers it and its task's start (at 5 ms every claim of a burst
#: lapsed and most tasks ran two or three times; the store itself takes any positive one).
MIN_VISIBILITY_TIMEOUT = 1.0

#: kombu/Celery options that may appear in ``transport_options`` and are not ours.
_FOREIGN = frozenset(
    {
        "max_retries",
        "interval_start",
        "interval_step",
        "interval_max",
        "body_encoding",
        "deadletter_queue",
        "client_properties",
    }
)

#: Redis transport options a switched app may still carry, and what does their job here.
_INSTEAD = {
    "global_keyprefix": "to keep apps apart use the option 'schema'",
    "sep": "queue names are stored as they are",
    "fanout_prefix": "fanout exchanges are kept apart by their bindings already",
    "fanout_patterns": "fanout exchanges are kept apart by their bindings already",
    "priority_steps": "priorities 0-255 are stored as given, higher first",
    "queue_order_strategy": "queues are claimed by priority, then due time",
    "unacked_mutex_expire": "claims are row-locked, no mutex is needed",
    "unacked_mutex_key": "claims are row-locked, no mutex is needed",
    "socket_timeout": "use the URL's connect_timeout, or options=-c statement_timeout=…",
    "health_check_interval": "connections are checked by every pooled use",
}


#: Transport options that are not numbers (parsed on their own).
_NOT_NUMBERS = frozenset({"limits", "rates", "fair", "tables"})


@dataclass(frozen=True)
class TransportOptions:
    """What the transport itself needs, besides the store's options."""

    #: Safety-net re-poll of the queues, in seconds: wake-ups (NOTIFY on PostgreSQL, the
    #: change check on SQLite) deliver new work; this only covers a lost notification.
    polling_interval: float = 10.0
    #: How often held messages have their deadlines extended; default visibility/3.
    heartbeat_interval: float | None = None
    #: The most messages one claim fetches (the channel's QoS sets the rest).
    prefetch_max: int = 100
    #: How often a worker sweeps expired jobs and retention (at least once a minute).
    sweep_interval: float = 60.0
    #: How long acks may wait to be applied together in one statement, in seconds.
    ack_flush_interval: float = 0.02
    #: SQLite: how often to check for others' commits, in seconds.
    sqlite_poll_interval: float = 0.005
    #: SQLite: the same check once nothing has changed for a second (an idle worker).
    sqlite_idle_poll_interval: float = 0.02
    #: PostgreSQL, in a worker's event loop: claims and acks are sent without waiting
    #: for their answers, which the loop reads when they arrive (``False``: they block).
    async_claims: bool = True
    #: PostgreSQL, with ``async_claims``: an idle channel offers its free prefetch slots,
    #: and a publisher hands it a new due job already claimed, in the notification, so the
    #: task starts without a claim round trip (``False``: every job waits to be claimed).
    handoff: bool = True
    #: Concurrency limits per queue, set on the store when a connection opens it:
    #: ``{queue: N}`` or ``{queue: {"limit": N, "keys": {key: M, "*": M}}}``, parsed by
    #: :func:`kombu_alkstore.store.limits.parse_limits` (docs/flow-control.md).
    limits: Any = None
    #: The rates of the ``limits`` option (``"rate"``, ``"key_rates"``), parsed by
    #: :func:`kombu_alkstore.store.rates.parse_rates` (not an option of its own).
    rates: Any = None
    #: The fair queues of the ``limits`` option (``"fair"``: true or shares), parsed by
    #: :func:`kombu_alkstore.store.fair.parse_fair` (not an option of its own).
    fair: Any = None
    #: Tables of the service's own read as queues: ``{queue: {"table": ..., "task": ...,
    #: "columns": {role: column}, ...}}``, parsed by
    #: :func:`kombu_alkstore.tables.spec.parse_tables` (docs/tables.md).
    tables: tuple = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(f.default, bool) or f.name in _NOT_NUMBERS:
                continue
            if not is_finite_number(value) or value <= 0:
                raise ConfigurationError(
                    f"transport option {f.name} must be a positive, finite number, got {value!r}"
                )
        if self.sweep_interval > 60:
            raise ConfigurationError(
                f"transport option sweep_interval must be at most 60 s, got {self.sweep_interval!r}"
            )


def parse_transport_options(raw: dict[str, Any] | None) -> tuple[StoreOptions, TransportOptions]:
    """Split ``transport_options`` into store and transport options.

    A bad value raises :class:`ConfigurationError` naming the option; an unknown key is
    a warning naming it (it may belong to another transport the app also uses).
    """
    raw = dict(raw or {})
    mine = {f.name: f.default for f in fields(TransportOptions) if f.name not in ("rates", "fair")}
    store_names = StoreOptions.names()
    for key in raw:
        if key not in mine and key not in store_names and key not in _FOREIGN:
            instead = _INSTEAD.get(key)
            hint = f" (a Redis transport option: {instead})" if instead else ""
            warnings.warn(
                f"kombu-alkstore: unknown transport option {key!r} is ignored{hint}",
                stacklevel=3,
            )
    try:
        store = StoreOptions.from_mapping({k: v for k, v in raw.items() if k in store_names})
    except ConfigurationError as exc:
        raise ConfigurationError(f"transport {exc}") from None
    kwargs: dict[str, Any] = {}
    if raw.get("limits") is not None:
        kwargs["limits"] = parse_limits(raw["limits"], "transport option limits")
        kwargs["rates"] = parse_rates(raw["limits"], "transport option limits")
        kwargs["fair"] = parse_fair(raw["limits"], "transport option limits")
    if raw.get("tables") is not None:
        kwargs["tables"] = parse_tables(raw["tables"])
    for name, default in mine.items():
        if raw.get(name) is not None and name not in _NOT_NUMBERS:
            kwargs[name] = coerce_option(name, raw[name], 1.0 if default is None else default)
    transport = TransportOptions(**kwargs)
    if store.transaction_pooler and not store.listen_url:
        warnings.warn(
            "kombu-alkstore: transaction_pooler is on without listen_url: LISTEN through a "
            "transaction-mode pooler hears nothing, so workers wake only at the safety-net "
            "poll and take no hand-offs; set listen_url to a direct database URL",
            stacklevel=3,
        )
    if store.transaction_pooler and not store.durable_publish:
        warnings.warn(
            "kombu-alkstore: durable_publish=False has no effect with transaction_pooler: a "
            "transaction-mode pooler refuses the session option synchronous_commit=off, so "
            "every publish waits for its WAL flush",
            stacklevel=3,
        )
    if store.visibility_timeout < MIN_VISIBILITY_TIMEOUT:
        raise ConfigurationError(
            f"transport option visibility_timeout ({store.visibility_timeout!r} s) must be "
            f"at least {MIN_VISIBILITY_TIMEOUT:g} s: a claim that lapses before its task "
            "starts is claimed again by every worker, and the task runs many times"
        )
    if store.queue_expiry_grace < 2 * transport.sweep_interval:
        raise ConfigurationError(
            f"transport option queue_expiry_grace ({store.queue_expiry_grace!r} s) must be "
            f"at least twice sweep_interval ({transport.sweep_interval!r} s): workers refresh "
            "their queues once a sweep, and a shorter grace drops the live ones (pidbox, "
            "replies, broadcasts) between refreshes"
        )
    beat = transport.heartbeat_interval
    if beat is not None and beat >= store.visibility_timeout:
        raise ConfigurationError(
            f"transport option heartbeat_interval ({beat!r} s) must be shorter than "
            f"visibility_timeout ({store.visibility_timeout!r} s): claims would lapse "
            "between heartbeats"
        )
    return store, transport

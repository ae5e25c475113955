"""The PostgreSQL engine's statements, their parameters and their rows: one module the
store, its claim session, its waiter and its result tables all use.

:class:`PostgresStatements` holds every statement of ``queries.sql`` (and ``acts.sql``)
rendered for one store's tables, and binds parameters as every statement takes them. The
functions below make the parameters of the statements on claims (:func:`handles`,
:func:`pend_params`, :func:`rates_params`) and read a claim's rows
(:func:`claimed_deliveries`), the same for a blocking call and for a claim session's
pipelined one.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..acts import ACT_STATEMENTS
from ..admin import TOTAL_MINUTE, RatePoint
from ..options import check_text_params
from ..sqlfile import load_queries
from ..statements import STATEMENTS
from ..values import MAINTENANCE_JOBS, Delivery, Row
from .floors import band_params

#: The statements a claim session prepares.
SESSION_STATEMENTS = (
    "claim_one",
    "claim_any",
    "ack",
    "heartbeat",
    "pend",
    "has_due",
    "next_due",
    "touch_queues",
    "lease_acquire",
    "register",
    "rates_add",
    "rates_trim",
)
#: Statements run on the pool that does not wait for the WAL flush (see PostgresStore).
FAST_KEYS = ("claim_one", "claim_any", "ack", "heartbeat", "pend", "kill", "touch_queues")
FAST_KEYS += (*MAINTENANCE_JOBS, "maintenance_round")
#: The statements this engine runs itself, beyond the shared code's.
OWN_STATEMENTS = frozenset(
    [
        "ping",
        "clock",
        "setup_lock",
        "meta_table",
        "version",
        "identify",
        "waiter_start",
        "waiter_lock",
        "waiter_hear",
        "waiter_deaf",
        "withdraw_offers",
        "insert",
        "insert_pending",
        "insert_unique",
        "heartbeat",
        "pend",
        "kill",
        "next_due",
        "counts",
        "dead_list",
        "dead_requeue",
        "dead_move",
        "dead_purge",
        "rates_add",
        "exchange_declare",
        "exchange_delete",
        "bind",
        "unbind",
        "queue_delete",
        *SESSION_STATEMENTS,
    ]
)


class PostgresStatements:
    """Every statement of ``queries.sql`` for one store's tables (:attr:`sql`, by name),
    and the store's NOTIFY channel and advisory lockspace that they bind.

    Loading checks that every statement the shared code and this engine run is defined
    (a malformed file fails when the store opens, see :mod:`..sqlfile`).
    """

    def __init__(self, names: Mapping[str, str], schema: str) -> None:
        #: The store's NOTIFY channel (bound to every statement as ``%(channel)s``).
        self.channel = f"alkstore_{schema}"
        #: The first key of the advisory locks that mark live waiters (see PostgresWaiter).
        self.lockspace = zlib.crc32(self.channel.encode()) & 0x7FFFFFFF
        #: The offers table, whose size gates the hand-off (``offers_open``).
        self.offers = names["offers"]
        self.sql: dict[str, str] = load_queries(
            __package__,
            ("queries.sql", "acts.sql"),
            names,
            required=STATEMENTS | OWN_STATEMENTS | ACT_STATEMENTS,
        )

    def params(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``params`` as a statement binds them: with the channel, the lockspace and the
        offers table's name (psycopg ignores unused keys), every text value checked (a
        NUL or a lone surrogate is refused by name, before anything is sent)."""
        args = {
            "channel": self.channel,
            "lockspace": self.lockspace,
            "offers_rel": self.offers,
            **(params or {}),
        }
        check_text_params(args)
        return args

    def subset(self, keys: Iterable[str]) -> dict[str, str]:
        """The statements ``keys``, by name (what a pipeline session prepares)."""
        return {key: self.sql[key] for key in keys}


def handles(held: Sequence[Delivery]) -> dict[str, Any]:
    """The claims as the statements name them (``held_handles`` in queries.sql)."""
    return {"ids": [d.id for d in held], "tokens": [d.token for d in held]}


def pend_params(held: Sequence[tuple[Delivery, float, int]]) -> dict[str, Any]:
    """``pend``'s parameters for ``(delivery, delay, refund)`` triples."""
    params = handles([d for d, _, _ in held])
    params["delays"] = [float(w) for _, w, _ in held]
    params["refunds"] = [int(r) for _, _, r in held]
    return params


def rates_params(rows: Sequence[RatePoint]) -> dict[str, Any]:
    """``rates_add``'s parameters for counted rows."""
    return {
        "queues": [r.queue for r in rows],
        "minutes": [r.minute for r in rows],
        "pub": [r.published for r in rows],
        "ack": [r.acked for r in rows],
        "total": TOTAL_MINUTE,
    }


def claim_key(queues: Sequence[str]) -> str:
    """The claim statement for these (distinct) queues: one queue walks the claim index
    in order; several take the best rows of each."""
    return "claim_one" if len(queues) == 1 else "claim_any"


def claim_params(
    queues: Sequence[str], limit: int, bands: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The claim statement's parameters for these (distinct, non-empty) queues, with the
    band parameters of their claim floors (:meth:`.floors.ClaimFloors.plan`; None: no
    floor, every queue's whole claim order)."""
    if bands is None:
        bands = band_params((q, {}) for q in queues)
    return {"queues": list(queues), "queue": queues[0], "limit": int(limit), **bands}


def claimed_deliveries(rows: Sequence[Row]) -> tuple[list[Delivery], bool]:
    """A claim's rows as deliveries (in claim order), and whether spent jobs (moved to
    the dead letters) took places in the batch, so more may be due."""
    claimed = [dict(r) for r in rows if r["id"] is not None]
    claimed.sort(key=lambda r: (-r["priority"], r["was_due"], r["id"]))  # the claim order
    for r in claimed:
        del r["was_due"]
    return [Delivery(**r) for r in claimed], len(claimed) < len(rows)

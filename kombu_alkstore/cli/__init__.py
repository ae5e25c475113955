"""Operator CLI: ``kombu-alkstore`` / ``python -m kombu_alkstore``.

Commands (``-b/--broker URL`` as ``celery`` spells it, default ``$CELERY_BROKER_URL``)::

    status [--queue Q] [--watch [SECONDS]] [--json]   per-queue counts
    scheduled [--queue Q] [--limit N] [--json]        delayed tasks, soonest first
    dead list [--queue Q] [--limit N] [--json]        one line per dead letter
    dead show ID [--json]                             one dead letter, Celery body decoded
    dead requeue (ID... | --queue Q | --all)          back to pending, attempts reset
    dead purge (ID... | --queue Q | --all) [-f]       delete for good (asks unless -f)
    setup [--print [--grant ROLE]]                    apply (or print) the DDL
    sweep                                             run one maintenance sweep now
    queue pause|resume NAME                           stop/restart claims of a queue
    queue limit NAME (N | --clear) [--key K]          at most N claimed at once
    acts [--queue Q] [--by WHO] [--act NAME] [--since WHEN] [--limit N] [--json]
                                                      the operators' acts on record
    web [--host H] [--port P]                         the dashboard and /metrics

``dead requeue``, ``dead purge`` and ``queue pause|resume`` take ``--by WHO`` (default: the
OS user name) and ``--reason WHY``: each is kept as an act in the store, in the
transaction of its change (:mod:`.acts`).

Every error a user can cause (bad URL, unreachable database, unknown id, missing
tables) is one line on stderr and exit status 1; never a traceback.

Modules: :mod:`.run` (``main``), :mod:`.parser` (the grammar), one module per group of
commands (:mod:`.status`, :mod:`.scheduled`, :mod:`.dead`, :mod:`.admin`,
:mod:`.acts`, :mod:`.dashboard`), and what they share: :mod:`.connection` (broker URL to store),
:mod:`.arguments`, :mod:`.listing`, :mod:`.output`, :mod:`.errors`. Messages are decoded
and formatted by :mod:`kombu_alkstore.present`.
"""

from __future__ import annotations

from .connection import store_url
from .errors import CLIError
from .parser import build_parser
from .run import main

__all__ = ["CLIError", "build_parser", "main", "store_url"]

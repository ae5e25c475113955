"""kombu failover lists of ``alkstore+…`` URLs (``"alkstore+postgresql://a/db;alkstore+postgresql://b/db"``).

kombu's ``Connection`` splits ``alkstore+<database URL>`` into the transport and its URL
when it is built, but ``Connection.switch`` (the failover to the next URL) parses the
URL generically and looks for a transport named ``alkstore+postgresql``. This module
makes the switch treat an ``alkstore+`` URL as the constructor does; every other URL
goes through kombu unchanged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kombu import Connection

PREFIX = "alkstore+"
_kombu_switch = Connection.switch


def _switch(self: Connection, conn_str: str) -> None:
    if not (isinstance(conn_str, str) and conn_str.startswith(PREFIX) and "://" in conn_str):
        return _kombu_switch(self, conn_str)
    self.close()
    self.declared_entities.clear()
    self._closed = False
    scheme = conn_str.split("://", 1)[0]
    params: dict[str, Any] = dict(self._initial_params)
    # As kombu's own switch would: the URL's scheme and port (the scheme is an alias of
    # this transport, see install), the whole database URL as the hostname.
    params.update(transport=scheme, hostname=conn_str[len(PREFIX) :], port=_port(conn_str))
    self._init_params(**params)
    return None


def _port(url: str) -> int | None:
    try:
        return urlparse(url).port
    except ValueError:  # several hosts: no single port
        return None


def install() -> None:
    """Make ``Connection.switch`` understand ``alkstore+`` URLs (idempotent), with every
    ``alkstore+<driver>`` scheme an alias of this transport."""
    from kombu.transport import TRANSPORT_ALIASES

    from .store.engines import schemes

    for driver in sorted(schemes()):
        TRANSPORT_ALIASES.setdefault(PREFIX + driver, "kombu_alkstore.transport:Transport")
    if Connection.switch is not _switch:
        Connection.switch = _switch  # type: ignore[method-assign]

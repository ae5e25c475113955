"""``ResultBackend``: Celery's result backend on the store's ``results`` table.

Configured as ``result_backend = "alkstore+postgresql://…"``, ``"alkstore+sqlite:///…"``
or ``"alkstore://"`` (the broker's database; see :mod:`.config`). Celery finds the class
through the ``celery.result_backends`` entry point ``alkstore``.

What it guarantees:

* Everything Celery's key/value backends store (state, result, traceback, children, the
  ``result_extended`` fields, groups, ``forget``), one row per key, encoded by Celery's
  serializer (any ``result_serializer``, with ``result_compression``). A read never
  returns an expired value; ``cleanup()`` (Celery's daily ``celery.backend_cleanup``)
  deletes them.
* ``get()`` is pushed: waiting costs no statement per waiter (see :mod:`.watcher`).
* Chords are native (``supports_native_join``): see :mod:`.chord`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import states
from celery.backends.asynchronous import AsyncBackendMixin
from celery.backends.base import BaseKeyValueStoreBackend
from celery.exceptions import BackendStoreError
from celery.result import GroupResult
from celery.utils.functional import _regen
from kombu.utils.encoding import bytes_to_str

from ..store import Store, connection_errors, shared_store
from ..store.resultstore import ResultStore
from . import chord
from .config import ResultConfig, resolve
from .consumer import ResultConsumer
from .watcher import Watcher, watcher_for


class ResultBackend(BaseKeyValueStoreBackend, AsyncBackendMixin):
    """Celery results in the alkstore tables of a PostgreSQL database or SQLite file."""

    ResultConsumer = ResultConsumer
    key_t = bytes_to_str  # keys are text columns

    supports_native_join = True
    #: Expired rows are hidden from reads but deleted by cleanup(): Celery's beat then
    #: schedules ``celery.backend_cleanup``.
    supports_autoexpire = False
    supports_result_compression = True  # values are stored as bytes, unchanged
    supports_failure_expires = True
    persistent = True

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        #: The database, store options and whether the broker shares them.
        self.config: ResultConfig = resolve(self.app.conf, url)
        failure = self.app.conf.get("result_failure_expires")
        self.failure_expires = (
            self.expires if failure is None else self.prepare_expires(failure, type=int)
        )
        self.connection_errors = connection_errors()
        self._store: Store | None = None
        self._store_pid = 0
        self.result_consumer = self.ResultConsumer(
            self, self.app, self.accept, self._pending_results, self._pending_messages
        )

    # ---------------------------------------------------------------- the store
    @property
    def store(self) -> Store:
        """This process's store for the backend's database (shared with the broker's
        transport when the URL and options are the same)."""
        if self._store is None or self._store_pid != os.getpid():
            self._store = shared_store(self.config.url, self.config.options)
            self._store_pid = os.getpid()
        return self._store

    @property
    def tables(self) -> ResultStore:
        return self.store.results()

    @property
    def watcher(self) -> Watcher:
        return watcher_for(self.tables, self.config.fallback_interval)

    def as_uri(self, include_password: bool = False) -> str:
        url = self.config.url.url.render_as_string(hide_password=not include_password)
        return f"alkstore+{url}"

    def __reduce__(self, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        kwargs.setdefault("url", self.url)
        return super().__reduce__(args, kwargs)

    def exception_safe_to_retry(self, exc: BaseException) -> bool:
        return isinstance(exc, self.connection_errors)

    # ------------------------------------------------------------ key / value
    @staticmethod
    def _bytes(value: bytes | str) -> bytes:
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)

    def _key(self, task_id: str) -> str:
        return self.get_key_for_task(task_id)

    def _expires_at(self, seconds: float | None) -> float | None:
        return time.time() + float(seconds) if seconds else None

    def get(self, key: str) -> bytes | None:
        key = bytes_to_str(key)
        return self.tables.get_many([key]).get(key)

    def mget(self, keys: list[str]) -> list[bytes | None]:
        keys = [bytes_to_str(k) for k in keys]
        found = self.tables.get_many(keys)
        return [found.get(k) for k in keys]

    def set(self, key: str, value: bytes | str, expires: float | None = None) -> None:
        self._put(bytes_to_str(key), value, None, self.expires if expires is None else expires)

    def _set_with_state(self, key: str, value: bytes | str, state: str) -> None:
        expires = self.failure_expires if state == states.FAILURE else self.expires
        self._put(bytes_to_str(key), value, state, expires)

    def _put(
        self, key: str, value: bytes | str, state: str | None, expires: Any, keep: bool = False
    ) -> None:
        prefix = bytes_to_str(self.task_keyprefix)
        task_id = key[len(prefix) :] if key.startswith(prefix) else None
        at = self._expires_at(expires)
        self.tables.put(key, self._bytes(value), state, task_id, at, keep_success=keep)

    def _store_result(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        """As Celery's key/value backends (a SUCCESS is never overwritten: a lost
        worker's late state must not replace a result), with the check in the statement
        that stores it instead of a read before: one round trip per state stored."""
        meta = self._get_result_meta(
            result=result, state=state, traceback=traceback, request=request
        )
        meta["task_id"] = bytes_to_str(task_id)
        expires = self.failure_expires if state == states.FAILURE else self.expires
        try:
            self._put(self._key(task_id), self.encode(meta), state, expires, keep=True)
        except BackendStoreError as exc:
            raise BackendStoreError(str(exc), state=state, task_id=task_id) from exc
        return result

    def delete(self, key: str) -> None:
        self.tables.delete([bytes_to_str(key)])

    def expire(self, key: str, value: float | None) -> None:
        self.tables.expire(bytes_to_str(key), self._expires_at(value))

    def forget(self, task_id: str) -> None:
        super().forget(task_id)
        self.result_consumer.cancel_for(task_id)

    def cleanup(self) -> None:
        """Delete expired results and chords (Celery's ``celery.backend_cleanup``)."""
        self.tables.cleanup()

    # ------------------------------------------------------------------ chords
    def chord_seconds(self) -> float | None:
        """How long a chord's counter and parts live: ``result_chord_expires``, else
        ``result_expires`` (None or 0: for ever). Computed here, not by Celery's
        ``chord_expires`` (Celery 5.7 only), so every supported Celery agrees."""
        chord_expires = self.app.conf.get("result_chord_expires")
        if chord_expires is None:
            return self.expires or None
        return self.prepare_expires(chord_expires, type=int) or None

    def set_chord_size(self, group_id: str, chord_size: int) -> None:
        self.tables.chord_size(group_id, chord_size, chord.expires_at(self))

    def add_to_chord(self, group_id: str, result: Any) -> None:
        self.tables.chord_add(group_id, 1, chord.expires_at(self))

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        # As Celery's Redis backend: a header holding groups is saved, so the callback
        # gets the nested structure back (a flat header is rebuilt from its parts).
        if isinstance(header_result_args[1], _regen):
            return
        header = self.app.GroupResult(*header_result_args)
        if any(isinstance(r, GroupResult) for r in header.results):
            self.set(
                self.get_key_for_group(header.id),
                self.encode({"result": header.as_tuple()}),
                # as long as the header's results (a user reads them too)
                expires=max(self.chord_seconds() or 0, self.expires or 0) or None,
            )

    def on_chord_part_return(
        self, request: Any, state: str, result: Any, propagate: Any = None, **kwargs: Any
    ) -> Any:
        return chord.on_chord_part_return(self, request, state, result)

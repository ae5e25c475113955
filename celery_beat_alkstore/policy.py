"""Per-schedule beat policies kept in the schedule's ``options`` JSON (no column of their
own): the catch-up policy, no-stacking, and the beat's own state for them.

Keys starting with ``alkstore_`` in a stored ``options`` object are the engine's and are
never passed to ``apply_async``:

- ``alkstore_catch_up``: ``"replay"``, ``"once"`` or ``"skip"`` (absent: the beat's
  default, the setting ``beat_alkstore_catch_up``, else :data:`DEFAULT_CATCH_UP`);
- ``alkstore_no_stacking``: ``true`` to skip a due time while the previous run is live;
- ``alkstore_state``: written by the beat only (``job``: the job id of the last run,
  ``skipped``: due times skipped by no-stacking); an upsert keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kombu_alkstore.errors import ConfigurationError

#: Up to :data:`CATCH_UP_LIMIT` missed boundaries fired one by one (the old behaviour).
REPLAY = "replay"
#: One run for all the missed boundaries (Celery's beat and django-celery-beat).
ONCE = "once"
#: None of the missed boundaries runs: straight to the next future boundary.
SKIP = "skip"
POLICIES = (REPLAY, ONCE, SKIP)
#: The default: what Celery's own PersistentScheduler does after downtime (one run).
DEFAULT_CATCH_UP = ONCE
#: Missed boundaries replayed per schedule per tick under ``replay``.
CATCH_UP_LIMIT = 64

PREFIX = "alkstore_"
KEY_CATCH_UP = "alkstore_catch_up"
KEY_NO_STACKING = "alkstore_no_stacking"
KEY_STATE = "alkstore_state"
SETTING = "beat_alkstore_catch_up"


@dataclass(frozen=True)
class Policy:
    """A schedule's policies as stored: ``catch_up`` None means the beat's default."""

    catch_up: str | None = None
    no_stacking: bool = False
    #: Due times skipped because the previous run was still queued or running.
    skipped: int = 0
    #: The job id (the jobs table's primary key) of the last run, when recorded.
    job: int | None = None


def check_catch_up(value: Any, where: str = "") -> str | None:
    """``value`` if it is a catch-up policy (or None: the default), else a
    ConfigurationError naming the policies."""
    if value is None or value in POLICIES:
        return value
    raise ConfigurationError(
        f"{where}catch_up must be one of {', '.join(repr(p) for p in POLICIES)}, got {value!r}"
    )


def check_no_stacking(value: Any, where: str = "") -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigurationError(f"{where}no_stacking must be true or false, got {value!r}")
    return value


def check_user_options(options: Mapping[str, Any], where: str = "") -> None:
    """Refuse option names the engine reserves (``alkstore_…``)."""
    for key in options:
        if isinstance(key, str) and key.startswith(PREFIX):
            raise ConfigurationError(
                f"{where}option {key!r} is reserved (names starting with {PREFIX!r}); use "
                "catch_up= / no_stacking= for the beat's policies"
            )


def pack(options: Mapping[str, Any], catch_up: str | None, no_stacking: bool) -> dict:
    """The options to store: the user's, plus the policy keys when not the defaults."""
    out = dict(options)
    if catch_up is not None:
        out[KEY_CATCH_UP] = catch_up
    if no_stacking:
        out[KEY_NO_STACKING] = True
    return out


def split(options: Mapping[str, Any]) -> tuple[dict[str, Any], Policy]:
    """A stored ``options`` object as the ``apply_async`` options and the policies.
    Values this version cannot read are taken as the defaults (never an error here)."""
    plain = {k: v for k, v in options.items() if not str(k).startswith(PREFIX)}
    state = options.get(KEY_STATE)
    state = state if isinstance(state, Mapping) else {}
    catch_up = options.get(KEY_CATCH_UP)
    skipped, job = state.get("skipped"), state.get("job")
    return plain, Policy(
        catch_up=catch_up if catch_up in POLICIES else None,
        no_stacking=options.get(KEY_NO_STACKING) is True,
        skipped=skipped if isinstance(skipped, int) else 0,
        job=job if isinstance(job, int) and not isinstance(job, bool) else None,
    )


def default_catch_up(app: Any) -> str:
    """The app's default catch-up policy (``beat_alkstore_catch_up``, else ``once``)."""
    value = None if app is None else app.conf.get(SETTING)
    if value is None:
        return DEFAULT_CATCH_UP
    if value not in POLICIES:
        raise ConfigurationError(
            f"setting {SETTING} must be one of {', '.join(repr(p) for p in POLICIES)}, "
            f"got {value!r}"
        )
    return value

"""How a stored message and its figures read to a person: below both the operator CLI
(:mod:`kombu_alkstore.cli`) and the dashboard (:mod:`kombu_alkstore.web`), which import
from here and never from each other.

Modules: :mod:`.message` (a kombu/Celery body decoded, never deserialized beyond JSON),
:mod:`.format` (times, ages, one-line text).
"""

from __future__ import annotations

from .format import fmt_age, fmt_time, one_line
from .message import decode, job_dict

__all__ = ["decode", "fmt_age", "fmt_time", "job_dict", "one_line"]

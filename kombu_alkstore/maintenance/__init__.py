"""Maintenance: the store's named jobs (expire, lapsed, retention, dead offers, expired
queues), run by one worker at a time under a lease (see :mod:`.runner`)."""

from .rotator import HANDOFF_CHECK, Rotator
from .runner import LEASE, Maintenance

__all__ = ["HANDOFF_CHECK", "LEASE", "Maintenance", "Rotator"]

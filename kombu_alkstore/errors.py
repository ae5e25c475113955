"""Exceptions raised by kombu-alkstore.

Every user mistake (bad URL, option, name or schedule spec) raises a subclass of
:class:`ConfigurationError`, whose message names the offending value.
"""

from __future__ import annotations


class AlkstoreError(Exception):
    """Base class for every error raised by this package."""


class ConfigurationError(AlkstoreError, ValueError):
    """A URL, option or name is not acceptable; the message names it."""


class StoreUnavailable(AlkstoreError, ConnectionError):
    """The database cannot be reached (or was lost); retrying may succeed."""


class SchemaMissing(AlkstoreError):
    """The store's tables are not there (setup was turned off and never run)."""

"""Differences between the supported versions of the libraries we build on, one module
per library (``compat.celery``...): each workaround for an older release lives in its
library's module, so the rest of the package is written against one API (``compat.kombu``
holds one for every supported kombu: a retried declaration, where our transport and kombu
disagree on what a lost connection leaves behind). A database driver's differences live
in its engine package instead, the only place the driver is imported (psycopg's:
``store/postgres/compat.py``). The supported lines are those ``pyproject.toml`` declares
(docs/reliability.md, "Version floors")."""

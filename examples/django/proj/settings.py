"""A minimal Django project whose tasks commit or roll back with its database writes.

One database for Django and the broker: a task is published through Django's own
connection (``kombu_alkstore.django``), so it must be the broker's database.

    CELERY_BROKER_URL=alkstore+postgresql://user:password@host:5432/db   (the default below)
    CELERY_BROKER_URL=alkstore+sqlite:///shop.db                         (one file, no server)
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent

CELERY_BROKER_URL = os.environ.get(
    "CELERY_BROKER_URL", "alkstore+postgresql://postgres@127.0.0.1:5432/test"
)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # PostgreSQL: the schema of the broker's tables (Django's stay where they are);
    # SQLite: the prefix of their names in the same file.
    "schema": os.environ.get("SHOP_BROKER_SCHEMA", "alkstore"),
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True


def database_from_broker_url(url: str) -> dict:
    """Django's DATABASES entry for the broker's database."""
    parts = urlsplit(url.removeprefix("alkstore+"))
    if parts.scheme == "sqlite":  # sqlite:///relative.db, sqlite:////absolute/path.db
        name = parts.path[1:]
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name if os.path.isabs(name) else BASE_DIR / name,
            # One writer at a time: wait for the worker's claims and acks, not 5 s.
            "OPTIONS": {"timeout": 30},
        }
    options = {}
    if os.environ.get("SHOP_DB_SCHEMA"):  # Django's tables in this schema, not public
        options["options"] = f"-c search_path={os.environ['SHOP_DB_SCHEMA']}"
    return {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 (psycopg2 is not supported)
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


DATABASES = {"default": database_from_broker_url(CELERY_BROKER_URL)}

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["shop"]
MIDDLEWARE = []  # a JSON API for curl: no sessions, no CSRF
ROOT_URLCONF = "proj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

"""The Celery app, configured from Django's settings (the ``CELERY_`` names)."""

import os

from celery import Celery

# Registers the alkstore+ URL scheme with kombu. `celery worker` (and every other `celery`
# command) does not need it: the package's `celery.commands` entry point does the same when
# Celery's command line starts. The processes that publish do (`manage.py runserver`,
# gunicorn, `manage.py shell`, a script): without it, a publish from code that has not
# imported kombu_alkstore.django fails with "No such transport: alkstore". Importing it
# here, where the app is made, covers them all.
import kombu_alkstore  # noqa: F401

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The Celery app loads with Django, so `shared_task`s bind to it in every process
# (Celery's Django recipe).
from .celery import app as celery_app

__all__ = ["celery_app"]

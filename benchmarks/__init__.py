"""Benchmarks: ``python -m benchmarks`` runs the Celery end-to-end harness (see harness/)."""

"""The Celery end-to-end benchmark harness behind ``python -m benchmarks``.

tasks_module: the generated Celery app (worker side and publishing client);
brokers: a private place per session for each broker, and its cleanup;
procs: worker/client/py-spy subprocesses; session: the measurements;
report: aggregation, targets, markdown and chart; cli: the command.
"""

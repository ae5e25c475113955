"""Tables of the service's own read as Celery queues (the ``tables`` transport option).

:mod:`.spec` parses the option, :mod:`.render` renders an engine's statements for one
table, :mod:`.queue` claims and settles rows, :mod:`.message` makes a row a task
message, :mod:`.router` is the one seam where the transport meets them, :mod:`.counts`
gives the operator views their counts. See docs/tables.md.
"""

"""The receivers every process gets by importing ``kombu_alkstore`` (unique keys and
limit keys on ``before_task_publish``) leave apps on other brokers alone: a publish
through a ``memory://`` app finalizes no other app and logs nothing."""

from __future__ import annotations

import logging

from celery import Celery

import kombu_alkstore  # noqa: F401 - connects the receivers, as the entry point does


def test_a_publish_elsewhere_does_not_finalize_or_break_other_apps(caplog):
    lazy = Celery("lazy", broker="memory://", autofinalize=False, set_as_current=False)

    @lazy.task(name="lazy.t")
    def t():  # pragma: no cover - never runs
        pass

    other = Celery("other", broker="memory://", set_as_current=False)
    with caplog.at_level(logging.ERROR):
        other.send_task("not.a.task.anywhere")
    assert not lazy.finalized
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []

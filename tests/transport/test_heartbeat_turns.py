"""Whose turn a heartbeat is: the event loop's, on its claims connection, or the thread's,
on a pooled one (only when the loop is late). A policy test on a stepped clock; what a
worker does end to end is in test_connection_footprint.py."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

from kombu_alkstore.transport import heartbeat
from kombu_alkstore.transport.heartbeat import MAX_SLEEP, Heartbeater


def test_a_loop_looking_on_time_beats_before_the_thread_takes_its_turn(monkeypatch):
    """A 3 s visibility timeout (a beat a second, the thread's grace half a second): the
    loop looks every MAX_SLEEP, each look a few ms late by a different amount. After
    every look, the beat is either sent or the thread's turn is still beyond the next
    look. Without the loop's lead, a look a few ms before due sent nothing, and the
    thread's turn came with the next look: a third connection for that beat (reliability
    42.3)."""
    now = [1000.0]
    # The module's own clock only: time.monotonic stays real for every other thread.
    monkeypatch.setattr(heartbeat, "time", SimpleNamespace(monotonic=lambda: now[0]))
    held = {"tag": SimpleNamespace(visibility_timeout=3.0)}
    beats = Heartbeater(link=None, held=held, acks=SimpleNamespace(waiting=list), configured=30)
    beats.loop_beats = True
    beats.last = now[0]
    sent = []
    for look in range(1, 400):
        now[0] = 1000.0 + look * MAX_SLEEP + (look % 7) * 0.004  # 0–24 ms late
        if beats.take_due():
            sent.append(now[0])
        next_look = MAX_SLEEP + 0.024
        assert beats.due_in(grace=True) > next_look, f"the thread's turn at look {look}"
    gaps = [b - a for a, b in pairwise(sent)]
    assert len(sent) > 150 and max(gaps) <= 1.0 + 0.024, "the loop beat too seldom"

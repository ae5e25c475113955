"""The operator guard-rails of issue 33: paused queues in ``status``, a warning for pausing
an unknown queue, a question before ``dead purge --queue/--all``, and progress that does
not flood a log."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys

from kombu_alkstore.cli.output import Progress
from kombu_alkstore.present import fmt_time
from tests.cli.conftest import ROOT, run_cli

PROMPT = (
    "WARNING: This will remove {what} for good.\n"
    "         There is no undo for this operation!\n\n"
    "(to skip this prompt use the -f option)\n"
    "Are you sure you want to delete them? [y/N]: "
)
ABORTED = (
    "kombu-alkstore: error: aborted: nothing purged (answer y, or pass -f/--force to skip "
    "the question)\n"
)


def test_status_shows_paused_queues_in_text_and_json(target, seeder):
    seeder.send("proj.a", queue="work")
    seeder.send("proj.b", queue="other")
    seeder.store.pause_queue("work")
    seeder.store.pause_queue("idle")  # paused ahead of use: no messages, still shown
    paused = seeder.store.paused_queues()
    r = run_cli(target, "status")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].split() == [
        "QUEUE",
        "PENDING",
        "DELAYED",
        "PROCESSING",
        "DEAD",
        "OLDEST",
        "PAUSED",
    ]
    rows = {ln.split()[0]: ln for ln in lines[2:-1]}
    assert rows["work"].endswith(f"since {fmt_time(paused['work'])}")
    assert rows["idle"].split()[1:6] == ["0", "0", "0", "0", "-"]
    assert rows["idle"].endswith(f"since {fmt_time(paused['idle'])}")
    assert rows["other"].endswith(" -")
    assert lines[-1] == (
        "paused: claims stopped, publishes still land (resume: kombu-alkstore queue resume NAME)"
    )
    r = run_cli(target, "status", "--json")
    data = {row["queue"]: row for row in json.loads(r.out)}
    assert data["work"]["paused"] is True and data["work"]["paused_at"] == paused["work"]
    assert data["idle"]["paused"] is True and data["idle"]["pending"] == 0
    assert data["other"]["paused"] is False and data["other"]["paused_at"] is None
    r = run_cli(target, "status", "--queue", "other")
    shown = r.out.splitlines()[1:]  # under the store's URL
    assert shown[0].split()[-1] == "OLDEST" and len(shown) == 2  # none of them is paused


def test_pausing_an_unknown_queue_warns_and_names_the_queues(target, seeder):
    seeder.send("proj.a", queue="work")
    seeder.dead("proj.b", queue="broken")
    r = run_cli(target, "queue", "pause", "wrok")
    assert (r.code, r.out) == (0, "queue 'wrok' paused\n")
    assert r.err == (
        "kombu-alkstore: warning: no queue 'wrok' is declared or holds messages (a typo?); "
        "paused anyway, ahead of its first use; queues with messages: broken, work "
        "(kombu-alkstore status lists them)\n"
    )
    assert "wrok" in seeder.store.paused_queues()
    for known in ("work", "broken", "wrok"):  # messages, dead letters only, paused already
        r = run_cli(target, "queue", "pause", known)
        assert r.code == 0 and r.err == "", (known, r.err)


def test_pausing_an_unknown_queue_in_an_empty_store(target):
    target.open(setup=True).close()
    r = run_cli(target, "queue", "pause", "q")
    assert r.err == (
        "kombu-alkstore: warning: no queue 'q' is declared or holds messages (a typo?); "
        "paused anyway, ahead of its first use; no queue holds messages "
        "(kombu-alkstore status lists them)\n"
    )


def test_pausing_a_declared_empty_queue_does_not_warn(target):
    store = target.open(setup=True)
    store.queue_declare("declared")
    r = run_cli(target, "queue", "pause", "declared")
    assert (r.code, r.out, r.err) == (0, "queue 'declared' paused\n", "")
    store.close()


def test_dead_purge_queue_and_all_ask_first(target, seeder):
    for _ in range(2):
        seeder.dead("proj.a", queue="other")
    seeder.dead("proj.b")
    what = "2 dead letters of queue 'other'"
    for answer in ("n\n", "\n", "", "yes please\n"):
        r = run_cli(target, "dead", "purge", "--queue", "other", stdin=answer)
        assert r.code == 1, answer
        assert r.out == ""
        end = "" if answer else "\n"  # no input: the question's line is ended
        assert r.err == PROMPT.format(what=what) + end + ABORTED, answer
    r = run_cli(target, "dead", "purge", "--queue", "other")  # stdin unreadable: no
    assert r.code == 1 and r.err.endswith(ABORTED)
    assert seeder.store.counts(["other"])[0].dead == 2
    r = run_cli(target, "dead", "purge", "--queue", "other", stdin="Y\n")
    assert (r.code, r.out) == (0, "purged 2 dead letters of queue 'other'\n")
    assert r.err == PROMPT.format(what=what)
    r = run_cli(target, "dead", "purge", "--all", stdin="y\n")
    assert r.err == PROMPT.format(what="1 dead letter (every queue)")
    assert (r.code, r.out) == (0, "purged 1 dead letter\n")
    r = run_cli(target, "dead", "purge", "--all")
    assert (r.code, r.out, r.err) == (0, "no dead letters to purge\n", "")


def test_dead_purge_force_and_ids_do_not_ask(target, seeder):
    a, _ = seeder.dead("proj.a")
    seeder.dead("proj.b")
    r = run_cli(target, "dead", "purge", str(a))
    assert (r.code, r.out, r.err) == (0, "purged 1 dead letter\n", "")
    r = run_cli(target, "dead", "purge", "--all", "-f")
    assert (r.code, r.out, r.err) == (0, "purged 1 dead letter\n", "")


def test_dead_purge_piped_answer_in_a_subprocess(target, seeder):
    """As ``yes | celery purge``: the answer is read from a pipe; no input aborts."""
    seeder.dead("proj.a")
    argv = [sys.executable, "-m", "kombu_alkstore", "-b", target.broker_url]
    argv += ["--schema", target.schema, "dead", "purge", "--all"]
    run = dict(capture_output=True, text=True, cwd=ROOT, timeout=60)
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, **run)
    assert r.returncode == 1 and r.stderr.endswith(ABORTED)
    r = subprocess.run(argv, input="y\n", **run)
    assert (r.returncode, r.stdout) == (0, "purged 1 dead letter\n"), r.stderr


def test_progress_not_on_a_terminal_writes_a_line_per_tenth():
    err = io.StringIO()
    progress = Progress(60_000, err, "requeued", 1000)
    for n in range(1000, 60_001, 1000):
        progress.update(n)
    progress.done()
    lines = err.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0] == "requeued 6000/60000 (10%)"
    assert lines[-1] == "requeued 60000/60000 (100%)"


def test_requeue_progress_on_a_terminal_is_one_updating_line(sqlite_target):
    """A real terminal (a pty) on stdout and stderr: one line redrawn with ``\\r``."""
    store = sqlite_target.open(setup=True)
    for _ in range(50):
        store.enqueue("q", b"{}")
    store.fail(store.claim(["q"], 50), "boom")
    store.close()
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "kombu_alkstore", "-b", sqlite_target.broker_url]
    argv += ["--schema", sqlite_target.schema, "dead", "requeue", "--all", "--batch", "10"]
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave, cwd=ROOT, env=dict(os.environ))
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        data += chunk
    assert proc.wait(60) == 0
    os.close(master)
    text = data.decode()
    assert text.count("\r[") == 5
    assert text.endswith("\r[" + "#" * 30 + "] 50/50 requeued\r\nrequeued 50 dead letters\r\n")
    assert text.count("\n") == 2  # the bar's line, ended once, and the result

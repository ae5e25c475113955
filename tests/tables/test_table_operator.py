"""Table queues in the operator views, on every engine: ``kombu-alkstore status
--tables`` and the dashboard's figures (``/metrics``) list them like the other queues."""

from __future__ import annotations

import json

import pytest

from kombu_alkstore.tables.router import route_tables
from kombu_alkstore.tables.spec import parse_tables
from tests.cli.conftest import run_cli
from tests.tables.tablekit import insert, make_table, spec_for


@pytest.fixture
def seeded(store, target, tmp_path):
    """One row of each kind: due, delayed, processing (claimed), dead (attempts spent);
    and the ``--tables`` file naming the table."""
    make_table(target)
    future = "2999-01-01 00:00:00" if target.engine == "sqlite" else "2999-01-01T00:00:00Z"
    insert(target, "{}", prio=0)  # claimed below
    insert(target, "{}", prio=1)  # spent below
    insert(target, "{}", prio=2)  # due
    insert(target, "{}", retry_after=future)  # delayed
    tables = {"emails": spec_for(target, max_attempts=1)}
    router = route_tables(store, parse_tables(tables))
    first, second = router.claim(["emails"], 2)
    router.fail([second], "boom")  # its one attempt spent: stays, dead
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(tables))
    return path, router


def test_status_lists_the_table_queue(target, seeded):
    path, _ = seeded
    r = run_cli(target, "--tables", str(path), "status", "--json")
    assert r.code == 0, r.err
    (emails,) = [q for q in json.loads(r.out) if q["queue"] == "emails"]
    counts = {k: emails[k] for k in ("pending", "delayed", "processing", "dead")}
    assert counts == {"pending": 1, "delayed": 1, "processing": 1, "dead": 1}
    table = run_cli(target, "--tables", str(path), "status").out
    assert any(line.split()[:5] == ["emails", "1", "1", "1", "1"] for line in table.splitlines())


def test_status_refuses_a_mismatched_mapping_naming_the_column(target, seeded, tmp_path):
    path = tmp_path / "bad.json"
    columns = dict(spec_for(target)["columns"], priority="urgency")
    path.write_text(json.dumps({"emails": spec_for(target, columns=columns)}))
    r = run_cli(target, "--tables", str(path), "status")
    assert r.code != 0
    assert "column 'urgency' (role priority) is not in the table" in r.err


def test_metrics_count_the_table_queue(seeded):
    from prometheus_client.parser import text_string_to_metric_families

    from kombu_alkstore.web.metrics import registry, render
    from kombu_alkstore.web.sampler import Sampler

    _, router = seeded
    snap = Sampler(router).take()
    assert snap.error is None
    text = render(registry(lambda: snap)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for state, n in (("pending", 1), ("delayed", 1), ("processing", 1)):
        assert samples[("alkstore_queue_messages", (("queue", "emails"), ("state", state)))] == n
    assert samples[("alkstore_dead_letters", (("queue", "emails"),))] == 1

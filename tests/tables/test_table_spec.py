"""The ``tables`` transport option's shape (tables/spec.py): refused naming the key."""

from __future__ import annotations

import pytest

from kombu_alkstore.errors import ConfigurationError
from kombu_alkstore.tables.spec import parse_tables
from kombu_alkstore.transport.options import parse_transport_options

BASE = {"table": "jobs", "task": "t", "columns": {"id": "id", "locked_until": "lu"}}


def one(**over):
    return parse_tables({"q": {**BASE, **over}})[0]


def test_defaults_follow_the_roles():
    spec = one()
    assert (spec.mode, spec.on_success, spec.dead.kind, spec.group) == (
        "row",
        "delete",
        "stay",
        None,
    )
    columns = {**BASE["columns"], "payload": "body", "processed_at": "done", "group": "g"}
    spec = one(columns=columns)
    assert (spec.mode, spec.on_success, spec.group) == ("payload", "mark", "q")


@pytest.mark.parametrize(
    "over, says",
    [
        ({"columns": {"id": "id"}}, "needs the 'locked_until' role"),
        ({"columns": {**BASE["columns"], "colour": "c"}}, "unknown column role 'colour'"),
        ({"columns": {"id": "id", "locked_until": "id"}}, "column 'id' plays two roles"),
        ({"mode": "payload"}, "mode 'payload' needs a 'payload' column role"),
        ({"on_success": "mark"}, "needs a 'processed_at' column role"),
        ({"dead": {"group": "dead"}}, "needs a 'group' column role"),
        ({"dead": {"table": "d"}}, "needs an 'attempt' column role"),
        ({"group": "g"}, "group needs a 'group' column role"),
        ({"max_attempts": 0}, "max_attempts must be a positive integer"),
        ({"visibility_timeout": float("nan")}, "visibility_timeout must be a positive"),
        ({"task": ""}, "task must be a non-empty name"),
        ({"priority": 1}, "unknown key 'priority'"),
    ],
)
def test_bad_shapes_are_refused_naming_the_key(over, says):
    with pytest.raises(ConfigurationError, match="tables\\['q'\\]") as info:
        one(**over)
    assert says in str(info.value)


def test_the_transport_option_parses_it():
    _, options = parse_transport_options({"tables": {"q": BASE}})
    assert [s.queue for s in options.tables] == ["q"]
    with pytest.raises(ConfigurationError, match="must map queue names"):
        parse_transport_options({"tables": ["q"]})

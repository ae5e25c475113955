"""The ``celery alkstore`` command, registered as a ``celery.commands`` entry point.

Celery's command line (``celery.bin.celery``, Celery 5.x) loads every ``celery.commands``
entry point when it starts, before it parses the command line or builds an app. Loading
this module imports :mod:`kombu_alkstore`, which registers the ``alkstore`` transport
alias with kombu: so ``alkstore+postgresql://…`` and ``alkstore+sqlite:///…`` broker URLs
work in every ``celery`` command (worker, beat, inspect, control, events, shell...) and
in Flower (``celery flower``), with no import in user code and no app module.

The command itself runs the operator CLI (``kombu-alkstore``) on the app's broker and
schema: ``celery -A proj alkstore status`` is ``kombu-alkstore -b <broker_url> --schema
<broker_transport_options["schema"]> status`` (``-b``/``--schema`` given win).
"""

from __future__ import annotations

import click

import kombu_alkstore  # noqa: F401  (registers the alkstore+ scheme: the point of this module)

from . import cli


@click.command(
    name="alkstore",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def alkstore(ctx: click.Context, args: tuple[str, ...]) -> None:
    """kombu-alkstore's operator CLI on the app's broker (status, dead, setup, ...)."""
    argv = list(args)
    app = getattr(ctx.obj, "app", None)
    url = app.conf.broker_url if app is not None else None
    if url and not _given(argv, "-b", "--broker"):
        argv = ["-b", url, *argv]
    # The app's schema too: without it the command would read (or set up) the default one.
    options = (app.conf.broker_transport_options or {}) if app is not None else {}
    schema = options.get("schema")
    if schema and not _given(argv, "--schema"):
        argv = ["--schema", str(schema), *argv]
    ctx.exit(cli.main(argv))


def _given(argv: list[str], *flags: str) -> bool:
    """Whether the user gave one of ``flags`` (``--flag value`` or ``--flag=value``)."""
    return any(a in flags or a.startswith(tuple(f"{f}=" for f in flags)) for a in argv)

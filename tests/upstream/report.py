"""Print the upstream-suite tables of docs/reliability.md from the last run's reports.

``python -m tests.upstream.report`` reads ``kombu.json`` and ``celery.json`` that
``tests/upstream`` wrote (``$ALKSTORE_UPSTREAM_REPORT`` or the cache's ``reports/``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.upstream.sdists import cache_dir


def _load(name: str) -> dict:
    where = Path(os.environ.get("ALKSTORE_UPSTREAM_REPORT") or cache_dir() / "reports")
    return json.loads((where / f"{name}.json").read_text())


def kombu_table(data: dict) -> list[str]:
    lines = ["| kombu class | PostgreSQL | SQLite |", "|---|---|---|"]
    for cls, row in data["per_class"].items():
        pg, lite = row["postgresql"], row["sqlite"]
        lines.append(f"| `{cls}` | {pg[0]}/{pg[1]} | {lite[0]}/{lite[1]} |")
    e = data["engines"]
    lines.append(
        f"| **all** | **{e['postgresql']['passed']}/{e['postgresql']['total']}** "
        f"| **{e['sqlite']['passed']}/{e['sqlite']['total']}** |"
    )
    return lines


def celery_table(data: dict) -> list[str]:
    runs = {r["label"]: r for r in data["results"]}
    order = ["alkstore-postgresql", "alkstore-sqlite", "redis"]
    modules: list[str] = []
    for label in order:
        for test in runs[label]["outcomes"]:
            module = _module(test)
            if module not in modules:
                modules.append(module)
    lines = [
        "| Celery module | alkstore PostgreSQL | alkstore SQLite | Redis |",
        "|---|---|---|---|",
    ]
    for module in modules:
        cells = []
        for label in order:
            outcomes = [o for t, o in runs[label]["outcomes"].items() if _module(t) == module]
            cells.append(_cell(outcomes))
        lines.append(f"| `{module}` | " + " | ".join(cells) + " |")
    totals = [_cell(list(runs[label]["outcomes"].values()), bold=True) for label in order]
    lines.append("| **all** | " + " | ".join(totals) + " |")
    lines.append("")
    lines.append("Wall time of each run (the three at once): " + ", ".join(
        f"{label} {runs[label]['seconds']:.0f} s" for label in order
    ))  # fmt: skip
    return lines


def _module(test: str) -> str:
    path, _, rest = test.partition("::")
    name = path.rsplit("/", 1)[-1]
    if name == "test_canvas.py":
        return f"{name}::{rest.split('::')[0]}"
    return name


def _cell(outcomes: list[str], bold: bool = False) -> str:
    passed = outcomes.count("passed")
    skipped = outcomes.count("skipped")
    run = len(outcomes) - skipped
    text = f"{passed}/{run}"
    if bold:
        text = f"**{text}**"
    return text + (f" ({skipped} skipped)" if skipped else "")


def main() -> None:
    print("\n".join(kombu_table(_load("kombu"))))
    print()
    data = _load("celery")
    print("\n".join(celery_table(data)))
    print()
    print("versions:", data.get("versions"))


if __name__ == "__main__":
    main()

"""Superseded by the harness: ``python -m benchmarks`` (see docs/benchmarks.md).

Kept as an entry point: ``python benchmarks/celery_bench.py [options]`` runs the harness with
the same options (``--quick``, ``--brokers``, ``--reps``, ...).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

"""``python -m kombu_alkstore``: the operator CLI (see :mod:`kombu_alkstore.cli`)."""

import sys

from .cli import main

sys.exit(main())

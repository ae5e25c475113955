"""``python -m kombu_alkstore.cli``: the same as ``python -m kombu_alkstore``."""

import sys

from .run import main

sys.exit(main())

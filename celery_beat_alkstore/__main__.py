"""``python -m celery_beat_alkstore``."""

import sys

from .cli import main

sys.exit(main())

"""Task bookkeeping for the subprocess test apps, never through the broker under test."""

from __future__ import annotations

import os

#: The file each task run appends one line to (``ALKSTORE_TEST_RECORD``).
RECORD = os.environ.get("ALKSTORE_TEST_RECORD", "")


def record(*fields: object) -> None:
    """Append one line (atomic with O_APPEND) to the record file."""
    line = "\t".join(str(f) for f in fields) + "\n"
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)

"""Drives examples/django's views with Django's test client, in a process of its own (its
Django settings stay out of the test run). Run with examples/django on PYTHONPATH and the
example's environment (CELERY_BROKER_URL...).

    python django_client.py post ITEM [CARD]    the order view; prints {"status", "body"}
    python django_client.py status REF [WAIT]   the status view; prints its JSON (with WAIT
                                                seconds: once the receipt is there, or then)
"""

from __future__ import annotations

import json
import os
import sys
import time

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
    django.setup()
    from django.test import Client

    client = Client()
    command, *args = sys.argv[1:]
    if command == "post":
        data = {"item": args[0]}
        if len(args) > 1:
            data["card"] = args[1]
        response = client.post("/orders/", data)
        print(json.dumps({"status": response.status_code, "body": response.json()}))
    elif command == "status":
        end = time.monotonic() + (float(args[1]) if len(args) > 1 else 0)
        while True:
            body = client.get(f"/orders/{args[0]}/").json()
            if body["receipt"] is not None or time.monotonic() > end:
                break
            time.sleep(0.1)
        print(json.dumps(body))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
